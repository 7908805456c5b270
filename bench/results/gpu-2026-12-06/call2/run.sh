#!/bin/bash
# 2026-12-06, call 2: the trainer's context stream at the greatest priority
# and the optimizer's side queue at the least. The GPU tests (train smoke
# with (f), plans, graphs, attention with cuDNN), then AdamW beside the
# forward (base) against after the backward (serial), two interleaved
# rounds with the step profile at 1b and d512.
source bench/results/gpu-2026-12-06/common.sh
timeout 120 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/smoke.log" 2>&1
echo "smoke rc=$?"; grep -E "^(FAIL|bit-identical|train_gpu_smoke|batch)" "$L/smoke.log"
for t in test_plan_gpu test_graph_gpu test_attention_gpu; do
  timeout 120 "$P/tests/gpu/$t" > "$L/$t.log" 2>&1; echo "$t rc=$?"; tail -2 "$L/$t.log"
done
SHAPES="1b d512" ROUNDS=2 PROFILE=1 BUDGET=240 VARIANTS="base:|serial:CODA_OPTIM_OVERLAP=0" \
  OUT=$L/ab bench/train/run.sh "$P" > "$L/ab.log" 2>&1
echo "ab rc=$?"; cat "$L/ab/train.md"
finish
