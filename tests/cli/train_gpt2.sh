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
model="--family gpt2 --tied 1 --dim 32 --layers 2 --heads 2 --kv-heads 2 --ffn 64 --seq 32"
# shellcheck disable=SC2086
"$coda" train --corpus corpus $model --batch 4 --steps 40 --warmup 5 --lr 3e-3 --val-batches 0 \
  --device cpu --out run --quiet >train.txt 2>&1 || { cat train.txt; fail "train"; }
first=$(sed -n 2p run/loss.csv | cut -d, -f2)
last=$(tail -1 run/loss.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "the training loss did not fall by 1 nat: $first -> $last"
echo "ok: trained (engine auto: the reference engine), loss $first -> $last"
# shellcheck disable=SC2086
"$coda" train --resume run/checkpoint.safetensors --steps 45 --out run --val-batches 0 \
  --device cpu --quiet >resume.txt 2>&1 || { cat resume.txt; fail "resume"; }
[ "$(tail -1 run/loss.csv | cut -d, -f1)" = 45 ] || fail "resume did not reach step 45"
echo "ok: resumed to step 45"
"$coda" train --resume run/checkpoint.safetensors --export-hf hf >export.txt 2>&1 ||
  { cat export.txt; fail "export"; }
grep -q '"GPT2LMHeadModel"' hf/config.json && grep -q '"n_inner": 64' hf/config.json &&
  grep -q '"tie_word_embeddings": true' hf/config.json || fail "export's config.json: $(cat hf/config.json)"
"$coda" train --import-hf hf --out back >import.txt 2>&1 || { cat import.txt; fail "import"; }
"$coda" train --resume back/checkpoint.safetensors --export-hf hf2 >export2.txt 2>&1 ||
  { cat export2.txt; fail "second export"; }
cmp -s hf/model.safetensors hf2/model.safetensors && cmp -s hf/config.json hf2/config.json ||
  fail "export -> import -> export changed the files"
echo "ok: exported as GPT2LMHeadModel, imported back bit for bit"
out=$("$coda" generate --checkpoint run/checkpoint.safetensors --device cpu --temperature 0 \
  --tokens 8 --prompt-ids 84,104,101 --print-ids 2>&1) || fail "generate: $out"
[ "$(echo "$out" | wc -w)" -eq 8 ] || fail "generate printed '$out', not 8 ids"
out_hf=$("$coda" generate --checkpoint hf --device cpu \
  --temperature 0 --tokens 8 --prompt-ids 84,104,101 --print-ids 2>&1) || fail "generate hf: $out_hf"
[ "$out" = "$out_hf" ] || fail "generate: checkpoint '$out', exported folder '$out_hf'"
echo "ok: generate (host decoder): $out, the same from the exported folder"
"$coda" eval --checkpoint run/checkpoint.safetensors --data run/data --device cpu \
  >eval.txt 2>&1 || { cat eval.txt; fail "eval"; }
grep -q "loss" eval.txt || fail "eval printed no loss: $(cat eval.txt)"
echo "ok: eval: $(grep loss eval.txt | head -1)"
# fine-tuning from the exported folder starts where the run ended (its
# first loss well below a fresh model's); the position table keeps its seq
"$coda" train --init-from hf --corpus corpus --batch 4 --steps 2 --val-batches 0 --device cpu \
  --out ft --quiet >ft.txt 2>&1 || { cat ft.txt; fail "--init-from"; }
ft=$(sed -n 2p ft/loss.csv | cut -d, -f2)
awk -v a="$first" -v b="$ft" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "--init-from: first loss $ft, a fresh model's $first"
"$coda" train --init-from hf --seq 16 --corpus corpus --batch 4 --steps 2 --val-batches 0 \
  --device cpu --out ft16 --quiet >ft16.txt 2>&1 && fail "--init-from with a shorter --seq"
grep -q "gpt2's learned positions are seq rows" ft16.txt || fail "shorter seq: $(cat ft16.txt)"
echo "ok: --init-from the exported folder: first loss $ft; a shorter --seq refused by name"
# data parallel over two CPU processes: weights sharded too (ZeRO-3, whose
# embedding bucket holds the position table) gives ZeRO-1's bits
for z in 1 3; do
  # shellcheck disable=SC2086
  "$coda" train --data run/data $model --batch 2 --steps 6 --val-batches 0 --device cpu \
    --ranks 2 --zero $z --out "zero$z" --quiet >"zero$z.txt" 2>&1 || { cat "zero$z.txt"; fail "--zero $z"; }
done
cmp -s zero1/loss.csv zero3/loss.csv || fail "--zero 3 differs from --zero 1"
echo "ok: 2 ranks, --zero 3 = --zero 1 bit for bit"
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
