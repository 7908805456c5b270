#!/bin/bash
# Call 7 (c): racecheck and synccheck over test_decode_gpu (the library of
# call 6), 50 s each. (A first attempt of this call found no unpacked
# binaries and ran nothing.)
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:$LD_LIBRARY_PATH
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
cat .carry/commit.txt
for t in racecheck synccheck; do
  t0=$SECONDS
  timeout -k 5 50 $CS --tool $t --print-limit 50 $P/tests/gpu/test_decode_gpu > $OUT/$t-decode.txt 2>&1
  echo "$t test_decode_gpu exit $? ($((SECONDS - t0)) s)"
  grep -E "SUMMARY|checks,|Error" $OUT/$t-decode.txt | head -5
done
