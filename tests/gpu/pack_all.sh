#!/bin/bash
# Packs the GPU tests and benchmarks of a CUDA build, with every generated
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
# The binaries are mostly device code and compress about tenfold, but each
# links the whole library (~30 MB), so the full archive (~75 MB) can exceed
# what one device call carries. PACK_ONLY="NAME ..." packs only the named
# binaries (coda is always packed, with the kernel cache), e.g.
#   PACK_ONLY="test_epilogue_gpu test_plan_gpu bench_fused" tests/gpu/pack_all.sh build
set -eu
B=${1:?usage: tests/gpu/pack_all.sh BUILD_DIR [DEST_DIR]}
D=${2:-.carry}
cd "$(dirname "$0")/../.."
TESTS="test_gemm_gpu test_epilogue_gpu test_attention_gpu test_plan_gpu test_graph_gpu test_debug_sync_gpu test_decode_gpu test_optim_gpu"
BENCH="bench_fused bench_attention bench_gemm overlap_probe"
TRAIN="test_train_device"
if [ -n "${PACK_ONLY:-}" ]; then
  keep() { # the words of $1 that PACK_ONLY names
    local out="" w
    for w in $1; do case " $PACK_ONLY " in *" $w "*) out="$out $w" ;; esac; done
    echo "$out"
  }
  TESTS=$(keep "$TESTS")
  BENCH=$(keep "$BENCH")
  TRAIN=$(keep "$TRAIN")
fi
cmake --build "$B" -j2 --target coda $TRAIN $TESTS $BENCH
S=$(mktemp -d)
trap 'rm -rf "$S"' EXIT
G=$S/gpu
mkdir -p "$G/tests/gpu" "$G/cache" "$D"
for t in $TESTS; do cp "$B/tests/gpu/$t" "$G/tests/gpu/"; done
for t in $TRAIN; do cp "$B/tests/$t" "$G/tests/"; done
cp "$B/coda" "$G/"
for t in $BENCH; do
  case $t in
  bench_fused) cp "$B/bench/fused/bench_fused" "$G/" ;;
  bench_attention) cp "$B/bench/attention/bench_attention" "$G/" ;;
  *) cp "$B/bench/gemm/$t" "$G/" ;;
  esac
done
ln -s . "$G/build" # train_dp_gpu.sh looks for PACK/build/coda
export CODA_CACHE_DIR=$G/cache
# every kernel of the packed programs, both schedules of every fused plan
# step (coda_plan_tune_fusion times both)
for t in test_epilogue_gpu test_plan_gpu; do
  if [ -x "$G/tests/gpu/$t" ]; then "$G/tests/gpu/$t" --precompile | tail -1; fi
done
# the sm80 stage's kernels (every layout, compiled for the H100 it runs on)
if [ -x "$G/tests/gpu/test_epilogue_gpu" ]; then
  CODA_ARCH=sm80 "$G/tests/gpu/test_epilogue_gpu" --precompile | tail -1
fi
"$G/coda" compile --all --unfused --quiet # the block plans at any shape: training and benchmarks
"$G/coda" bench block all --precompile | tail -1
if [ -x "$G/bench_fused" ]; then
  "$G/bench_fused" --precompile | tail -1
  # the fused-vs-plain table of the example programs and built-ins (run_all.sh fused)
  "$G/bench_fused" --precompile $(tests/gpu/fused_programs.sh) | tail -3
fi
tar -czf "$D/gpu-all.tgz" -C "$S" gpu
ls -l "$D/gpu-all.tgz"
