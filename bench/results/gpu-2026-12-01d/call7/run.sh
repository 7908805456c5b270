#!/bin/bash
# Call 7 (d): racecheck over the attention test, both modes
# (tests/gpu/sanitize.sh, SANITIZE_RUNS below), at
# their sanitizer shapes.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
OUT= SANITIZE_RUNS="racecheck/attention racecheck/attention-persistent" timeout -k 5 250 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $?"; tail -9 "$L/sanitize.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
