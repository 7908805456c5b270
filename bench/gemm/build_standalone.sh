#!/bin/bash
# Builds the GPU test and the GEMM benchmark into .carry/ with only the
# pieces they need (core context/tensor code + src/cuda), independent of the
# rest of the library. Used to prepare binaries for a GPU machine.
set -e
cd "$(dirname "$0")/../.."
O=.carry/obj
mkdir -p $O
rm -f .carry/test_gemm_gpu .carry/bench_gemm
NV="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --expt-relaxed-constexpr -lineinfo -DCODA_HAVE_CUDA=1 -Iinclude -Isrc"
for f in context tensor tune_cache; do gcc -std=c11 -O2 -fopenmp -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -c src/core/$f.c -o $O/$f.o; done
for f in src/cuda/gemm*.cu; do b=$(basename $f .cu); [ $O/$b.o -nt $f ] && [ $O/$b.o -nt src/cuda/gemm_sm90.cuh ] || $NV -Xptxas -v -c $f -o $O/$b.o 2> $O/$b.ptxas.txt || { cat $O/$b.ptxas.txt; exit 1; }; done
gcc -std=c11 -O2 -fopenmp -DCODA_HAVE_CUDA=1 -Iinclude -Isrc -Itests -I${CUDA_HOME:-/usr/local/cuda}/include -c tests/gpu/test_gemm_gpu.c -o $O/test.o -Wall -Wextra -Wno-unused-parameter
$NV -c bench/gemm/bench_gemm.cu -o $O/bench.o
L="$O/context.o $O/tensor.o $O/tune_cache.o $(for f in src/cuda/gemm*.cu; do echo -n "$O/$(basename $f .cu).o "; done)"
$NV -Xcompiler -fopenmp -o .carry/test_gemm_gpu $O/test.o $L -lcublas -lm
$NV -Xcompiler -fopenmp -o .carry/bench_gemm $O/bench.o $L -lcublas -lm
