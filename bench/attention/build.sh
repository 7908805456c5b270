#!/bin/bash
# Builds the attention GPU test and benchmark into .carry/attn/ against the
# static library of a CUDA build (default build-attn, configured with
# -DCODA_WITH_CUDA=ON), for running on a machine with an sm_90 GPU.
set -e
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build-attn}
O=.carry/attn
mkdir -p $O
cmake --build $BUILD -j2 --target coda_static
NV="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests"
LIBS="$BUILD/libcoda.a -Xcompiler -fopenmp -lcublasLt -lcublas -lnvrtc -lm"
gcc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests \
  -I${CUDA_HOME:-/usr/local/cuda}/include -c tests/gpu/test_attention_gpu.c -o $O/test.o
$NV -o $O/test_attention_gpu $O/test.o $LIBS
$NV -o $O/bench_attention bench/attention/bench_attention.cu $LIBS
# cuDNN through coda beside the own kernels (bench_cudnn.c; cuDNN is loaded at run time)
gcc -std=c11 -O2 -Wall -Wextra -Wno-unused-parameter -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests \
  -I${CUDA_HOME:-/usr/local/cuda}/include -c bench/attention/bench_cudnn.c -o $O/bench_cudnn.o
$NV -o $O/bench_cudnn $O/bench_cudnn.o $LIBS
