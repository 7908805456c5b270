#!/bin/bash
# Call 3 (2026-12-02): "new" = f7846bf (the decoder kernels of 1a7ef0d but
# the tensor-core GEMV's first weight chunks loaded before the wait; fresh
# prompts prefilled through the forward-only block plans), "old" =
# 1a7ef0d. test_decode_gpu with new (incl. the plan prefill against the
# direct one and the CPU decoder); the decoder bench old / new (direct
# prefill) interleaved, then new with the plan prefill against the direct
# one at 1.1 B and 8B; memcheck over the decoder test.
. bench/results/gpu-2026-12-01e/common.sh
rm -rf PKO; mkdir -p PKO; tar -xzf .carry/old/gpu-all.tgz -C PKO
timeout -k 5 200 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "plan|FAIL|coverage|checks" "$L/test_decode.txt" | tail -12
copy_bw
declare -A DIR=([old]=$PWD/PKO/gpu [new]=$P)
run() { # VARIANT SHAPE BATCHES TAG [FLAGS]
  local v=$1 sh=$2 bs=$3 t=$4 d=${DIR[$1]}; shift 4
  timeout -k 5 120 env CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH \
    $d/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW \
    --shape $sh --batches $bs "$@" > "$L/gen-$sh-$v-$t.txt" 2>&1
  echo "$sh $v $t exit $?"; grep -E "^ +[0-9]|rror" "$L/gen-$sh-$v-$t.txt"
}
for r in 1 2; do run old 1.1b 1,16,64 $r; run new 1.1b 1,16,64 direct-$r --prefill direct; done
run new 1.1b 1,16,64 plans --prefill plans
run old 8b 1,16,64 1
run new 8b 1,16,64 direct --prefill direct
run new 8b 1,16,64 plans --prefill plans
t0=$SECONDS
OUT= SANITIZE_RUNS="memcheck/decode" CODA_CACHE_DIR=$P/cache timeout -k 5 200 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $? ($((SECONDS - t0)) s)"; grep -E "^(memcheck|racecheck|synccheck) |^sanitize: (clean|NOT)" "$L/sanitize.txt"
finish
