#!/bin/bash
# Every GPU check and measurement of the project in one run, on a machine
# with an sm_90 GPU, from the repository root:
#
#   tests/gpu/run_all.sh PACK_DIR
#
# PACK_DIR holds the binaries of a CUDA build (tests/gpu/test_*_gpu,
# tests/test_train_device, coda, bench_block) and an NVRTC cache (cache/)
# precompiled on the build machine, so nothing compiles here. Logs go to
# $OUT (or ./gpu-logs). Order: correctness first, then training, the block
# benchmark and the sanitizers, so the most important results come first.
set -u
P=${1:?usage: tests/gpu/run_all.sh PACK_DIR}
L=${OUT:-gpu-logs}
mkdir -p "$L"
export CODA_CACHE_DIR=$P/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$L/gpu-tests.log"
status=0
step() { # NAME TIMEOUT CMD...: runs a check, records its exit status
  local name=$1 t=$2; shift 2
  echo "== $name: $*" | tee -a "$L/gpu-tests.log"
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" >> "$L/gpu-tests.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc ($((SECONDS - t0)) s)" | tee -a "$L/gpu-tests.log"
  tail -2 "$L/gpu-tests.log" | head -1
  [ $rc -eq 0 ] || status=1
}
step gemm 60 "$P/tests/gpu/test_gemm_gpu"
step epilogue 60 "$P/tests/gpu/test_epilogue_gpu"
step attention 60 "$P/tests/gpu/test_attention_gpu"
step plan 60 "$P/tests/gpu/test_plan_gpu"
step debug_sync 30 "$P/tests/gpu/test_debug_sync_gpu"
step run_user_program 30 "$P/coda" run programs/examples/geglu_scaled.coda --gpu --m 4096 --n 4096 --k 2048
step run_builtin 30 "$P/coda" run --builtin llama_swiglu_bwd --gpu --m 4096 --n 2048 --k 2048
echo "== train smoke" | tee -a "$L/gpu-tests.log"
timeout -k 5 170 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/train-smoke.out" 2>&1 || status=1
tail -15 "$L/train-smoke.out"
echo "== block benchmark" | tee -a "$L/gpu-tests.log"
timeout -k 5 90 "$P/bench_block" ${BLOCK_CONFIGS:-d512 d2048 d4096} --fused --floor > "$L/block.log" 2>&1 || status=1
tail -12 "$L/block.log"
if [ "${SKIP_SANITIZE:-0}" != 1 ]; then
  SANITIZE_BUDGET_SCALE=${SANITIZE_BUDGET_SCALE:-0.7} timeout -k 5 170 tests/gpu/sanitize.sh "$P" "$P/cache" > "$L/sanitize.out" 2>&1 || status=1
  tail -14 "$L/sanitize.out"
fi
echo "run_all: exit $status"
exit $status
