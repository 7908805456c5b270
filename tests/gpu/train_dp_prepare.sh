#!/bin/bash
# Prepares tests/gpu/train_dp_gpu.sh (run here, no GPU needed): builds
# `coda` of a CUDA build (default build-dp), the kernel precompiler, and
# compiles every generated kernel of the shapes the data-parallel test
# trains into PACK_DIR/cache, so nothing compiles on the GPU machine (where
# several ranks would otherwise compile the same kernels at once). The
# binary goes to PACK_DIR/build/coda; carrying PACK_DIR is enough:
#
#   tests/gpu/train_dp_prepare.sh [BUILD_DIR] [PACK_DIR]     (default .carry/gdp)
#   (GPU machine) tests/gpu/train_dp_gpu.sh PACK_DIR
set -e
cd "$(dirname "$0")/../.."
BUILD=${1:-build-dp}
O=${2:-.carry/gdp}
mkdir -p "$O/cache" "$O/build"
cmake --build "$BUILD" -j2 --target coda coda_static
cp "$BUILD/coda" "$O/build/coda"
CC="gcc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests -I${CUDA_HOME:-/usr/local/cuda}/include"
$CC -c tests/gpu/train_gpu_precompile.c -o "$O/train_gpu_precompile.o"
nvcc -o "$O/train_gpu_precompile" "$O/train_gpu_precompile.o" "$BUILD/libcoda.a" \
  -Xcompiler -fopenmp -lcublasLt -lcublas -lnvrtc -lm -ldl
# The shapes of train_dp_gpu.sh (keep in sync): DIM HEADS KV FFN VOCAB BATCH SEQ
# d512 at batch 32 (one GPU) and 16 (per GPU of two).
CODA_CACHE_DIR=$O/cache "$O/train_gpu_precompile" \
  512 8 4 1536 256 32 512 \
  512 8 4 1536 256 16 512 | tail -3
rm -f "$O/train_gpu_precompile.o" "$O/train_gpu_precompile"
echo "pack: $O (build/coda, cache with $(ls "$O/cache" | wc -l) files)"
