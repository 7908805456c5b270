#!/bin/bash
# Call 1 (2026-12-02): the decoder test with the weight loads ahead of the
# wait, the one-wave one-row GEMV and the merge in the last split block
# (each against its previous kernel, bit-identical); then the decoder
# bench with all three ("new") and with all three off ("old": the
# CODA_DECODE_* knobs give back the previous kernels), interleaved, and each
# one alone at 1.1 B batch 1; a step profile at 1.1 B batch 1.
. bench/results/gpu-2026-12-01e/common.sh
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "bit-identical|FAIL|coverage|passed|checks" "$L/test_decode.txt" | tail -14
copy_bw
G="$P/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW"
OLD="CODA_DECODE_MERGE=separate CODA_DECODE_PREFETCH=0 CODA_DECODE_ROW_GRID=columns"
run() { # NAME SHAPE BATCHES [VAR=VALUE...]
  local n=$1 sh=$2 bs=$3; shift 3
  timeout -k 5 90 env "$@" $G --shape $sh --batches $bs > "$L/gen-$sh-$n.txt" 2>&1
  echo "$sh $n exit $?"; grep -E "^ +[0-9]" "$L/gen-$sh-$n.txt"
}
for r in 1 2; do
  run new-$r 1.1b 1,16,64
  run old-$r 1.1b 1,16,64 $OLD
done
run new 8b 1,64
run old 8b 1,64 $OLD
run merge-only 1.1b 1 CODA_DECODE_PREFETCH=0 CODA_DECODE_ROW_GRID=columns
run prefetch-only 1.1b 1 CODA_DECODE_MERGE=separate CODA_DECODE_ROW_GRID=columns
run wave-only 1.1b 1 CODA_DECODE_MERGE=separate CODA_DECODE_PREFETCH=0
run new-3 1.1b 1
timeout -k 5 60 $G --shape 1.1b --batches 1 --profile > "$L/profile-new.txt" 2>&1; echo "profile new exit $?"
grep -iE "embedding|qkv|attention|out proj|gate|down|head" "$L/profile-new.txt" | head -12
timeout -k 5 60 env $OLD $G --shape 1.1b --batches 1 --profile > "$L/profile-old.txt" 2>&1; echo "profile old exit $?"
grep -iE "embedding|qkv|attention|out proj|gate|down|head" "$L/profile-old.txt" | head -12
finish
