#!/bin/sh
# Qwen3 (docs/models.md) through the CLI on the CPU reference engine: train
# from scratch (tied, head_dim 24 over dim 32 and 2 heads), the training
# loss falls, --resume continues it, the checkpoint exports as
# Qwen3ForCausalLM and imports back to the same bytes, and coda generate
# and coda eval run it; then the plan engine: eval and six training steps
# against the reference engine's losses.
#
#   sh tests/cli/train_qwen3.sh PATH/TO/coda WORKDIR
set -u
coda=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work" || exit 1
fail() { echo "FAIL: $*"; exit 1; }

mkdir corpus
i=0
while [ $i -lt 300 ]; do
  echo "The quick brown fox $i jumps over the lazy dog. Pack my box with five dozen jugs."
  echo "%"
  i=$((i + 1))
done >corpus/text
model="--family qwen3 --head-dim 24 --tied 1 --dim 32 --layers 2 --heads 2 --kv-heads 1 --ffn 64 --seq 32"
# shellcheck disable=SC2086
"$coda" train --corpus corpus $model --batch 4 --steps 40 --warmup 5 --lr 3e-3 --val-batches 0 \
  --device cpu --engine reference --out run --quiet >train.txt 2>&1 || { cat train.txt; fail "train"; }
first=$(sed -n 2p run/loss.csv | cut -d, -f2)
last=$(tail -1 run/loss.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "the training loss did not fall by 1 nat: $first -> $last"
echo "ok: trained, loss $first -> $last"
# shellcheck disable=SC2086
"$coda" train --resume run/checkpoint.safetensors --steps 45 --out run --val-batches 0 \
  --device cpu --engine reference \
  --quiet >resume.txt 2>&1 || { cat resume.txt; fail "resume"; }
[ "$(tail -1 run/loss.csv | cut -d, -f1)" = 45 ] || fail "resume did not reach step 45"
echo "ok: resumed to step 45"
"$coda" train --resume run/checkpoint.safetensors --export-hf hf >export.txt 2>&1 ||
  { cat export.txt; fail "export"; }
grep -q '"Qwen3ForCausalLM"' hf/config.json && grep -q '"head_dim": 24' hf/config.json &&
  grep -q '"tie_word_embeddings": true' hf/config.json || fail "export's config.json: $(cat hf/config.json)"
"$coda" train --import-hf hf --out back >import.txt 2>&1 || { cat import.txt; fail "import"; }
"$coda" train --resume back/checkpoint.safetensors --export-hf hf2 >export2.txt 2>&1 ||
  { cat export2.txt; fail "second export"; }
cmp -s hf/model.safetensors hf2/model.safetensors && cmp -s hf/config.json hf2/config.json ||
  fail "export -> import -> export changed the files"
echo "ok: exported as Qwen3ForCausalLM, imported back bit for bit"
out=$("$coda" generate --checkpoint run/checkpoint.safetensors --device cpu --temperature 0 \
  --tokens 8 --prompt-ids 84,104,101 --print-ids 2>&1) || fail "generate: $out"
[ "$(echo "$out" | wc -w)" -eq 8 ] || fail "generate printed '$out', not 8 ids"
echo "ok: generate: $out"
"$coda" eval --checkpoint run/checkpoint.safetensors --data run/data --device cpu \
  --engine reference >eval.txt 2>&1 || { cat eval.txt; fail "eval"; }
grep -q "loss" eval.txt || fail "eval printed no loss: $(cat eval.txt)"
echo "ok: eval: $(grep loss eval.txt | head -1)"
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
