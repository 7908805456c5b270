#!/bin/bash
# Packs the GPU tests like pack_all.sh, but with every binary linked against
# one shared libcoda (and the shared CUDA runtime), so the library's device
# code travels once: the whole set is about 16 MB compressed instead of
# about 90 MB, and fits one device call with room to spare.
#
#   tests/gpu/pack_shared.sh BUILD_DIR [DEST_DIR]     (DEST_DIR default .carry)
#
# DEST_DIR/gpu-all.tgz unpacks into gpu/ as pack_all.sh's does (coda,
# tests/gpu/test_*_gpu, tests/test_train_device, bench_fused, bench_gemm,
# bench_attention, cache/, lib/ with
# libcoda.so.0 and the libutf8proc it needs); the binaries find lib/ through
# their rpath. The CUDA build's objects and link lines are reused
# (BUILD_DIR must be a CMake Makefiles build with CUDA). SEED_CACHE=DIR
# starts the kernel cache from DIR's kernels (a previous pack's cache/), so
# only the kernels that changed are compiled again.
set -eu
B=$(cd "${1:?usage: tests/gpu/pack_shared.sh BUILD_DIR [DEST_DIR]}" && pwd)
D=${2:-.carry}
cd "$(dirname "$0")/../.."
TESTS="test_gemm_gpu test_epilogue_gpu test_attention_gpu test_plan_gpu test_graph_gpu test_debug_sync_gpu test_decode_gpu test_optim_gpu"
cmake --build "$B" -j2 --target coda coda_shared test_train_device bench_fused bench_gemm bench_attention $TESTS
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
G=$S/gpu
mkdir -p "$G/tests/gpu" "$G/lib" "$G/cache" "$D"
CUDA_LIB=$(dirname "$(grep -o '[^ ]*libcudart_static.a' "$B/CMakeFiles/coda_shared.dir/linkLibs.rsp" | head -1)")
libs() { # a target's link libraries, with the shared CUDA runtime and libcoda
  sed 's/"//g' "$1" | sed "s|[^ ]*libcudart_static.a|$CUDA_LIB/libcudart.so|; s|-lcudart_static|-lcudart|; \
    s|[^ ]*libculibos.a||; s|[^ ]*libcoda.a|$G/lib/libcoda.so.0|"
}
L="-L$CUDA_LIB/stubs -L$CUDA_LIB"
# shellcheck disable=SC2046
(cd "$B" && g++ -fPIC -shared -Wl,-soname,libcoda.so.0 -o "$G/lib/libcoda.so.0" \
  @CMakeFiles/coda_shared.dir/objects1 $(libs CMakeFiles/coda_shared.dir/linkLibs.rsp) $L)
link() { # DIR TARGET OUT
  # shellcheck disable=SC2046
  (cd "$1" && g++ @CMakeFiles/"$2".dir/objects1 -o "$3" $(libs CMakeFiles/"$2".dir/linkLibs.rsp) \
    -Wl,-rpath,'$ORIGIN/lib:$ORIGIN/../lib:$ORIGIN/../../lib' $L)
}
link "$B" coda "$G/coda"
for t in $TESTS; do link "$B/tests/gpu" "$t" "$G/tests/gpu/$t"; done
link "$B/tests" test_train_device "$G/tests/test_train_device"
link "$B/bench/fused" bench_fused "$G/bench_fused" # cuBLAS from the machine's CUDA
link "$B/bench/gemm" bench_gemm "$G/bench_gemm"   # cuBLAS from the machine's CUDA
link "$B/bench/attention" bench_attention "$G/bench_attention"
for l in $(ldd "$G/lib/libcoda.so.0" | awk '/utf8proc/ { print $3 }'); do cp -L "$l" "$G/lib/"; done
ln -s . "$G/build"
if [ -n "${SEED_CACHE:-}" ]; then cp "$SEED_CACHE"/epi-*.cubin "$G/cache/" 2>/dev/null || true; fi
export CODA_CACHE_DIR=$G/cache
for t in test_epilogue_gpu test_plan_gpu; do "$G/tests/gpu/$t" --precompile | tail -1; done
# the sm80 stage's kernels (every layout, compiled for the H100 it runs on)
CODA_ARCH=sm80 "$G/tests/gpu/test_epilogue_gpu" --precompile | tail -1
"$G/bench_gemm" --precompile 90 | tail -1 # bench_gemm --sm80's plain GEMMs (sm_90)
"$G/coda" compile --all --unfused --quiet
"$G/coda" compile --all --quiet --arch sm80 --cc 90 # the plans on the sm80 path of an H100/H200
"$G/coda" bench block all --precompile | tail -1
"$G/bench_fused" --precompile | tail -1
"$G/bench_fused" --precompile $(tests/gpu/fused_programs.sh) | tail -3
"$G/bench_fused" --precompile $(bench/fused/math_variants.sh "$S/math") | tail -3
tar -czf "$D/gpu-all.tgz" -C "$S" gpu
ls -l "$D/gpu-all.tgz"
