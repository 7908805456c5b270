#!/bin/sh
# Hostile input to coda train / generate / demo, round 2: nothing of the
# user's is overwritten or lost, every refusal names its cause, every read
# is bounded and of a regular file.
#
#   sh tests/cli/hostile_train.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/setup.sh
. "$(dirname "$0")/setup.sh"
fails=0
cases=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; sed 's/^/  | /' err.txt 2>/dev/null | head -20; }
ok() { echo "ok: $*"; }

# expect WORDS -- ARGS...: a clean failure (status 1..125, no sanitizer
# report) whose stderr holds WORDS (fixed string, case-insensitive).
expect() {
  want=$1
  shift 2
  cases=$((cases + 1))
  timeout 120 "$coda" "$@" >out.txt 2>err.txt </dev/null
  rc=$?
  if [ "$rc" -eq 0 ]; then fail "coda $*: exit status 0"
  elif [ "$rc" -ge 124 ]; then fail "coda $*: exit status $rc (timeout, signal or abort)"
  elif grep -q -E 'AddressSanitizer|LeakSanitizer|runtime error' err.txt; then fail "coda $*: sanitizer report"
  elif ! grep -q -i -F -- "$want" err.txt; then fail "coda $*: message lacks '$want'"
  else ok "coda $* -> $rc: $(head -1 err.txt)"
  fi
}

write_corpus
small="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 0 --quiet"

# shellcheck disable=SC2086
"$coda" train $small --corpus corpus --out good --steps 2 >/dev/null 2>err.txt || { fail "baseline training"; exit 1; }
ck=good/checkpoint.safetensors

# 1. a data directory with only train.tok: refused, the file untouched
mkdir only
cp good/data/train.tok only/
cp only/train.tok only.keep
# shellcheck disable=SC2086
expect "val.tok is missing" -- train $small --out o1 --data only --steps 2
cases=$((cases + 1))
if cmp -s only/train.tok only.keep && [ ! -e only/val.tok ]; then ok "train.tok untouched"
else fail "the user's train.tok was rewritten"; fi
# shellcheck disable=SC2086
expect "val.tok is missing" -- train $small --out o1 --data only --corpus corpus --steps 2
cases=$((cases + 1))
if cmp -s only/train.tok only.keep; then ok "train.tok untouched with --corpus"
else fail "the user's train.tok was rewritten (--corpus)"; fi

# 2. a mistyped --data: an error naming it, no training
# shellcheck disable=SC2086
expect "nosuchdata: no such data directory" -- train $small --out o2 --data nosuchdata --steps 2
: >afile
# shellcheck disable=SC2086
expect "afile: not a directory" -- train $small --out o2 --data afile --corpus corpus --steps 2

# 3. resume after a kill: loss.csv continues exactly at the checkpoint's
# step (rows logged after the last save and a row cut by the kill dropped)
cp -r good r3
printf '3,9.5,0.001,1,nan\n4,9.5,0.0' >>r3/loss.csv
# shellcheck disable=SC2086
"$coda" train $small --data good/data --out r3 --steps 5 --resume r3/checkpoint.safetensors >/dev/null 2>err.txt
rc=$?
cases=$((cases + 1))
steps=$(tail -n +2 r3/loss.csv | cut -d, -f1 | tr '\n' ' ')
if [ $rc -eq 0 ] && [ "$steps" = "1 2 3 4 5 " ] && ! grep -q -F ',9.5,' r3/loss.csv &&
   [ "$(awk -F, 'NF != 5' r3/loss.csv | wc -l)" -eq 0 ]; then ok "loss.csv consistent after resume"
else fail "loss.csv after resume: status $rc, steps '$steps'"; cat r3/loss.csv; fi

# 4. write failures of the loss log stop the run; a plot not written is
# not claimed
if [ -w /dev/full ]; then
  mkdir r4
  ln -s /dev/full r4/loss.csv
  # shellcheck disable=SC2086
  expect "loss.csv: write failed" -- train $small --data good/data --out r4 --steps 3
fi
mkdir -p r4b/loss.svg
# shellcheck disable=SC2086
"$coda" train $small --data good/data --out r4b --steps 2 >out.txt 2>err.txt
cases=$((cases + 1))
if grep -q "loss plot not written" err.txt && grep -q "loss curve (not written)" out.txt &&
   ! grep -q "loss curve r4b/loss.svg" out.txt; then ok "unwritten loss.svg not claimed"
else fail "summary claims an unwritten loss.svg"; cat out.txt; fi

# 5. explicit model flags that contradict the checkpoint; an interrupted
# quiet run exits nonzero and says so
# shellcheck disable=SC2086
expect "has dim 32, but dim 64" -- train --dim 64 --seq 16 --batch 2 --val-batches 0 --quiet --data good/data --out o5 --steps 4 --resume $ck
# shellcheck disable=SC2086
expect "has layers 1, but layers 2" -- train --layers 2 --quiet --data good/data --out o5 --steps 4 --init $ck
# the checkpoint's own values are fine
# shellcheck disable=SC2086
"$coda" train $small --data good/data --out r5 --steps 3 --resume $ck >/dev/null 2>err.txt
cases=$((cases + 1))
if [ $? -eq 0 ]; then ok "resume with matching flags"; else fail "resume with matching flags"; fi
"$coda" train --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --quiet \
  --val-batches 0 --data good/data --out r5i --steps 100000 >out.txt 2>err.txt &
pid=$!
sleep 3
kill -INT $pid
wait $pid
rc=$?
cases=$((cases + 1))
if [ $rc -ne 0 ] && grep -q -i "interrupted" err.txt && grep -q "INTERRUPTED" out.txt &&
   [ -f r5i/checkpoint.safetensors ]; then ok "interrupted quiet run -> $rc"
else fail "interrupted quiet run: status $rc"; cat out.txt; fi

# the same with 2 CPU ranks (Ctrl-C reaches the whole process group): the
# job's status is the ranks' common 130, not a rank "failure"
if command -v setsid >/dev/null 2>&1; then
  setsid "$coda" train --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 \
    --quiet --val-batches 0 --data good/data --out r5d --steps 100000 --ranks 2 --threads 1 \
    >out.txt 2>err.txt &
  pid=$!
  sleep 4
  kill -INT -$pid 2>/dev/null || kill -INT $pid
  wait $pid
  rc=$?
  cases=$((cases + 1))
  if [ $rc -eq 130 ] && grep -q -i "interrupted" err.txt && ! grep -q "failed" err.txt; then
    ok "interrupted 2-rank run -> $rc"
  else fail "interrupted 2-rank run: status $rc"; cat out.txt; fi
fi

# a FIFO in place of the stamp of prepared shards: refused by name, never
# waited on (a reader that opens it blocks until the timeout)
if command -v mkfifo >/dev/null 2>&1; then
  mkdir -p ostamp/data
  mkfifo ostamp/data/source.txt
  # shellcheck disable=SC2086
  expect "source.txt is not a regular file" -- train $small --data corpus/text --out ostamp --steps 1
fi

# 6, 13. checkpoints that are not regular files, without blocking
expect "/dev/zero: is a device, not a regular file" -- generate --checkpoint /dev/zero --tokens 2
expect "good: is a directory without config.json" -- generate --checkpoint good --tokens 2
mkfifo fifo.safetensors
expect "is a FIFO" -- generate --checkpoint fifo.safetensors --tokens 2
# shellcheck disable=SC2086
expect "is a FIFO" -- train $small --data good/data --out o6 --steps 4 --resume fifo.safetensors
mkfifo hf_fifo
mkdir hf
ln -s ../hf_fifo hf/config.json
expect "is a FIFO" -- train --import-hf hf --out o6
# a FIFO for a program file
expect "not a regular file" -- check fifo.safetensors

# a large corpus file of no text (sparse zeros: nothing is written): the
# corpus is streamed, so no size limit applies, and the first NUL byte
# refuses it at once, by name and offset
mkdir bigcorpus
if truncate -s 2G bigcorpus/huge 2>/dev/null; then
  expect "bigcorpus/huge: a NUL byte at byte offset 0: not a text file" -- train --prepare --corpus bigcorpus --data bigdata
fi
rm -rf bigcorpus

# 8. coda demo sizes are bounded
expect "--layers: must be an integer in [1, 64], got '100000' (transformer blocks)" -- demo --layers 100000
expect "--seq: must be an integer in [1, 8192], got '10000000'" -- demo --seq 10000000
expect "too large for the demo" -- demo --dim 8192 --ffn 32768 --layers 64


# 16. Ctrl-C during a long validation: the validation is cut short, the
# step's checkpoint saved, status 130. The run resumes at step 2, so no
# validation precedes its first step (3); that step's validation of 2^20
# micro-batches would take minutes. Once the start lines are out and a
# second has passed, no step line has been printed (it follows the
# validation): the run is inside it when the signal is sent.
cp -r good v16
"$coda" train --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 \
  --val-batches 1048576 --val-every 1 --data good/data --out v16 --steps 10 \
  --resume v16/checkpoint.safetensors >out.txt 2>err.txt &
pid=$!
n=0
while ! grep -q '^data:' out.txt && [ $n -lt 200 ]; do sleep 0.1; n=$((n + 1)); done
sleep 1
in_val=0
if grep -q '^data:' out.txt && ! grep -q '^step' out.txt; then in_val=1; fi
t0=$(date +%s)
kill -INT $pid
# a run that ignores the signal is stopped after 20 s (status 143)
( sleep 20; kill -TERM $pid 2>/dev/null ) &
guard=$!
wait $pid
rc=$?
kill $guard 2>/dev/null
t1=$(date +%s)
cases=$((cases + 1))
if [ $in_val -eq 1 ] && [ $rc -eq 130 ] && [ $((t1 - t0)) -le 10 ] &&
   grep -q -i "interrupted after 1 steps" err.txt &&
   grep -q "interrupted: saved step 3 to v16/checkpoint.safetensors" out.txt &&
   [ "$(tail -1 v16/loss.csv | cut -d, -f1,5)" = "3,nan" ]; then
  ok "Ctrl-C during validation -> $rc, step 3 saved, $((t1 - t0)) s after the signal"
else
  fail "Ctrl-C during validation: in validation $in_val, status $rc, $((t1 - t0)) s"
  cat out.txt
fi

# 20. every file and directory a run creates is 0666 / 0777 less the umask:
# the checkpoint, the token shards and their stamp, loss.csv, loss.svg, and
# the Hugging Face export and import
for u in 022 077; do
  # shellcheck disable=SC2086
  (umask $u
   "$coda" train $small --val-batches 1 --val-every 1 --corpus corpus --out m$u --steps 2 &&
     "$coda" train $small --data corpus/text --out s$u --steps 1 &&
     "$coda" train --resume m$u/checkpoint.safetensors --export-hf h$u &&
     "$coda" train --import-hf h$u --out i$u) >out.txt 2>err.txt
  rc=$?
  cases=$((cases + 1))
  fm=$(printf '%o' $((0666 & ~0$u)))
  dm=$(printf '%o' $((0777 & ~0$u)))
  bad=$(find m$u s$u h$u i$u \( -type f ! -perm "$fm" \) -o \( -type d ! -perm "$dm" \) | tr '\n' ' ')
  missing=""
  for f in m$u/checkpoint.safetensors m$u/data/train.tok m$u/data/val.tok m$u/loss.csv \
           m$u/loss.svg s$u/data/source.txt s$u/checkpoint.safetensors h$u/config.json \
           h$u/model.safetensors i$u/checkpoint.safetensors; do
    [ -f "$f" ] || missing="$missing $f"
  done
  if [ $rc -eq 0 ] && [ -z "$bad" ] && [ -z "$missing" ]; then
    ok "umask $u: $(find m$u s$u h$u i$u -type f | wc -l) files $fm, directories $dm"
  else
    fail "umask $u: status $rc, wrong mode: '$bad', missing: '$missing'"
    find m$u s$u h$u i$u -exec ls -ld {} \;
  fi
done


echo "$cases cases, $fails failed"
[ $fails -eq 0 ]
