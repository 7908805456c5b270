#!/bin/bash
set -eu
cd REPO
B=build-lead-cuda; D=.carry/c8
rm -rf $D; mkdir -p $D
cmake --build $B -j2 --target coda test_epilogue_gpu test_plan_gpu bench_fused 2>&1 | tail -1
S=$(mktemp -d); G=$S/gpu; mkdir -p $G/tests/gpu $G/cache
cp $B/tests/gpu/test_epilogue_gpu $B/tests/gpu/test_plan_gpu $G/tests/gpu/; cp $B/coda $B/bench/fused/bench_fused $G/
cp -r KERNEL_CACHE/. $G/cache/ 2>/dev/null || true
export CODA_CACHE_DIR=$G/cache
$G/tests/gpu/test_epilogue_gpu --precompile | tail -1
$G/bench_fused --precompile | tail -1
$G/coda bench block d2048 d4096 gpt2-768 gpt2-1600 --precompile | tail -1
CODA_EPI_SCRATCH_MAX=32768 $G/bench_fused --precompile | tail -1
CODA_EPI_SCRATCH_MAX=32768 $G/coda bench block d2048 d4096 gpt2-768 gpt2-1600 --precompile | tail -1
tar -czf $D/gpu.tgz -C $S gpu; rm -rf $S; ls -la $D
