#!/bin/bash
# Prepared call: the family shapes' training table (issue of the model
# families): coda train --device gpu at qwen3-1.7b, gpt2-774m and gemma3-1b
# with the step profile, and Hugging Face's model class of each family
# (eager, torch.compile, Liger's patch where Liger has one) and
# coda.torch's patch of the same class (apply_to_<family>) in the same call
# (bench/train/run.sh, bench/train/hf_family.py). Carries .carry/p8
# (tests/gpu/pack_shared.sh of the tree) and .whl/liger.
PACK=${PACK:-.carry/p8} source bench/gpu_env.sh
copy_bw
export CODA_LIBRARY=$P/lib/libcoda.so.0 PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
OUT=$L/train FAMILY_MODES=${FAMILY_MODES:-eager,compile,liger,coda_patch} SHAPES="${SHAPES:-qwen3-1.7b gpt2-774m gemma3-1b}" PROFILE=1 \
  BUDGET=${BUDGET:-550} COMMIT="$COMMIT" bench/train/run.sh "$P" "" .whl/liger > "$L/train.txt" 2>&1
echo "train rc=$?"; cat "$L/train/train.md"
cp "$L/train/train.json" "$O/train.json" 2>/dev/null
finish
