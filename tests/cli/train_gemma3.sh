#!/bin/sh
# Gemma 3 (docs/models.md) through the CLI on the CPU: train from scratch
# with --engine auto (which takes the reference engine for gemma3) with
# local layers of a 6-token window over a
# 32-token sequence, the training loss falls, --resume continues it, the
# checkpoint exports as Gemma3ForCausalLM and imports back to the same
# bytes, coda generate (the host decoder, its cache attention windowed)
# gives the same greedy ids from the checkpoint and from the exported
# folder, coda eval runs it, --init-from fine-tunes it, two ranks with
# sharded weights match unsharded ones, and a --resume asking for another
# window is refused by name; then the plan engine: eval and six training
# steps against the reference engine's losses.
#
#   sh tests/cli/train_gemma3.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/family_lib.sh
. "$(dirname "$0")/family_lib.sh"

model="--family gemma3 --tied 1 --dim 32 --layers 2 --heads 2 --kv-heads 1 --head-dim 24 --ffn 64
  --seq 32 --sliding-window 6 --sliding-pattern 2"
train_from_scratch "trained (engine auto: the reference engine)"
resume_to_45
resume_other_window_refused
export_round_trip Gemma3ForCausalLM '"sliding_window": 6' \
  '"layer_types": \["sliding_attention", "full_attention"\]'
# a prompt and new tokens past the window: the cache attention is windowed
generate_greedy 12 84,104,101,32,113,117,105,99,107 hf
eval_run
init_from_hf
echo "ok: --init-from the exported folder: first loss $ft"
# data parallel: ZeRO-3 shards the layers' post-norms among the weights
zero3_is_zero1 4
# the plan engine (the Gemma 3 block plan on the CPU backend): eval within
# 1 % of the reference engine's, and six training steps from the same seed
# and data, each step's loss within 1 % of the reference engine's
plans_vs_reference
