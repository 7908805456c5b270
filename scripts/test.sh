#!/bin/sh
# Builds coda and runs the test suite (the README's test command).
# 1. the default build (CUDA sources compiled for sm_90a when nvcc exists)
#    and its CTest suite;
# 2. the CPU library and tests under AddressSanitizer + UBSan + LeakSanitizer;
# 3. a short bounded fuzz run of the epilogue-language parser and the file
#    readers (safetensors, token shards, JSON, tokenizer.json and encode).
set -eu
cd "$(dirname "$0")/.."
jobs=${CODA_JOBS:-2}
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure -j"$jobs"
if [ "${CODA_SKIP_SANITIZE:-0}" != 1 ]; then
  cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DCODA_SANITIZE=ON -DCODA_WITH_CUDA=OFF
  cmake --build build-asan -j"$jobs"
  ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --test-dir build-asan --output-on-failure -j"$jobs"
fi
if [ "${CODA_SKIP_FUZZ:-0}" != 1 ] && [ -x scripts/fuzz.sh ]; then
  scripts/fuzz.sh 30
fi
echo "coda: all tests passed"
