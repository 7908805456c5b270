#!/bin/sh
# coda train --data on a corpus: a text file and JSON Lines train (exit 0),
# the shards land in OUT/data with their stamp, a second run with the same
# corpus reuses them, a changed corpus prepares them again.
#
#   sh tests/cli/train_data.sh PATH/TO/coda WORKDIR
set -eu
coda=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
i=0
while [ $i -lt 200 ]; do
  echo "Document $i: the quick brown fox jumps over the lazy dog."
  echo "It has a second line."
  echo ""
  echo "{\"id\": $i, \"body\": \"json document $i with some words\"}" >>c.jsonl
  i=$((i + 1))
done >c.txt
model="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 1 --steps 2 --quiet"
# shellcheck disable=SC2086
"$coda" train $model --out r1 --data c.txt >out1.txt 2>&1 || { cat out1.txt; fail "text corpus"; }
grep -q "preparing token shards in r1/data from c.txt" out1.txt || fail "no preparation line"
[ -f r1/data/train.tok ] && [ -f r1/data/val.tok ] && [ -f r1/data/source.txt ] || fail "shards"
# shellcheck disable=SC2086
"$coda" train $model --out r1 --data c.txt >out2.txt 2>&1 || { cat out2.txt; fail "second run"; }
grep -q "reused" out2.txt || fail "shards not reused"
echo "one more document" >>c.txt
touch -d '2030-01-01' c.txt 2>/dev/null || touch c.txt
# shellcheck disable=SC2086
"$coda" train $model --out r1 --data c.txt >out3.txt 2>&1 || { cat out3.txt; fail "changed corpus"; }
grep -q "preparing token shards" out3.txt || fail "a changed corpus was not prepared again"
# shellcheck disable=SC2086
"$coda" train $model --out r2 --data c.jsonl --text-field body >out4.txt 2>&1 || { cat out4.txt; fail "jsonl"; }
# shellcheck disable=SC2086
"$coda" train $model --out r3 --data c.jsonl --text-field body --prepare >out5.txt 2>&1 || fail "--prepare"
[ -f r3/data/train.tok ] && [ ! -f r3/checkpoint.safetensors ] || fail "--prepare trained"
# fine-tuning from a Hugging Face directory, then coda eval on the corpus
"$coda" train --export-hf hf --resume r1/checkpoint.safetensors >/dev/null || fail "export"
"$coda" train --init-from hf --data c.txt --out ft --steps 2 --batch 2 --val-batches 1 --quiet \
  >out6.txt 2>&1 || { cat out6.txt; fail "--init-from"; }
grep -q "imported hf into ft/init-hf.safetensors" out6.txt || fail "no import line"
# fine-tuning at a shorter sequence than the checkpoint's window; a longer one is refused
"$coda" train --init-from hf --data c.txt --out ft8 --seq 8 --steps 1 --batch 2 --val-batches 1 \
  --quiet >out6b.txt 2>&1 || { cat out6b.txt; fail "--init-from --seq 8"; }
if "$coda" train --init-from hf --data c.txt --out ft32 --seq 32 --steps 1 --batch 2 \
  --val-batches 1 --quiet >out6c.txt 2>&1; then fail "--init-from --seq 32 (above the window) ran"; fi
grep -q "seq 16, but seq 32 was asked for" out6c.txt || { cat out6c.txt; fail "--seq 32 message"; }
"$coda" eval --checkpoint ft/checkpoint.safetensors --data ft/data --max-windows 3 >out7.txt 2>&1 \
  || { cat out7.txt; fail "eval"; }
grep -q "ft/data/val.tok: loss [0-9.]*  perplexity [0-9.]*  (48 tokens in 3 windows)" out7.txt \
  || { cat out7.txt; fail "eval output"; }
"$coda" eval --checkpoint ft/checkpoint.safetensors --data c.jsonl --text-field body --out ev \
  --split all --max-windows 2 >out8.txt 2>&1 || { cat out8.txt; fail "eval on a corpus"; }
grep -q "^all: loss" out8.txt || fail "eval all"
if "$coda" eval --checkpoint ft/checkpoint.safetensors --data nothere >out9.txt 2>&1; then
  fail "eval of a missing path succeeded"
fi
grep -q "nothere: no such file" out9.txt || fail "eval message"
echo "ok"
