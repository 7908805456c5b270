#!/bin/bash
# Call 2 (2026-12-02): "new" = b7b96f2 (the one-row GEMV a block per 8
# columns again, its first weight loads before the wait; the merge's maxes
# in one round, in the last split block two elements a thread), "old" =
# 1a7ef0d (the kernels of call 5 of gpu-2026-12-01e.md, moved into three
# files). test_decode_gpu with new; the decoder bench interleaved old, new,
# new with CODA_DECODE_MERGE=separate; step profiles.
. bench/results/gpu-2026-12-01e/common.sh
rm -rf PKO; mkdir -p PKO; tar -xzf .carry/old/gpu-all.tgz -C PKO
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu --format=csv > "$L/smi.txt" 2>&1; cat "$L/smi.txt"
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "merge|FAIL|coverage|checks" "$L/test_decode.txt" | tail -6
copy_bw
declare -A DIR=([old]=$PWD/PKO/gpu [new]=$P [sep]=$P)
run() { # VARIANT SHAPE BATCHES
  local v=$1 sh=$2 bs=$3 d=${DIR[$1]} e=""
  [ $v = sep ] && e=CODA_DECODE_MERGE=separate
  timeout -k 5 90 env $e CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH \
    $d/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW \
    --shape $sh --batches $bs $4 > "$L/gen-$sh-$v-$5.txt" 2>&1
  echo "$sh $v $5 exit $?"; grep -E "^ +[0-9]|by phase" "$L/gen-$sh-$v-$5.txt"
}
for r in 1 2; do for v in old new sep; do run $v 1.1b 1,16,64 "" $r; done; done
for v in old new sep; do run $v 8b 1,64 "" 1; done
for v in old new sep; do run $v 1.1b 1 --profile p; done
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv >> "$L/smi.txt" 2>&1; tail -2 "$L/smi.txt"
finish
