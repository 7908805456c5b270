#!/bin/bash
# After the merges of the day, the rest of call 3: the Python tests on CUDA
# (the torch ops bind eps as a program parameter), then `coda bench block
# all --fused --tuned --floor` of the tree before the merges (0b6734a,
# .carry/post) and after (.carry/after), interleaved A B A B, each with its
# own kernel cache.
# There (carry .carry/post .carry/after):
#   bash bench/results/gpu-2026-12-06b/call4/run.sh
PACK=.carry/after . bench/results/gpu-2026-12-06b/common.sh
rm -rf PRE; mkdir -p PRE && tar -xzf .carry/post/gpu-all.tgz -C PRE; Q=$PWD/PRE/gpu
cat .carry/post/commit.txt > "$L/commit-before.txt"
OUT=$L/python timeout -k 5 150 tests/gpu/run_all.sh "$P" python > "$L/python.txt" 2>&1
echo "python exit $? ($SECONDS s)"; tail -4 "$L/python.txt"
blk() { # LABEL DIR ROUND
  [ $SECONDS -gt 500 ] && { echo "$1$3 skipped (time)"; return; }
  LD_LIBRARY_PATH=$2/lib:$LD_LIBRARY_PATH CODA_CACHE_DIR=$2/cache timeout -k 5 85 "$2/coda" bench block all \
    --fused --tuned --floor --csv > "$L/$1$3.csv" 2> "$L/$1$3.err"
  echo "$1$3 exit $? ($SECONDS s)"
}
for r in 1 2; do blk pre "$Q" $r; blk post "$P" $r; done
for f in pre1 post1 pre2 post2; do [ -f "$L/$f.csv" ] && { echo "== $f"; cut -d, -f1-12 "$L/$f.csv" | head -8; }; done
finish
