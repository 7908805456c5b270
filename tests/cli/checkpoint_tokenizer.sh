#!/bin/sh
# Checkpoints carry their tokenizer: coda train --tokenizer saves it as
# OUT/tokenizer.json and names it (size, CRC-32) in the checkpoint; coda
# generate and coda eval then use it without being told (the same ids and
# loss as with --tokenizer, different from byte tokens), a changed or
# missing tokenizer.json is refused naming it, --tokenizer overrides (and
# must fit the model's vocab), a different tokenizer.json already in OUT is
# not replaced, and --resume, --init, --export-hf, --import-hf and
# --init-from carry it on. The tokenizer is trained with the `tokenizers`
# package (make_bpe_tokenizer.py).
#
#   sh tests/cli/checkpoint_tokenizer.sh PATH/TO/coda PYTHON3 WORKDIR
set -eu
coda=$1
py=$2
work=$3
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
i=0
while [ $i -lt 300 ]; do
  echo "Document $i: the quick brown fox jumps over the lazy dog near river $((i % 7))."
  echo ""
  i=$((i + 1))
done >c.txt
"$py" "$here/make_bpe_tokenizer.py" c.txt tok.json 320 || fail "training a tokenizer"
"$py" "$here/make_bpe_tokenizer.py" c.txt big.json 1000 || fail "training a second tokenizer"
model="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 1 --quiet"
# shellcheck disable=SC2086
"$coda" train $model --steps 2 --out r1 --data c.txt --tokenizer tok.json >t1.txt 2>&1 ||
  { cat t1.txt; fail "train --tokenizer"; }
cmp -s tok.json r1/tokenizer.json || fail "r1/tokenizer.json is not the tokenizer"
ck=r1/checkpoint.safetensors
grep -q '"tokenizer.file":"tokenizer.json"' $ck || fail "the checkpoint does not name its tokenizer"
# generate without --tokenizer: the checkpoint's tokenizer, the same ids as naming it
gen="--prompt-ids 5,9,17 --tokens 6 --temperature 0 --print-ids"
# shellcheck disable=SC2086
"$coda" generate --checkpoint $ck --prompt "the quick" --tokens 6 --temperature 0 --print-ids \
  >g1.txt 2>e1.txt || { cat e1.txt; fail "generate"; }
grep -q "tokenizer r1/tokenizer.json (named by the checkpoint, checksum verified)" e1.txt ||
  { cat e1.txt; fail "generate did not say it used the checkpoint's tokenizer"; }
"$coda" generate --checkpoint $ck --prompt "the quick" --tokens 6 --temperature 0 --print-ids \
  --tokenizer tok.json >g2.txt 2>/dev/null || fail "generate --tokenizer"
cmp -s g1.txt g2.txt || fail "generate: the checkpoint's tokenizer and --tokenizer disagree"
# --stats: the same ids on stdout, one line of counts on stderr
"$coda" generate --checkpoint $ck --prompt "the quick" --tokens 6 --temperature 0 --print-ids \
  --stats >g4.txt 2>e4.txt || { cat e4.txt; fail "generate --stats"; }
cmp -s g1.txt g4.txt || fail "generate --stats changed the ids"
np=$(grep -c . g1.txt); nt=$(wc -w <g1.txt)
grep -q "1 sequence, [0-9]* prompt tokens, first new token after [0-9.]* ms; $nt new tokens" e4.txt ||
  { cat e4.txt; fail "generate --stats: no line counting the $nt new tokens of $np sequence"; }
# the prompt as bytes continues differently: the tokenizer made a difference
"$coda" tokenize --tokenizer tok.json <<EOF >ids.txt || fail "tokenize"
the quick
EOF
[ "$(tr ' ' ',' <ids.txt)" != "116,104,101,32,113,117,105,99,107" ] || fail "the tokenizer encodes as bytes"
# shellcheck disable=SC2086
"$coda" generate --checkpoint $ck --prompt-ids "$(tr ' ' ',' <ids.txt)" --tokens 6 --temperature 0 \
  --print-ids >g3.txt 2>/dev/null || fail "generate --prompt-ids"
cmp -s g1.txt g3.txt || fail "generate: the prompt was not encoded with the checkpoint's tokenizer"
# eval on a corpus without --tokenizer: the loss of the tokenized corpus
"$coda" eval --checkpoint $ck --data c.txt --out ev1 --max-windows 4 >v1.txt 2>ve1.txt ||
  { cat ve1.txt; fail "eval"; }
grep -q "tokenizer r1/tokenizer.json (named by the checkpoint" ve1.txt || fail "eval: which tokenizer"
grep -q "vocabulary 320" v1.txt || { cat v1.txt; fail "eval did not tokenize with the tokenizer"; }
"$coda" eval --checkpoint $ck --data c.txt --out ev2 --max-windows 4 --tokenizer tok.json \
  >v2.txt 2>/dev/null || fail "eval --tokenizer"
[ "$(grep 'loss' v1.txt | sed 's/^[^:]*://')" = "$(grep 'loss' v2.txt | sed 's/^[^:]*://')" ] ||
  fail "eval: the checkpoint's tokenizer and --tokenizer give different losses"
# a changed tokenizer is refused, naming it; --tokenizer overrides
cp r1/tokenizer.json keep.json
printf ' ' >>r1/tokenizer.json
if "$coda" generate --checkpoint $ck $gen >/dev/null 2>e2.txt; then fail "a changed tokenizer was used"; fi
grep -q "r1/tokenizer.json is not the one the checkpoint was trained with" e2.txt ||
  { cat e2.txt; fail "changed tokenizer message"; }
if "$coda" eval --checkpoint $ck --data c.txt --out ev3 >/dev/null 2>e3.txt; then
  fail "eval used a changed tokenizer"
fi
grep -q "r1/tokenizer.json is not the one" e3.txt || { cat e3.txt; fail "eval: changed tokenizer message"; }
# shellcheck disable=SC2086
"$coda" generate --checkpoint $ck $gen --tokenizer keep.json >/dev/null 2>&1 ||
  fail "--tokenizer did not override a changed tokenizer"
# shellcheck disable=SC2086
if "$coda" generate --checkpoint $ck $gen --tokenizer big.json >/dev/null 2>e4.txt; then
  fail "a tokenizer larger than the model's vocab was used"
fi
grep -q "big.json has 3[2-9][0-9] tokens, more than the model's vocab 320" e4.txt ||
  { cat e4.txt; fail "vocab message"; }
rm r1/tokenizer.json
# shellcheck disable=SC2086
if "$coda" generate --checkpoint $ck $gen >/dev/null 2>e5.txt; then fail "a missing tokenizer passed"; fi
grep -q "the checkpoint's tokenizer r1/tokenizer.json is missing" e5.txt ||
  { cat e5.txt; fail "missing tokenizer message"; }
cp keep.json r1/tokenizer.json
# a different tokenizer.json already in OUT is not replaced
mkdir r2
echo '{"user": "file"}' >r2/tokenizer.json
# shellcheck disable=SC2086
if "$coda" train $model --steps 1 --out r2 --data c.txt --tokenizer tok.json >t2.txt 2>&1; then
  fail "train replaced r2/tokenizer.json"
fi
grep -q "r2/tokenizer.json already exists and differs from the tokenizer tok.json" t2.txt ||
  { cat t2.txt; fail "existing tokenizer message"; }
[ "$(cat r2/tokenizer.json)" = '{"user": "file"}' ] || fail "r2/tokenizer.json was changed"
# resume keeps naming it; --init into another directory copies it
# shellcheck disable=SC2086
"$coda" train --batch 2 --val-batches 1 --quiet --resume $ck --out r1 --steps 3 >/dev/null 2>&1 ||
  fail "resume"
grep -q '"tokenizer.file":"tokenizer.json"' $ck || fail "the resumed checkpoint lost its tokenizer"
"$coda" train --batch 2 --val-batches 1 --quiet --init $ck --out r3 --data c.txt --steps 1 \
  >t3.txt 2>&1 || { cat t3.txt; fail "init"; }
grep -q "from c.txt (r1/tokenizer.json)" t3.txt || { cat t3.txt; fail "--init did not tokenize with it"; }
cmp -s tok.json r3/tokenizer.json || fail "--init did not carry the tokenizer"
# export to a Hugging Face folder and back
"$coda" train --export-hf hf --resume $ck >/dev/null 2>&1 || fail "export"
cmp -s tok.json hf/tokenizer.json || fail "export did not write hf/tokenizer.json"
"$coda" train --import-hf hf --out imp >/dev/null 2>&1 || fail "import"
grep -q '"tokenizer.file":"tokenizer.json"' imp/checkpoint.safetensors || fail "import: not named"
"$coda" train --init-from hf --data c.txt --out ft --steps 1 --batch 2 --val-batches 1 --quiet \
  >t4.txt 2>&1 || { cat t4.txt; fail "--init-from"; }
grep -q "from c.txt (ft/tokenizer.json)" t4.txt || { cat t4.txt; fail "--init-from did not use it"; }
# shellcheck disable=SC2086
"$coda" generate --checkpoint ft/checkpoint.safetensors $gen >/dev/null 2>e6.txt ||
  { cat e6.txt; fail "generate after --init-from"; }
grep -q "tokenizer ft/tokenizer.json (named by the checkpoint" e6.txt || fail "after --init-from"
# coda eval scores only shards of the checkpoint's tokens: shards prepared
# with another tokenizer of the same vocabulary size (their source.txt
# names it), byte shards on a model with a tokenizer, and a binary file as
# --data are refused, by name (they printed a loss and exit 0)
i=0
while [ $i -lt 300 ]; do
  echo "Other words $i: lorem ipsum dolor sit amet, consectetur elit $((i % 5))."
  echo ""
  i=$((i + 1))
done >d.txt
"$py" "$here/make_bpe_tokenizer.py" d.txt other.json 320 || fail "training a third tokenizer"
if cmp -s other.json tok.json; then fail "the third tokenizer is the first"; fi
if "$coda" eval --checkpoint $ck --data c.txt --tokenizer other.json --out ev4 --max-windows 2 \
  >/dev/null 2>e7.txt; then fail "eval scored shards of another tokenizer"; fi
grep -q "prepared with the tokenizer other.json (its source.txt), which differs from the checkpoint's r1/tokenizer.json" e7.txt ||
  { cat e7.txt; fail "another tokenizer's message"; }
if "$coda" eval --checkpoint $ck --data ev4/data --max-windows 2 >/dev/null 2>e8.txt; then
  fail "eval scored a shard directory of another tokenizer"
fi
grep -q "which differs from the checkpoint's" e8.txt || { cat e8.txt; fail "shard directory message"; }
mkdir books
cp c.txt books/
"$coda" train --corpus books --prepare --out rb >/dev/null 2>&1 || fail "--corpus --prepare"
if "$coda" eval --checkpoint $ck --data rb/data --max-windows 2 >/dev/null 2>e9.txt; then
  fail "eval scored byte shards on a BPE model"
fi
grep -q "byte-token shards (vocabulary 256), but the model's tokenizer is r1/tokenizer.json" e9.txt ||
  { cat e9.txt; fail "byte shards message"; }
if "$coda" eval --checkpoint $ck --data $ck --out ev5 >/dev/null 2>e10.txt; then
  fail "eval scored a binary file"
fi
grep -q "coda eval: r1/checkpoint.safetensors: a NUL byte at byte offset [0-9]*: not a text file" e10.txt ||
  { cat e10.txt; fail "binary --data message"; }
echo "ok"
