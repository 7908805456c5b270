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
"$coda" eval --checkpoint run/checkpoint.safetensors --data run/data --device cpu \
  --engine plans >eval_plans.txt 2>&1 || { cat eval_plans.txt; fail "eval --engine plans"; }
lr=$(grep -o 'loss [0-9.]*' eval.txt | head -1 | cut -d' ' -f2)
lp=$(grep -o 'loss [0-9.]*' eval_plans.txt | head -1 | cut -d' ' -f2)
awk -v a="$lr" -v b="$lp" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d < 0.01 * a) }' ||
  fail "eval: plan engine loss $lp vs reference $lr"
echo "ok: eval on the plan engine: loss $lp (reference $lr)"
# The plan engine (bf16 weights and activations) trains Qwen3 as the
# reference engine (fp32) does: the same seed and data, the loss of every
# step within 1% (bf16 rounding), for a head_dim (24) that is not dim / heads.
for e in reference plans; do
  # shellcheck disable=SC2086
  "$coda" train --corpus corpus $model --batch 4 --steps 6 --warmup 2 --lr 3e-3 --val-batches 0 \
    --device cpu --engine $e --out "eng_$e" --quiet >"eng_$e.txt" 2>&1 ||
    { cat "eng_$e.txt"; fail "train --engine $e"; }
done
paste -d, eng_reference/loss.csv eng_plans/loss.csv | awk -F, -v n="$(awk -F, 'NR == 1 { print NF }' eng_reference/loss.csv)" '
  NR > 1 { a = $2; b = $(n + 2); d = a - b; if (d < 0) d = -d; steps++
           if (!(a > 0) || d >= 0.01 * a) { print "step " $1 ": reference " a ", plans " b; bad = 1 } }
  END { exit bad || steps != 6 }' || fail "plan engine vs reference: losses differ (above)"
echo "ok: 6 steps on the plan engine within 1% of the reference: $(tail -1 eng_plans/loss.csv | cut -d, -f2) vs $(tail -1 eng_reference/loss.csv | cut -d, -f2)"
