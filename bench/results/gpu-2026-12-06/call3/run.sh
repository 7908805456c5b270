#!/bin/bash
# 2026-12-06, call 3: the training benchmark (bench/train/run.sh) with every
# peer in the same call: d512, 1b and 1b-8k; coda with the defaults (base)
# and with cuDNN's non-deterministic attention backward (nondet), with the
# step profile. AdamW after the backward (CODA_OPTIM_OVERLAP=0) in both:
# call 2 measured the side queue slower at 1b, so it is off by default from
# the next commit on. Carries .carry/peers (the benchmark environment's
# train_torch2.py and peers_train.py) and .whl (liger-kernel 0.8.5).
source bench/results/gpu-2026-12-06/common.sh
PROFILE=1 BUDGET=545 VARIANTS="base:CODA_OPTIM_OVERLAP=0|nondet:CODA_OPTIM_OVERLAP=0 CODA_ATTENTION=cudnn-nondet" \
  OUT=$L/train bench/train/run.sh "$P" .carry/peers .whl > "$L/train.log" 2>&1
echo "train rc=$?"; cat "$L/train/train.md"
finish
