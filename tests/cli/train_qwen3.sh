#!/bin/sh
# Qwen3 (docs/models.md) through the CLI on the CPU reference engine: train
# from scratch (tied, head_dim 24 over dim 32 and 2 heads), the training
# loss falls, --resume continues it, the checkpoint exports as
# Qwen3ForCausalLM and imports back to the same bytes, and coda generate
# and coda eval run it; then the plan engine: eval and six training steps
# against the reference engine's losses.
#
#   sh tests/cli/train_qwen3.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/family_lib.sh
. "$(dirname "$0")/family_lib.sh"

model="--family qwen3 --head-dim 24 --tied 1 --dim 32 --layers 2 --heads 2 --kv-heads 1 --ffn 64 --seq 32"
train_from_scratch trained --engine reference
resume_to_45 --engine reference
export_round_trip Qwen3ForCausalLM '"head_dim": 24'
generate_greedy 8 84,104,101
eval_run --engine reference
# The plan engine (bf16 weights and activations) evaluates and trains
# Qwen3 as the reference engine (fp32) does, for a head_dim (24) that is
# not dim / heads.
plans_vs_reference
