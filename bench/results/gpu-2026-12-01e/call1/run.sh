#!/bin/bash
# Call 1 (e): racecheck over the decoder test in its --sanitize mode
# (tests/gpu/sanitize.sh, racecheck/decode), then the decoder as committed
# (the GEMV store kind as a template parameter) at 1.1 B batch 1, 16, 64 and
# 8B batch 1 and 64.
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
OUT= SANITIZE_RUNS="racecheck/decode" timeout -k 5 300 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $? ($((SECONDS - t0)) s)"; tail -9 "$L/sanitize.txt"
copy_bw
G="$P/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW"
timeout -k 5 60 $G --shape 1.1b --batches 1,16,64 > "$L/generate-1.1b.txt" 2>&1
echo "generate 1.1b exit $?"; cat "$L/generate-1.1b.txt"
timeout -k 5 90 $G --shape 8b --batches 1,64 > "$L/generate-8b.txt" 2>&1
echo "generate 8b exit $?"; cat "$L/generate-8b.txt"
finish
