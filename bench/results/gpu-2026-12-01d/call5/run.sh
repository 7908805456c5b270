#!/bin/bash
# Call 5 (d): synccheck over every packed GPU test (tests/gpu/sanitize.sh,
# SANITIZE_RUNS="synccheck/*": the GEMM, epilogue, attention (both modes)
# and decoder tests at their sanitizer shapes).
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
OUT= SANITIZE_RUNS="synccheck/*" timeout -k 5 300 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $?"; tail -9 "$L/sanitize.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
