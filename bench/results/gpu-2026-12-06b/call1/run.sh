#!/bin/bash
# Decode, after the one-row GEMV's split became the default and the
# one-kernel step's ring is released by every consumer thread:
#   1. test_decode_gpu (against the CPU decoder; every split variant, 0 the
#      old default, and the one-kernel step);
#   2. racecheck over test_decode_gpu --sanitize (tests/gpu/sanitize.sh);
#   3. coda generate --bench --profile at 1.1b and 8b, batches 1, 16, 64,
#      512-token prompts, 256 steps: the new default against
#      CODA_DECODE_ROW_SPLIT=0 and the one-kernel step (batch 1),
#      interleaved over two rounds; 1.1b with 8192-token prompts, batch 1 and 16.
# Here: cmake --build build; tests/gpu/pack_shared.sh build .carry/post;
#   git rev-parse HEAD > .carry/commit.txt
# There (carry .carry): bash bench/results/gpu-2026-12-06b/call1/run.sh
. bench/results/gpu-2026-12-06b/common.sh
timeout -k 5 240 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "FAIL|checks|coverage" "$L/test_decode.txt" | tail -6
SANITIZE_RUNS="racecheck/decode" OUT=$L/san timeout -k 5 260 bash tests/gpu/sanitize.sh PK/gpu "$P/cache" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $?"; tail -8 "$L/sanitize.txt"
copy_bw
gen() { # LABEL SHAPE BATCHES PROMPT ROUND [ENV...]
  local lab=$1 sh=$2 bs=$3 pl=$4 r=$5; shift 5
  [ $SECONDS -gt 530 ] && { echo "== $sh b$bs p$pl $lab r$r skipped (time)"; return; }
  local f="$L/gen-$sh-$bs-$pl-$lab-$r.txt"
  env "$@" timeout -k 5 120 "$P/coda" generate --device gpu --bench --prompt-len "$pl" \
    --tokens 256 --hbm-gbps "$BW" --shape "$sh" --batches "$bs" --profile > "$f" 2>&1
  echo "== $sh b$bs p$pl $lab r$r exit $?"; grep -E "^ +[0-9]|rror|sum " "$f" | head -8
}
for r in 1 2; do
  for sh in 1.1b 8b; do
    gen default $sh 1 512 $r
    gen split0 $sh 1 512 $r CODA_DECODE_ROW_SPLIT=0
    gen rowstep $sh 1 512 $r CODA_DECODE_ROW_STEP=1
  done
done
gen default 1.1b 16,64 512 1
gen split0 1.1b 16,64 512 1 CODA_DECODE_ROW_SPLIT=0
gen default 8b 16,64 512 1
gen default 1.1b 1,16 8192 1
gen split0 1.1b 1,16 8192 1 CODA_DECODE_ROW_SPLIT=0
finish
