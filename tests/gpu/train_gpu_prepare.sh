#!/bin/bash
# Prepares tests/gpu/train_gpu_smoke.sh (run here, no GPU needed): builds
# `coda` and the static library of a CUDA build (default build-gtrain,
# configured with -DCODA_WITH_CUDA=ON), builds the kernel precompiler into
# .carry/gtrain/ and compiles every generated kernel of the shapes the smoke
# test trains into .carry/gtrain/cache, so nothing compiles on the GPU
# machine. It also copies the two binaries the smoke test runs into
# .carry/gtrain/build/ (coda, tests/test_train_device), so carrying the one
# folder .carry/gtrain is enough:
#
#   tests/gpu/train_gpu_prepare.sh [BUILD_DIR]
#   (GPU machine) tests/gpu/train_gpu_smoke.sh .carry/gtrain/build .carry/gtrain/cache
set -e
cd "$(dirname "$0")/../.."
BUILD=${1:-build-gtrain}
O=.carry/gtrain
mkdir -p $O/cache
cmake --build "$BUILD" -j2 --target coda coda_static test_train_device
mkdir -p $O/build/tests
cp "$BUILD/coda" $O/build/coda
cp "$BUILD/tests/test_train_device" $O/build/tests/test_train_device
CC="gcc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests -I${CUDA_HOME:-/usr/local/cuda}/include"
$CC -c tests/gpu/train_gpu_precompile.c -o $O/train_gpu_precompile.o
nvcc -o $O/train_gpu_precompile $O/train_gpu_precompile.o "$BUILD/libcoda.a" \
  -Xcompiler -fopenmp -lcublasLt -lcublas -lnvrtc -lm
# The shapes of train_gpu_smoke.sh (keep in sync): [qwen3:HD|gemma3:HD] DIM HEADS KV FFN VOCAB BATCH SEQ
CODA_CACHE_DIR=$O/cache $O/train_gpu_precompile \
  256 4 2 512 256 8 128 \
  qwen3:128 256 4 2 512 256 8 128 \
  gemma3:64 256 4 2 512 256 8 128 \
  512 8 8 2048 32768 16 1024 \
  512 8 8 2048 32768 8 1024 | tail -3
echo "cache: $O/cache ($(ls $O/cache | wc -l) files)"
