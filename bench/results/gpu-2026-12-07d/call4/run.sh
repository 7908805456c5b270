#!/bin/bash
# Prepared call: every family's plans bound to the flat bf16 weights and
# fp32 gradient on the GPU trainer (model_device.c setup_bind). Checks it
# (test_train_device: Llama, Qwen3, GPT-2, Gemma 3 bound, against the CPU
# plan engine, and two half-scale micro-batches against one), then the
# family shapes' coda rows with the step profile ("weights to bf16" and the
# optimizer against gpu-2026-12-07c.md, calls 4-5) and Gemma 3's
# coda.torch row that call 5 lost. Carries .carry/p8 (the pack of the tree)
# and .whl/liger.
PACK=${PACK:-.carry/p8} source bench/gpu_env.sh
copy_bw
timeout -k 5 60 "$P/tests/test_train_device" > "$L/test_train_device.txt" 2>&1
echo "test_train_device exit $?"; tail -3 "$L/test_train_device.txt"
export CODA_LIBRARY=$P/lib/libcoda.so.0 PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
OUT=$L/train FAMILY_MODES=coda_patch SHAPES=gemma3-1b PROFILE=1 BUDGET=${BUDGET1:-95} \
  COMMIT="$COMMIT" bench/train/run.sh "$P" "" .whl/liger > "$L/train.txt" 2>&1
echo "train rc=$?"; cat "$L/train/train.md"
OUT=$L/train2 FAMILY_MODES= SHAPES="qwen3-1.7b gpt2-774m" PROFILE=1 BUDGET=${BUDGET2:-110} \
  COMMIT="$COMMIT" bench/train/run.sh "$P" "" .whl/liger > "$L/train2.txt" 2>&1
echo "train2 rc=$?"; cat "$L/train2/train.md"
cp "$L/train/train.json" "$O/train.json" 2>/dev/null
cp "$L/train2/train.json" "$O/train2.json" 2>/dev/null
finish
