#!/bin/bash
# Prepared call: bench_fused again with its cuBLAS handle given a 32 MiB
# workspace (gpu-2026-12-07c.md, call 6: its cuBLAS column took 1.17x
# torch.matmul's time at the same shapes, and coda's plain GEMM at the
# gate/up shape 2.019 ms against cuBLAS's 1.608 on that H100). With
# CODA_REF=1 and the reference's wheels staged (.whl/coda1 in a call
# before, as gpu-2026-12-07c/call2), the CODA reference's table follows in
# the same call. Carries .carry/fused (bench/fused/build.sh build
# .carry/fused) and, with CODA_REF=1, .whl/coda2. About 150 s alone.
if [ "${CODA_REF:-0}" = 1 ]; then
  bash bench/fused/run_device.sh .carry/fused coda_ref
else
  bash bench/fused/run_device.sh .carry/fused
fi
