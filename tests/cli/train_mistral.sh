#!/bin/sh
# Mistral's sliding window on the llama family (docs/models.md) through the
# CLI on the CPU: train from scratch with every layer attending to the
# last 6 of a 32-token sequence, the training loss falls, --resume
# continues it, a --resume asking for another window is refused by name,
# the checkpoint exports as MistralForCausalLM with its sliding_window and
# imports back to the same bytes, coda generate (the host decoder, its
# cache attention windowed) gives the same greedy ids from the checkpoint
# and from the exported folder, coda eval runs it, --init-from fine-tunes
# it; then the plan engine: eval and six training steps against the
# reference engine's losses.
#
#   sh tests/cli/train_mistral.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/family_lib.sh
. "$(dirname "$0")/family_lib.sh"

model="--tied 1 --dim 32 --layers 2 --heads 4 --kv-heads 2 --ffn 64 --seq 32 --sliding-window 6"
train_from_scratch "trained (llama with a window)"
resume_to_45
resume_other_window_refused
export_round_trip MistralForCausalLM '"model_type": "mistral"' '"sliding_window": 6,'
# a prompt and new tokens past the window: the cache attention is windowed
generate_greedy 12 84,104,101,32,113,117,105,99,107 hf
eval_run
init_from_hf
echo "ok: --init-from the exported folder: first loss $ft"
plans_vs_reference
