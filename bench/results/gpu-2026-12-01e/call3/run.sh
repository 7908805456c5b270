#!/bin/bash
# Call 3 (e): the one-row GEMV's own RMSNorm prologue. test_decode_gpu
# (full); the decoder with the prologue and with the separate norm kernel
# (CODA_DECODE_NORM=separate), twice each, interleaved; the 1.1 B batch-1
# step profile; then every compute-sanitizer run of tests/gpu/sanitize.sh
# (all 17: memcheck, racecheck and synccheck over every GPU test).
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
timeout -k 5 240 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $? ($((SECONDS - t0)) s)"; tail -3 "$L/test_decode.txt"
grep -i "fail" "$L/test_decode.txt" | head -10
copy_bw
G="$P/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW"
for r in 1 2; do
  for mode in fold separate; do
    e=""; [ $mode = separate ] && e="CODA_DECODE_NORM=separate"
    b1="1,16"; b8="1"; [ $r = 1 ] && [ $mode = fold ] && b1="1,16,64" && b8="1,64"
    env $e timeout -k 5 60 $G --shape 1.1b --batches $b1 > "$L/generate-1.1b-$mode-$r.txt" 2>&1
    echo "1.1b $mode $r exit $?"; tail -3 "$L/generate-1.1b-$mode-$r.txt"
    env $e timeout -k 5 90 $G --shape 8b --batches $b8 > "$L/generate-8b-$mode-$r.txt" 2>&1
    echo "8b $mode $r exit $?"; tail -2 "$L/generate-8b-$mode-$r.txt"
  done
done
timeout -k 5 60 $G --shape 1.1b --batches 1 --profile > "$L/profile-1.1b.txt" 2>&1
echo "profile exit $?"; tail -12 "$L/profile-1.1b.txt"
t0=$SECONDS
OUT= timeout -k 5 300 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $? ($((SECONDS - t0)) s)"; grep -E "^(memcheck|racecheck|synccheck) |^sanitize:" "$L/sanitize.txt"
finish
