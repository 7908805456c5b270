#!/bin/bash
# 2026-12-06 (e), call 2: the GPU paths under fault and under the
# sanitizers (tests/gpu/fault_gpu.sh: kill -9 of coda train --device gpu at
# the small shape and at the 1.1 B shape, each run resumed and its final
# checkpoint compared byte for byte with an uninterrupted run's, beside
# memcheck, racecheck, synccheck and initcheck over every GPU test).
# Carries .carry/c8 (tests/gpu/pack_shared.sh of the tree).
PACK=.carry/c8 source bench/gpu_env.sh
# LIMIT (default 565 s) fits the call to the device time left: the
# 1.1 B kills and the sanitizer deadline shrink with it
LIMIT=${LIMIT:-565}
export BIG_BUDGET=$((LIMIT * 290 / 565)) SANITIZE_DEADLINE_S=$((LIMIT * 450 / 565))
echo "limit $LIMIT s: BIG_BUDGET=$BIG_BUDGET SANITIZE_DEADLINE_S=$SANITIZE_DEADLINE_S" | tee "$L/limits.txt"
OUT=$L timeout -k 5 "$LIMIT" tests/gpu/fault_gpu.sh "$P" > "$L/fault.txt" 2>&1
echo "fault_gpu rc=$? ($SECONDS s)"; cat "$L/fault.log"
for f in "$L"/kill-*.log; do echo "== $f"; tail -4 "$f"; done 2>/dev/null | sed "s|$L/||"
tail -25 "$L/sanitize.log" 2>/dev/null
finish
