#!/bin/bash
# 2026-12-06 (c), call 2: every system in one call, coda with the fp32
# optimizer state (base, the default) and the bf16 state, the step profile
# on: bench/train/run.sh PACK .carry/peers .whl/liger at d512, 1b, 1b-8k.
# Carries .carry/c1 (tests/gpu/pack_shared.sh), .carry/peers (the benchmark
# environment's train_torch2.py and peers_train.py), .whl/liger.
source bench/results/gpu-2026-12-06c/common.sh
SHAPES="d512 1b 1b-8k" PROFILE=1 BUDGET=560 VARIANTS="base:|bf16:--optimizer-state bf16" \
  OUT=$L/train bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/train.log" 2>&1
echo "train rc=$?"; cat "$L/train/train.md"
finish
