#!/bin/bash
# Packs every GPU test and benchmark of a CUDA build, with every generated
# kernel they use compiled here (NVRTC needs no GPU), into one archive for a
# GPU machine:
#
#   tests/gpu/pack_all.sh BUILD_DIR [DEST_DIR]        (DEST_DIR default .carry)
#
# DEST_DIR/gpu-all.tgz unpacks (tar -xzf ... -C DIR) into DIR/gpu, the
# PACK_DIR of tests/gpu/run_all.sh (and a BUILD_DIR for sanitize.sh,
# train_gpu_smoke.sh and, through its build -> . link, train_dp_gpu.sh):
#   tests/gpu/test_*_gpu, tests/test_train_device, coda (with coda bench block),
#   bench_fused, bench_attention, bench_gemm, overlap_probe, cache/
# The binaries are mostly device code and compress about tenfold.
set -eu
B=${1:?usage: tests/gpu/pack_all.sh BUILD_DIR [DEST_DIR]}
D=${2:-.carry}
cd "$(dirname "$0")/../.."
TESTS="test_gemm_gpu test_epilogue_gpu test_attention_gpu test_plan_gpu test_debug_sync_gpu"
BENCH="bench_fused bench_attention bench_gemm overlap_probe"
cmake --build "$B" -j2 --target coda test_train_device $TESTS $BENCH
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
G=$S/gpu
mkdir -p "$G/tests/gpu" "$G/cache" "$D"
for t in $TESTS; do cp "$B/tests/gpu/$t" "$G/tests/gpu/"; done
cp "$B/tests/test_train_device" "$G/tests/"
cp "$B/coda" "$B/bench/fused/bench_fused" \
  "$B/bench/attention/bench_attention" "$B/bench/gemm/bench_gemm" "$B/bench/gemm/overlap_probe" "$G/"
ln -s . "$G/build" # train_dp_gpu.sh looks for PACK/build/coda
export CODA_CACHE_DIR=$G/cache
"$G/tests/gpu/test_epilogue_gpu" --precompile | tail -1
"$G/tests/gpu/test_plan_gpu" --precompile | tail -1
"$G/coda" compile --all --unfused --quiet # the block plans at any shape: training and benchmarks
"$G/bench_fused" --precompile | tail -1
tar -czf "$D/gpu-all.tgz" -C "$S" gpu
ls -l "$D/gpu-all.tgz"
