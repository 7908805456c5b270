#!/bin/bash
# Packs the fused-GEMM benchmark for a GPU machine: builds bench_fused in a
# CUDA build folder (default: build), precompiles its NVRTC kernels (no GPU
# needed) and writes DEST (default .carry/fused, git-ignored) /fused.tgz
# holding the binary, the kernel cache and lib/ (the Debian libraries it
# links that the GPU machine lacks). run_device.sh takes DEST.
# With --programs, the pack also holds the programs of the fused-vs-plain
# table (programs_table.sh: every built-in epilogue, example and tutorial
# program) with their kernels precompiled, for programs_table.sh run.
#
#   bash bench/fused/build.sh [--programs] [BUILD_DIR] [DEST]
set -eu
cd "$(dirname "$0")/../.."
PROGRAMS=0
[ "${1:-}" = --programs ] && { PROGRAMS=1; shift; }
B=${1:-build}
D=${2:-.carry/fused}
if [ "$PROGRAMS" = 1 ]; then
  cmake --build "$B" -j2 --target bench_fused coda # coda check tells epilogues from maps
else
  cmake --build "$B" -j2 --target bench_fused
fi
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/cache" "$D"
cp "$B/bench/fused/bench_fused" "$S/"
# the Debian libraries it links that the GPU machine lacks (utf8proc), in lib/
mkdir -p "$S/lib"
for l in $(ldd "$S/bench_fused" | awk '/utf8proc/ { print $3 }'); do cp -L "$l" "$S/lib/"; done
CODA_CACHE_DIR=$S/cache "$S/bench_fused" --precompile
items=(bench_fused cache lib)
if [ "$PROGRAMS" = 1 ]; then
  bash bench/fused/programs_table.sh stage "$S" "$B/coda"
  CODA_CACHE_DIR=$S/cache bash bench/fused/programs_table.sh precompile "$S" "$S/bench_fused"
  items+=(programs programs.tsv)
fi
tar -czf "$D/fused.tgz" -C "$S" "${items[@]}"
ls -l "$D/fused.tgz"
