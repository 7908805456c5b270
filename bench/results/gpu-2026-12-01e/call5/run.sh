#!/bin/bash
# Call 5 (e): three packs in one call: "old" = 99d31f6 (calls 3 and 4),
# "B" = 15998ea (the attention merge reading its splits eight at a time),
# "C" = 9c90e2a (B and eight weight loads in flight per lane in the one-row
# GEMV). test_decode_gpu with B and C; the decoder at 1.1 B batch 1 (two
# runs, interleaved old, B, C), batch 16 and 8B batch 1 (one run); then memcheck,
# racecheck and synccheck over the decoder test with C.
. bench/results/gpu-2026-12-01e/common.sh
for v in O C; do rm -rf PK$v; mkdir -p PK$v; done
tar -xzf .carry/old/gpu-all.tgz -C PKO; tar -xzf .carry/c/gpu-all.tgz -C PKC
declare -A DIR=([old]=PKO [B]=PK [C]=PKC)
for v in B C; do
  d=$PWD/${DIR[$v]}/gpu
  CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH timeout -k 5 120 "$d/tests/gpu/test_decode_gpu" > "$L/test_decode-$v.txt" 2>&1
  echo "test_decode_gpu $v exit $?"; tail -1 "$L/test_decode-$v.txt"
done
copy_bw
for r in 1 2; do
  for v in old B C; do
    d=$PWD/${DIR[$v]}/gpu
    G="$d/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW"
    bs=1,16; [ $r = 2 ] && bs=1
    CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH timeout -k 5 60 $G --shape 1.1b --batches $bs > "$L/generate-1.1b-$v-$r.txt" 2>&1
    echo "1.1b $v $r exit $?"; grep -E "^ +[0-9]" "$L/generate-1.1b-$v-$r.txt"
    if [ $r = 1 ]; then
      CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH timeout -k 5 60 $G --shape 8b --batches 1 > "$L/generate-8b-$v.txt" 2>&1
      echo "8b $v exit $?"; grep -E "^ +[0-9]" "$L/generate-8b-$v.txt"
    fi
  done
done
d=$PWD/PKC/gpu
t0=$SECONDS
OUT= SANITIZE_RUNS="*/decode" CODA_CACHE_DIR=$d/cache LD_LIBRARY_PATH=$d/lib:$LD_LIBRARY_PATH timeout -k 5 150 tests/gpu/sanitize.sh "$d" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $? ($((SECONDS - t0)) s)"; grep -E "^(memcheck|racecheck|synccheck) |^sanitize: (clean|NOT)" "$L/sanitize.txt"
finish
