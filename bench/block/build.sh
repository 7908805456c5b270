#!/bin/bash
# Builds the block-plan GPU test and the coda tool (whose `coda bench block`
# is the block benchmark) into .carry/gplan/ against a CUDA build (default
# build-gplan, configured with -DCODA_WITH_CUDA=ON), precompiles every
# generated kernel the plans use (the test's, and the benchmark's with and
# without fusion) into .carry/gplan/cache (no GPU needed), so nothing
# compiles on the GPU machine, and packs it all into .carry/gplan.tgz (the
# binaries are mostly device code and compress well; run_device.sh unpacks
# it when .carry/gplan is absent).
set -e
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-gplan}
O=.carry/gplan
mkdir -p $O
cmake --build $BUILD -j2 --target coda_static coda
cp $BUILD/coda $O/coda
NV="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a"
LIBS="$BUILD/libcoda.a -Xcompiler -fopenmp -lcublasLt -lcublas -lnvrtc -lm"
CC="gcc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests -I${CUDA_HOME:-/usr/local/cuda}/include"
$CC -c tests/gpu/test_plan_gpu.c -o $O/test_plan_gpu.o
$NV -o $O/test_plan_gpu $O/test_plan_gpu.o $LIBS
rm -f $O/test_plan_gpu.o
CODA_CACHE_DIR=$O/cache $O/test_plan_gpu --precompile | tail -3
CODA_CACHE_DIR=$O/cache $O/coda bench block all --precompile | tail -1
tar -czf .carry/gplan.tgz -C .carry gplan
ls -l .carry/gplan.tgz
