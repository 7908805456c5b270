#!/bin/bash
# 2026-12-06 (d), call 1: the training table of issue 35 with every peer
# in the same call: d512, 1b and 1b-8k, coda with the fp32 master (fp32)
# and with the bf16 optimizer state (bf16), the step profile on, HF +
# Liger, torch.compile (bf16, fp32 master + autocast) and eager; first the
# optimizer kernels bit for bit against the host (test_optim_gpu) on this
# commit. Carries .carry/c4, .carry/peers (the benchmark environment's
# train_torch2.py and peers_train.py) and .whl/liger (liger-kernel 0.8.5).
PACK=.carry/c4
source bench/gpu_env.sh
timeout 40 "$P/tests/gpu/test_optim_gpu" > "$L/test_optim_gpu.log" 2>&1
echo "test_optim_gpu rc=$?"; tail -3 "$L/test_optim_gpu.log"
PROFILE=1 BUDGET=520 VARIANTS="fp32:|bf16:--optimizer-state bf16" \
  OUT=$L/train bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/train.log" 2>&1
echo "train rc=$?"; cat "$L/train/train.md"
finish
