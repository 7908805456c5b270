#!/bin/bash
# Prepared call 1: the training table at d512, 1b and 1b-8k with
# every peer in one call (eager, torch.compile bf16, torch.compile with fp32
# master weights at d512 and 1b; torch.compile bf16 at 1b-8k; HF + Liger at
# every shape), coda (fp32 optimizer state, the default) with the step
# profile. Carries .carry/p6 (tests/gpu/pack_shared.sh of the tree),
# .carry/peers, .whl/liger.
PACK=${PACK:-.carry/p6} source bench/gpu_env.sh
copy_bw
OUT=$L/train PROFILE=1 BUDGET=${BUDGET:-560} COMMIT="$COMMIT" \
  bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/train.txt" 2>&1
echo "train rc=$?"; cat "$L/train/train.md"
cp "$L/train/train.json" "$O/train.json" 2>/dev/null
finish
