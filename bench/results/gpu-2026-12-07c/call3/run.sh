#!/bin/bash
# Prepared call 3, on the machine of calls 1-2: the fused-GEMM
# benchmark (bench_fused: coda's plain and fused GEMMs, cuBLAS + separate
# kernels) and, in the same call, the CODA reference's released fused
# GEMMs at the same shapes (coda_ref_fused.py: linear_swiglu forward and
# backward, gemm_rope, linear_cross_entropy). Carries .carry/fused
# (bench/fused/build.sh build .carry/fused) and .whl/coda2; .whl/coda1's
# wheels were staged by call 2.
bash bench/fused/run_device.sh .carry/fused coda_ref
