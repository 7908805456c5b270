#!/bin/bash
# On a machine with an sm_90 GPU: the fused-GEMM benchmark (bench_fused:
# plain GEMM, fused GEMM, cuBLAS + separate kernels) and, in the same call,
# PyTorch eager and quack on the same operations (quack_fused.py). Logs go
# to $OUT. Takes the folder written by build.sh (default .carry/fused);
# installs the wheels of .whl/ (fetch_quack.sh) when present. About 2-3
# minutes of GPU time, most of it quack compiling its kernels.
#
#   bash bench/fused/run_device.sh [PACK_DIR]
cd "$(dirname "$0")/../.."
P=${1:-.carry/fused}
OUT=${OUT:-/tmp/fused-out}
W=$(mktemp -d)
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
tar -xzf "$P/fused.tgz" -C "$W" || { echo "no $P/fused.tgz (run bench/fused/build.sh)"; exit 1; }
export CODA_CACHE_DIR=$W/cache
timeout ${BENCH_S:-150} "$W/bench_fused" ${BENCH_ARGS:-} > "$OUT/bench_fused.md" 2> "$OUT/bench_fused.err"
echo "bench_fused rc=$?"
cat "$OUT/bench_fused.md"; tail -5 "$OUT/bench_fused.err"
if ls .whl/*.whl > /dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl > "$OUT/pip.log" 2>&1 || tail -5 "$OUT/pip.log"
  # the CuTe DSL wheel puts its packages on the path with a .pth file,
  # which PYTHONPATH folders do not read
  export PYTHONPATH=/tmp/site:/tmp/site/nvidia_cutlass_dsl/python_packages${PYTHONPATH:+:$PYTHONPATH}
else
  echo "no wheels in .whl/ (bench/fused/fetch_quack.sh): PyTorch rows only"
fi
PYTHONUNBUFFERED=1 timeout ${QUACK_S:-200} python3 bench/fused/quack_fused.py \
  --budget-s ${QUACK_BUDGET_S:-140} ${QUACK_ARGS:-} > "$OUT/quack_fused.md" 2> "$OUT/quack_fused.err"
echo "quack_fused rc=$?"
cat "$OUT/quack_fused.md"; grep -v "^ " "$OUT/quack_fused.err" | tail -8
rm -rf "$W"
