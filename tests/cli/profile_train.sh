#!/bin/sh
# coda train --profile on the CPU: the table names every phase, each time
# is non-negative, the timed phases sum to at most the step's wall time
# (the last row, host waits and launch gaps, is the difference), the block
# phases carry per-block figures, --quiet keeps the table, a run without
# --profile prints none, and data parallel ranks report a reduction.
#
#   sh tests/cli/profile_train.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/setup.sh
. "$(dirname "$0")/setup.sh"
fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }

phases="weights to bf16|embedding|blocks forward|head + loss|blocks backward|gradient norm|optimizer|gradient reduction|uploads (H2D)|reads (D2H)|host waits and launch gaps"

# check FILE [ref]: the table of FILE is complete and consistent (ref: the
# reference engine, whose blocks are not timed)
check() {
  f=$1
  ref=${2:-}
  grep -q '^profile: 4 steps after 1 warm-up' "$f" || fail "$f: no 'profile: 4 steps after 1 warm-up' line"
  echo "$phases" | tr '|' '\n' | while read -r ph; do
    grep -q -F "  $ph " "$f" || { echo "FAIL: $f: phase '$ph' missing"; echo x >> bad; }
  done
  # columns: name 3..30, ms/step 32..41
  awk -v phases="$phases" -v ref="$ref" '
    BEGIN { n = split(phases, P, "|"); for (i = 1; i <= n; i++) want[P[i]] = 1 }
    /^profile:/ { on = 1; next }
    on && /^  step \(wall\)/ { wall = substr($0, 31, 11) + 0; done = 1; on = 0; next }
    on && /^  phase / { next }
    on {
      name = substr($0, 3, 28); sub(/ +$/, "", name)
      ms = substr($0, 31, 11) + 0
      if (!(name in want)) { print "FAIL: unknown phase row: " $0; bad = 1 }
      if (ms < 0) { print "FAIL: negative time: " $0; bad = 1 }
      if (name == "host waits and launch gaps") host = ms; else sum += ms
      if ((name == "blocks forward" || name == "blocks backward") && $0 !~ / \/ /) {
        print "FAIL: no per-block mean / max: " $0; bad = 1
      }
      if (name == "blocks forward" && ms <= 0 && ref == "") { print "FAIL: blocks forward took no time"; bad = 1 }
      rows++
    }
    END {
      if (!done) { print "FAIL: no step (wall) row"; exit 1 }
      if (rows != 11) { print "FAIL: " rows " phase rows, not 11"; bad = 1 }
      if (sum > wall + 0.01) { print "FAIL: phases sum to " sum " ms > step " wall " ms"; bad = 1 }
      if (sum + host < wall - 0.02) { print "FAIL: phases + host " sum + host " ms < step " wall; bad = 1 }
      printf "phases %.3f ms + host %.3f ms of a %.3f ms step\n", sum, host, wall
      exit bad
    }' "$f" || fail "$f: table inconsistent"
  if [ -f bad ]; then rm -f bad; fail "$f: phases missing"; fi
}

args="--config tiny --steps 5 --val-batches 0 --save-every 0"
"$coda" train $args --out run --profile >out.txt 2>err.txt </dev/null || { fail "train --profile: status $?"; cat err.txt; }
cat out.txt
check out.txt

"$coda" train $args --out run --data run/data --profile --quiet >quiet.txt 2>err.txt </dev/null || fail "train --profile --quiet: status $?"
check quiet.txt
grep -q '^step ' quiet.txt && fail "--quiet printed step lines"

"$coda" train $args --out run --data run/data >plain.txt 2>err.txt </dev/null || fail "train: status $?"
grep -q '^profile:' plain.txt && fail "a run without --profile printed a profile"

"$coda" train $args --out run --data run/data --profile --profile-warmup 9 >w.txt 2>err.txt </dev/null || fail "train --profile-warmup 9: status $?"
grep -q '^profile: 1 steps after 4 warm-up' w.txt || fail "--profile-warmup 9 of 5 steps: not clipped to 1 profiled step"

"$coda" train $args --out dp --data run/data --ranks 2 --batch 4 --profile >dp.txt 2>err.txt </dev/null || { fail "train --ranks 2 --profile: status $?"; cat err.txt; }
check dp.txt
awk '/^  gradient reduction/ { if (substr($0, 31, 11) + 0 <= 0) exit 1; found = 1 } END { exit !found }' dp.txt ||
  fail "--ranks 2: no time in gradient reduction"

# floors beside the blocks, the head and the optimizer once the peaks are
# given; the blocks' backward floor is twice the forward's
"$coda" train $args --out run --data run/data --profile --peak-flops 1e12 --peak-bandwidth 1e11 >fl.txt 2>err.txt </dev/null || fail "train --peak-flops: status $?"
check fl.txt
awk '
  /^  (blocks forward|blocks backward|head \+ loss|optimizer) / {
    name = substr($0, 3, 28); sub(/ +$/, "", name); f[name] = substr($0, 50, 11) + 0; n++
  }
  END {
    if (n != 4) exit 1
    for (k in f) if (!(f[k] > 0)) { print "FAIL: no floor for " k; exit 1 }
    r = f["blocks backward"] / f["blocks forward"]
    if (r < 1.99 || r > 2.01) { print "FAIL: backward / forward floor " r; exit 1 }
  }' fl.txt || fail "floors missing or inconsistent"

# the reference engine runs with --profile (its model work is in the last row)
"$coda" train $args --out ref --data run/data --engine reference --profile >ref.txt 2>err.txt </dev/null || fail "train --engine reference --profile: status $?"
check ref.txt ref

if [ "$fails" -ne 0 ]; then echo "$fails failures"; exit 1; fi
echo "profile_train: ok"
