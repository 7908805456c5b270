#!/bin/bash
# 2026-12-06, call 5: attention auto's free-memory bound. coda train at
# 1b-8k (13 steps) with the defaults: which attention the backward takes
# (CODA_DEBUG is not needed: the step time and peak memory tell cuDNN's
# deterministic backward, 74.9 GiB, from the own kernels, 58.7 GiB), and
# that the run completes.
source bench/results/gpu-2026-12-06/common.sh
SHAPES="1b-8k" STEPS=13 BUDGET=150 OUT=$L/t bench/train/run.sh "$P" > "$L/t.log" 2>&1
echo "rc=$?"; cat "$L/t/train.md"
finish
