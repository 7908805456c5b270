#!/bin/sh
# Progress bars of coda train --data (corpus preparation), coda train's
# validation and coda eval:
# drawn on stderr when it is a terminal (run under script(1), which gives
# the command a pseudo-terminal), nothing of them when stderr is a file.
#
#   sh tests/cli/progress_bar.sh PATH/TO/coda WORKDIR
set -eu
coda=$1
work=$2
rm -rf "$work"
mkdir -p "$work"
cd "$work"
fail() { echo "FAIL: $*"; exit 1; }
command -v script >/dev/null 2>&1 || fail "no script(1) on PATH (Debian's bsdutils)"
i=0
while [ $i -lt 200 ]; do
  echo "Document $i: the quick brown fox jumps over the lazy dog."
  i=$((i + 1))
done >c.txt
model="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 0 --steps 1 --quiet"
# not a terminal: no bar, the preparation's line on stdout as before
# shellcheck disable=SC2086
"$coda" train $model --out r1 --data c.txt >out1.txt 2>err1.txt || { cat out1.txt err1.txt; fail "train"; }
! grep -q "preparing \[" err1.txt out1.txt || fail "a bar without a terminal"
grep -q "preparing: .* MiB read" out1.txt || fail "no preparation line without a terminal"
"$coda" eval --checkpoint r1/checkpoint.safetensors --data r1/data/val.tok >out2.txt 2>err2.txt ||
  { cat out2.txt err2.txt; fail "eval"; }
! grep -q "evaluating" err2.txt out2.txt || fail "an evaluation bar without a terminal"
# a terminal: the bars, each cleared before the result line
# shellcheck disable=SC2086
script -qec "\"$coda\" train $model --out r2 --data c.txt" /dev/null >tty1.txt 2>&1 ||
  { cat tty1.txt; fail "train under a terminal"; }
grep -q "preparing \[#*-*\] *[0-9.]*%" tty1.txt || { cat tty1.txt; fail "no preparation bar on a terminal"; }
! grep -q "preparing: .* MiB read" tty1.txt || fail "the line and the bar both on a terminal"
script -qec "\"$coda\" eval --checkpoint r2/checkpoint.safetensors --data r2/data/val.tok" /dev/null \
  >tty2.txt 2>&1 || { cat tty2.txt; fail "eval under a terminal"; }
grep -q "evaluating \[#*\] 100.0%" tty2.txt || { cat tty2.txt; fail "no full evaluation bar on a terminal"; }
grep -q "val.tok: loss" tty2.txt || fail "no result after the bar"
# the validation of coda train (not quiet): a bar on a terminal only
vmodel="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 20 --steps 1"
# shellcheck disable=SC2086
"$coda" train $vmodel --out r3 --data c.txt >out3.txt 2>err3.txt || { cat out3.txt err3.txt; fail "train, validated"; }
! grep -q "validating" out3.txt err3.txt || fail "a validation bar without a terminal"
# shellcheck disable=SC2086
script -qec "\"$coda\" train $vmodel --out r4 --data c.txt" /dev/null >tty3.txt 2>&1 ||
  { cat tty3.txt; fail "train, validated, under a terminal"; }
grep -q "validating \[#*-*\] *[0-9.]*%  [0-9]* of 20 batches" tty3.txt || { cat tty3.txt; fail "no validation bar on a terminal"; }
grep -q "val_loss" tty3.txt || fail "no validation line after the bar"
echo "progress bars: ok"
