#!/bin/bash
# On a machine with an sm_90 GPU, in one call: the block-plan test, `coda
# bench block` for every configuration (fused, unfused, floor, peak memory)
# and PyTorch on the same blocks, logged under $OUT; then the merged table
# and chart (if matplotlib is there; otherwise run plot_block.py later on
# the logs). Uses .carry/gplan/ (or .carry/gplan.tgz) from
# bench/block/build.sh (the kernel cache included). The PyTorch baseline (baseline_torch.py: the Llama block in
# eager mode and under torch.compile, and its GEMM + SDPA floor) is the
# benchmark environment's script, not part of the project: copy it into
# bench/block/ (git-ignored) before the run. torch_peak.py adds PyTorch's
# peak memory for those blocks and the GPT-2 block (time and memory).
#
# Environment: BENCH_CONFIGS (default all), TORCH_CONFIGS (baseline_torch.py
# names; default all four), PEAK_CONFIGS (torch_peak.py names; default all),
# SKIP_TEST=1, SKIP_BENCH=1, SKIP_BASELINE=1, SKIP_PEAK=1 (to split the work
# over two calls: plot_block.py merges the logs afterwards), and time limits
# TEST_S, BENCH_S, TORCH_S, PEAK_S (seconds).
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gplan-out}
mkdir -p "$OUT"
[ -x .carry/gplan/coda ] || tar -xzf .carry/gplan.tgz -C .carry
export CODA_CACHE_DIR=$PWD/.carry/gplan/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
if [ -z "$SKIP_TEST" ]; then
  timeout ${TEST_S:-60} .carry/gplan/test_plan_gpu > "$OUT/test.log" 2>&1; echo "test rc=$?"
  tail -5 "$OUT/test.log"
fi
if [ -z "$SKIP_BENCH" ]; then
  # shellcheck disable=SC2086
  timeout ${BENCH_S:-240} .carry/gplan/coda bench block ${BENCH_CONFIGS:-all} --csv > "$OUT/block.csv" 2> "$OUT/block.err"
  echo "coda bench block rc=$?"
  cat "$OUT/block.csv"; tail -5 "$OUT/block.err"
fi
[ -f bench/block/baseline_torch.py ] || echo "bench/block/baseline_torch.py missing: no PyTorch Llama rows"
if [ -z "$SKIP_BASELINE" ]; then
  # shellcheck disable=SC2086
  BASELINE_OUT=$OUT timeout ${TORCH_S:-300} python3 bench/block/baseline_torch.py ${TORCH_CONFIGS:-seed-6L-512 gpt2s-768 llama1b-2048 llama8b-4096} > "$OUT/torch.log" 2>&1
  echo "torch rc=$?"
  grep -v "^ \|^{\|^}" "$OUT/torch.log" | tail -8
fi
if [ -z "$SKIP_PEAK" ]; then
  # shellcheck disable=SC2086
  OUT=$OUT timeout ${PEAK_S:-240} python3 bench/block/torch_peak.py ${PEAK_CONFIGS} > "$OUT/torch_peak.log" 2>&1
  echo "torch_peak rc=$?"
  tail -8 "$OUT/torch_peak.log"
fi
[ -f "$OUT/block.csv" ] && python3 bench/block/plot_block.py --csv "$OUT/block.csv" --baseline "$OUT/baseline.json" \
  --peak "$OUT/torch_peak.json" --md "$OUT/block.md" --png "$OUT/block.png" 2>&1 | tail -3
[ -f "$OUT/block.md" ] && cat "$OUT/block.md"
