#!/bin/bash
# Packs the fused-GEMM benchmark for a GPU machine: builds bench_fused in a
# CUDA build folder (default: build), precompiles its NVRTC kernels (no GPU
# needed) and writes DEST (default .carry/fused, git-ignored) /fused.tgz
# holding the binary and the kernel cache. run_device.sh takes DEST.
#
#   bash bench/fused/build.sh [BUILD_DIR] [DEST]
set -eu
cd "$(dirname "$0")/../.."
B=${1:-build}
D=${2:-.carry/fused}
cmake --build "$B" -j2 --target bench_fused
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/cache" "$D"
cp "$B/bench/fused/bench_fused" "$S/"
CODA_CACHE_DIR=$S/cache "$S/bench_fused" --precompile
tar -czf "$D/fused.tgz" -C "$S" bench_fused cache
ls -l "$D/fused.tgz"
