#!/bin/bash
# After the merges of the day (the backend state and tables, program
# parameters, src/train split by concern), in one call kept under 580 s:
#   1. every GPU test of the merged tree (tests/gpu/run_all.sh tests);
#   2. tests/test_train_device (the trainer's device path);
#   3. `coda bench block all --fused --tuned --floor` of the tree before the
#      merges (0b6734a, .carry/pre: its coda, lib and kernel cache, xz) and after (.carry/after), A B, each
#      with its own kernel cache, a second round while time is left;
#   4. the training smoke test (tests/gpu/train_gpu_smoke.sh) with the time left.
# Here: cmake --build build; tests/gpu/pack_shared.sh build .carry/after;
#   git rev-parse HEAD > .carry/after/commit.txt
# There (carry .carry/pre .carry/after):
#   bash bench/results/gpu-2026-12-06b/call3/run.sh
PACK=.carry/after . bench/results/gpu-2026-12-06b/common.sh
rm -rf PRE; mkdir -p PRE && tar -xJf .carry/pre/pre.txz -C PRE; Q=$PWD/PRE/gpu
cat .carry/pre/commit.txt > "$L/commit-before.txt"
OUT=$L/tests timeout -k 5 300 tests/gpu/run_all.sh "$P" tests > "$L/run_all.txt" 2>&1
echo "run_all tests exit $? ($SECONDS s)"; grep -E "^== .*exit" "$L/run_all.txt" | tail -12
timeout -k 5 60 "$P/tests/test_train_device" > "$L/train_device.txt" 2>&1
echo "test_train_device exit $? ($SECONDS s)"; tail -2 "$L/train_device.txt"
blk() { # LABEL DIR ROUND
  [ $SECONDS -gt $4 ] && { echo "$1$3 skipped (time)"; return 1; }
  LD_LIBRARY_PATH=$2/lib:$LD_LIBRARY_PATH CODA_CACHE_DIR=$2/cache timeout -k 5 80 "$2/coda" bench block all \
    --fused --tuned --floor --csv > "$L/$1$3.csv" 2> "$L/$1$3.err"
  echo "$1$3 exit $? ($SECONDS s)"
}
blk pre "$Q" 1 420 && blk post "$P" 1 500
blk pre "$Q" 2 360 && blk post "$P" 2 440
for f in pre1 post1 pre2 post2; do [ -f "$L/$f.csv" ] && { echo "== $f"; cut -d, -f1-12 "$L/$f.csv" | head -8; }; done
left=$((575 - SECONDS))
if [ $left -gt 60 ]; then
  timeout -k 5 $left tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/train-smoke.txt" 2>&1
  echo "train smoke exit $? ($SECONDS s)"; tail -8 "$L/train-smoke.txt"
fi
finish
