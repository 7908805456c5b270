#!/bin/sh
# Gemma 3 (docs/models.md) through the CLI on the CPU: train from scratch
# with --engine auto (which takes the reference engine for gemma3; the
# plans refuse it by name) with local layers of a 6-token window over a
# 32-token sequence, the training loss falls, --resume continues it, the
# checkpoint exports as Gemma3ForCausalLM and imports back to the same
# bytes, coda generate (the host decoder, its cache attention windowed)
# gives the same greedy ids from the checkpoint and from the exported
# folder, coda eval runs it, --init-from fine-tunes it, two ranks with
# sharded weights match unsharded ones, and a --resume asking for another
# window is refused by name.
#
#   sh tests/cli/train_gemma3.sh PATH/TO/coda WORKDIR
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
model="--family gemma3 --tied 1 --dim 32 --layers 2 --heads 2 --kv-heads 1 --head-dim 24 --ffn 64
  --seq 32 --sliding-window 6 --sliding-pattern 2"
# shellcheck disable=SC2086
"$coda" train --corpus corpus $model --batch 4 --steps 40 --warmup 5 --lr 3e-3 --val-batches 0 \
  --device cpu --out run --quiet >train.txt 2>&1 || { cat train.txt; fail "train"; }
first=$(sed -n 2p run/loss.csv | cut -d, -f2)
last=$(tail -1 run/loss.csv | cut -d, -f2)
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "the training loss did not fall by 1 nat: $first -> $last"
echo "ok: trained (engine auto: the reference engine), loss $first -> $last"
"$coda" train --resume run/checkpoint.safetensors --steps 45 --out run --val-batches 0 \
  --device cpu --quiet >resume.txt 2>&1 || { cat resume.txt; fail "resume"; }
[ "$(tail -1 run/loss.csv | cut -d, -f1)" = 45 ] || fail "resume did not reach step 45"
echo "ok: resumed to step 45"
"$coda" train --resume run/checkpoint.safetensors --sliding-window 8 --steps 46 --out run \
  --val-batches 0 --device cpu --quiet >window.txt 2>&1 && fail "--resume with another window"
grep -q "has sliding-window 6, but sliding-window 8 was asked for" window.txt ||
  fail "another window: $(cat window.txt)"
echo "ok: --resume with another --sliding-window refused by name"
"$coda" train --resume run/checkpoint.safetensors --export-hf hf >export.txt 2>&1 ||
  { cat export.txt; fail "export"; }
grep -q '"Gemma3ForCausalLM"' hf/config.json && grep -q '"sliding_window": 6' hf/config.json &&
  grep -q '"layer_types": \["sliding_attention", "full_attention"\]' hf/config.json &&
  grep -q '"tie_word_embeddings": true' hf/config.json || fail "export's config.json: $(cat hf/config.json)"
"$coda" train --import-hf hf --out back >import.txt 2>&1 || { cat import.txt; fail "import"; }
"$coda" train --resume back/checkpoint.safetensors --export-hf hf2 >export2.txt 2>&1 ||
  { cat export2.txt; fail "second export"; }
cmp -s hf/model.safetensors hf2/model.safetensors && cmp -s hf/config.json hf2/config.json ||
  fail "export -> import -> export changed the files"
echo "ok: exported as Gemma3ForCausalLM, imported back bit for bit"
# a prompt and new tokens past the window: the cache attention is windowed
out=$("$coda" generate --checkpoint run/checkpoint.safetensors --device cpu --temperature 0 \
  --tokens 12 --prompt-ids 84,104,101,32,113,117,105,99,107 --print-ids 2>&1) || fail "generate: $out"
[ "$(echo "$out" | wc -w)" -eq 12 ] || fail "generate printed '$out', not 12 ids"
out_hf=$("$coda" generate --checkpoint hf --device cpu --temperature 0 \
  --tokens 12 --prompt-ids 84,104,101,32,113,117,105,99,107 --print-ids 2>&1) ||
  fail "generate hf: $out_hf"
[ "$out" = "$out_hf" ] || fail "generate: checkpoint '$out', exported folder '$out_hf'"
echo "ok: generate (host decoder): $out, the same from the exported folder"
"$coda" eval --checkpoint run/checkpoint.safetensors --data run/data --device cpu \
  >eval.txt 2>&1 || { cat eval.txt; fail "eval"; }
grep -q "loss" eval.txt || fail "eval printed no loss: $(cat eval.txt)"
echo "ok: eval: $(grep loss eval.txt | head -1)"
"$coda" train --init-from hf --corpus corpus --batch 4 --steps 2 --val-batches 0 --device cpu \
  --out ft --quiet >ft.txt 2>&1 || { cat ft.txt; fail "--init-from"; }
ft=$(sed -n 2p ft/loss.csv | cut -d, -f2)
awk -v a="$first" -v b="$ft" 'BEGIN { exit !(b < a - 1.0) }' ||
  fail "--init-from: first loss $ft, a fresh model's $first"
echo "ok: --init-from the exported folder: first loss $ft"
# data parallel over two CPU processes: weights sharded too (ZeRO-3, the
# layers' post-norms among them) gives ZeRO-1's bits
for z in 1 3; do
  # shellcheck disable=SC2086
  "$coda" train --data run/data $model --batch 2 --steps 4 --val-batches 0 --device cpu \
    --ranks 2 --zero $z --out "zero$z" --quiet >"zero$z.txt" 2>&1 || { cat "zero$z.txt"; fail "--zero $z"; }
done
cmp -s zero1/loss.csv zero3/loss.csv || fail "--zero 3 differs from --zero 1"
echo "ok: 2 ranks, --zero 3 = --zero 1 bit for bit"
# the plan engine is refused by name
# shellcheck disable=SC2086
"$coda" train --corpus corpus $model --batch 4 --steps 2 --val-batches 0 --device cpu \
  --engine plans --out plans --quiet >plans.txt 2>&1 && fail "--engine plans trained gemma3"
grep -q "family gemma3 trains on the reference engine" plans.txt || fail "plans: $(cat plans.txt)"
echo "ok: --engine plans refused by name"
