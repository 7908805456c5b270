#!/bin/bash
# On a machine with an sm_90 GPU: the block-plan test, the block benchmark
# and the PyTorch baseline, logged under $OUT. Uses .carry/gplan/ from
# bench/block/build.sh (the kernel cache included). The PyTorch baseline
# (baseline_torch.py: the same block in eager mode and under torch.compile,
# and its GEMM + SDPA floor) is the benchmark environment's script, not part
# of the project: copy it into bench/block/ (git-ignored) before the run.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gplan-out}
mkdir -p "$OUT"
export CODA_CACHE_DIR=$PWD/.carry/gplan/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
timeout 60 .carry/gplan/test_plan_gpu > "$OUT/test.log" 2>&1; echo "test rc=$?"
tail -60 "$OUT/test.log"
timeout ${BENCH_S:-100} .carry/gplan/bench_block ${BENCH_CONFIGS} > "$OUT/bench.md" 2> "$OUT/bench.err"; echo "bench rc=$?"
cat "$OUT/bench.md"; tail -5 "$OUT/bench.err"
[ -f bench/block/baseline_torch.py ] || echo "bench/block/baseline_torch.py missing: no PyTorch rows"
BASELINE_OUT=$OUT timeout ${TORCH_S:-120} python3 bench/block/baseline_torch.py ${TORCH_CONFIGS:-seed-6L-512 llama1b-2048 llama8b-4096} > "$OUT/torch.log" 2>&1; echo "torch rc=$?"
grep -v "^ \|^{\|^}" "$OUT/torch.log" | tail -20
