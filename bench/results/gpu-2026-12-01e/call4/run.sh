#!/bin/bash
# Call 4 (e): every compute-sanitizer run of tests/gpu/sanitize.sh (all 17:
# memcheck, racecheck and synccheck over every GPU test) on one commit,
# then the decoder at 1.1 B (batch 1, 16, 64) and 8B (batch 1, 64).
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
OUT= timeout -k 5 420 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $? ($((SECONDS - t0)) s)"; grep -E "^(memcheck|racecheck|synccheck) |^sanitize:" "$L/sanitize.txt"
copy_bw
G="$P/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW"
timeout -k 5 60 $G --shape 1.1b --batches 1,16,64 > "$L/generate-1.1b.txt" 2>&1
echo "generate 1.1b exit $?"; cat "$L/generate-1.1b.txt"
timeout -k 5 90 $G --shape 8b --batches 1,64 > "$L/generate-8b.txt" 2>&1
echo "generate 8b exit $?"; cat "$L/generate-8b.txt"
finish
