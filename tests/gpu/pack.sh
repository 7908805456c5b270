#!/bin/bash
# Packs the GPU tests of a CUDA build folder, with their NVRTC kernels
# compiled here, into one compressed archive for a GPU machine:
#
#   tests/gpu/pack.sh BUILD_DIR DEST_DIR
#
# DEST_DIR/gpu-tests.tgz unpacks (tar -xzf ... -C DIR) into a folder that
# sanitize.sh and debug_sync.sh take as BUILD_DIR, with DIR/nvrtc-cache as
# their CACHE_DIR. The test binaries are mostly device code and compress
# about tenfold.
set -eu
B=${1:?usage: tests/gpu/pack.sh BUILD_DIR DEST_DIR}
D=${2:?usage: tests/gpu/pack.sh BUILD_DIR DEST_DIR}
TESTS="test_gemm_gpu test_epilogue_gpu test_attention_gpu test_plan_gpu test_debug_sync_gpu"
cmake --build "$B" -j2 --target $TESTS
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
mkdir -p "$S/tests/gpu" "$S/nvrtc-cache" "$D"
for t in $TESTS; do cp "$B/tests/gpu/$t" "$S/tests/gpu/"; done
CODA_CACHE_DIR=$S/nvrtc-cache "$B/tests/gpu/test_epilogue_gpu" --precompile | tail -1
CODA_CACHE_DIR=$S/nvrtc-cache "$B/tests/gpu/test_plan_gpu" --precompile | tail -1
tar -czf "$D/gpu-tests.tgz" -C "$S" tests nvrtc-cache
ls -l "$D/gpu-tests.tgz"
