#!/bin/bash
# Call 6 (d): memcheck over every packed GPU test and racecheck over the
# GEMM and epilogue tests (tests/gpu/sanitize.sh, SANITIZE_RUNS below), at
# their sanitizer shapes.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
OUT= SANITIZE_RUNS="memcheck/* racecheck/gemm racecheck/epilogue-*" timeout -k 5 310 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $?"; tail -9 "$L/sanitize.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
