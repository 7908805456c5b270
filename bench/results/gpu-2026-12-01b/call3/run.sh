#!/bin/bash
# Call 3 (b): every GPU test after the merges of the day (GEMM, epilogue
# programs incl. the half-split and max-reduction ones, attention, plans,
# graph replay, debug mode, the KV-cache decoder against the CPU decoder,
# coda run), the GPU training smoke test, the decoder benchmark, RoPE
# scaling and RMSNorm eps of imported models on the GPU against the CPU,
# and which libraries `coda version` loads.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$L/gpu.txt"
OUT=$L timeout 420 tests/gpu/run_all.sh "$P" tests train generate; echo "run_all rc=$?"
export CODA_CACHE_DIR=$P/cache
W=$(mktemp -d)
timeout 90 tests/gpu/hf_rope_eps_gpu.sh "$P" "$W/hfr" > "$L/hf-rope-eps.log" 2>&1; echo "hf_rope_eps rc=$?"; tail -8 "$L/hf-rope-eps.log"
LD_DEBUG=libs "$P/coda" version 2> "$L/version-libs.txt" > /dev/null
echo "coda version: nvrtc $(grep -c 'libnvrtc' "$L/version-libs.txt") cublas $(grep -c 'libcublas' "$L/version-libs.txt") lines in LD_DEBUG"
rm -f "$L/version-libs.txt"
grep -E "^== .*exit|PASS|FAIL" "$L/gpu-tests.log" | head -40
