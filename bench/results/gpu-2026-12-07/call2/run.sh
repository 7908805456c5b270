#!/bin/bash
# 2026-12-07, call 2 (same warm machine as call 1): the 13 sanitizer runs
# call 1's deadline left unstarted (synccheck of the trainer's device step,
# plans, graphs and AdamW; initcheck of every test), alone on the GPU.
PACK=.carry/p3 source bench/gpu_env.sh
SANITIZE_RUNS="synccheck/train-device synccheck/plan synccheck/graph synccheck/optim initcheck/*" \
  SANITIZE_DEADLINE_S=150 OUT=$L timeout -k 5 165 tests/gpu/sanitize.sh "$P" "$P/cache" > "$L/san2.txt" 2>&1
grep -E "^sanitize:" "$L/sanitize.log" | tail -16
finish
