#!/bin/sh
# GPT-2 (docs/models.md) through the CLI on the CPU: train from scratch
# with --engine auto (which takes the reference engine for gpt2), the
# training loss falls, --resume continues it, the
# checkpoint exports as GPT2LMHeadModel and imports back to the same
# bytes, coda generate (the host decoder) gives the same greedy ids from
# the checkpoint and from the exported folder, coda eval runs it,
# --init-from fine-tunes it (a shorter --seq refused: the positions are
# weights), and --engine plans (the GPT-2 block and head plans) trains it
# from the reference engine's first loss.
#
#   sh tests/cli/train_gpt2.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/family_lib.sh
. "$(dirname "$0")/family_lib.sh"

model="--family gpt2 --tied 1 --dim 32 --layers 2 --heads 2 --kv-heads 2 --ffn 64 --seq 32"
train_from_scratch "trained (engine auto: the reference engine)"
resume_to_45
export_round_trip GPT2LMHeadModel '"n_inner": 64'
generate_greedy 8 84,104,101 hf
eval_run
# fine-tuning from the exported folder starts where the run ended (its
# first loss well below a fresh model's); the position table keeps its seq
init_from_hf
"$coda" train --init-from hf --seq 16 --corpus corpus --batch 4 --steps 2 --val-batches 0 \
  --device cpu --out ft16 --quiet >ft16.txt 2>&1 && fail "--init-from with a shorter --seq"
grep -q "gpt2's learned positions are seq rows" ft16.txt || fail "shorter seq: $(cat ft16.txt)"
echo "ok: --init-from the exported folder: first loss $ft; a shorter --seq refused by name"
# data parallel: ZeRO-3's embedding bucket holds the position table
zero3_is_zero1 6
# the plan engine (GPT-2 block and head plans, bf16 storage) on the CPU:
# its first loss is the reference engine's up to bf16 rounding, and it
# falls as the reference's did
# shellcheck disable=SC2086
"$coda" train --corpus corpus $model --batch 4 --steps 40 --warmup 5 --lr 3e-3 --val-batches 0 \
  --device cpu --engine plans --out plans --quiet >plans.txt 2>&1 || { cat plans.txt; fail "--engine plans"; }
pfirst=$(sed -n 2p plans/loss.csv | cut -d, -f2)
plast=$(tail -1 plans/loss.csv | cut -d, -f2)
awk -v a="$first" -v b="$pfirst" 'BEGIN { d = a - b; exit !(d < 0.01 * a && -d < 0.01 * a) }' ||
  fail "--engine plans: first loss $pfirst, the reference engine's $first"
awk -v a="$pfirst" -v b="$plast" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "--engine plans: the training loss did not fall by 1 nat: $pfirst -> $plast"
echo "ok: --engine plans trained gpt2, loss $pfirst -> $plast"
