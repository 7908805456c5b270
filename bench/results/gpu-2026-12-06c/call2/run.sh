#!/bin/bash
# 2026-12-06 (c), call 2: the bf16 optimizer state's update in fp32 with
# one hash per element (call 1 measured the double-precision update
# compute-bound). test_optim_gpu (bit for bit against the host), then
# bench/train/run.sh fp32 against bf16 state with the step profile,
# interleaved over two rounds at 1b (no peers in this call). Carries
# .carry/c3.
PACK=.carry/c3
source bench/results/gpu-2026-12-06c/common.sh
timeout 40 "$P/tests/gpu/test_optim_gpu" > "$L/test_optim_gpu.log" 2>&1
echo "test_optim_gpu rc=$?"; cat "$L/test_optim_gpu.log"
SHAPES="1b" ROUNDS=2 PROFILE=1 BUDGET=100 VARIANTS="fp32:|bf16:--optimizer-state bf16" \
  OUT=$L/ab bench/train/run.sh "$P" > "$L/ab.log" 2>&1
echo "ab rc=$?"; cat "$L/ab/train.md"
finish
