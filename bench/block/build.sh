#!/bin/bash
# Builds the block-plan GPU test and benchmark into .carry/gplan/ against the
# static library of a CUDA build (default build-gplan, configured with
# -DCODA_WITH_CUDA=ON), and precompiles every generated kernel the plans use
# into .carry/gplan/cache (no GPU needed), so nothing compiles on the GPU
# machine.
set -e
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gplan}
O=.carry/gplan
mkdir -p $O
cmake --build $BUILD -j2 --target coda_static
NV="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a"
LIBS="$BUILD/libcoda.a -Xcompiler -fopenmp -lcublasLt -lcublas -lnvrtc -lm"
CC="gcc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests -I${CUDA_HOME:-/usr/local/cuda}/include"
$CC -c tests/gpu/test_plan_gpu.c -o $O/test_plan_gpu.o
$NV -o $O/test_plan_gpu $O/test_plan_gpu.o $LIBS
$CC -c bench/block/bench_block.c -o $O/bench_block.o
$NV -o $O/bench_block $O/bench_block.o $LIBS
CODA_CACHE_DIR=$O/cache $O/test_plan_gpu --precompile | tail -3
