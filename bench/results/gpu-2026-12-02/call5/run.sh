#!/bin/bash
# Call 5 (2026-12-02): "new" = the one-row GEMV with each warp's weight row
# requested into L2 by one bulk prefetch (cp.async.bulk.prefetch.L2) before
# griddepcontrol.wait, "old" = 1a7ef0d. test_decode_gpu with new; the
# decoder bench interleaved old / new.
. bench/results/gpu-2026-12-01e/common.sh
rm -rf PKO; mkdir -p PKO; tar -xzf .carry/old/gpu-all.tgz -C PKO
timeout -k 5 100 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; tail -1 "$L/test_decode.txt"
copy_bw
declare -A DIR=([old]=$PWD/PKO/gpu [new]=$P)
run() { # VARIANT SHAPE BATCHES TAG
  local v=$1 d=${DIR[$1]}
  timeout -k 5 60 env CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH \
    $d/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW \
    --shape $2 --batches $3 > "$L/gen-$2-$v-$4.txt" 2>&1
  echo "$2 $v $4 exit $?"; grep -E "^ +[0-9]" "$L/gen-$2-$v-$4.txt"
}
run old 1.1b 1,16 1; run new 1.1b 1,16 1; run old 1.1b 1 2; run new 1.1b 1 2
run old 8b 1 1; run new 8b 1 1
finish
