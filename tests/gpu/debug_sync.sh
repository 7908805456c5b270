#!/bin/bash
# The GPU tests in debug-sync mode (CODA_DEBUG_SYNC=1: every kernel launch
# of the CUDA backend is followed by a device synchronization and an error
# check), on a machine with an sm_90 GPU:
#
#   tests/gpu/debug_sync.sh BUILD_DIR [CACHE_DIR]
#
# BUILD_DIR is a CUDA build folder; CACHE_DIR (exported as CODA_CACHE_DIR)
# holds the NVRTC kernels compiled beforehand with
#   CODA_CACHE_DIR=CACHE_DIR BUILD_DIR/tests/gpu/test_epilogue_gpu --precompile
#   CODA_CACHE_DIR=CACHE_DIR BUILD_DIR/tests/gpu/test_plan_gpu --precompile
# With $OUT set, the output is also written to $OUT/debug_sync.log. Each
# test has a time budget (about 7 minutes in all at most).
# Then test_debug_sync_gpu checks that a faulting kernel is reported by the
# call that launched it (option and environment), and only later without
# the mode. Exit status 0 if everything passed.
set -u

B=${1:?usage: tests/gpu/debug_sync.sh BUILD_DIR [CACHE_DIR]}
T=$B/tests/gpu
if [ -n "${2:-}" ]; then export CODA_CACHE_DIR=$2; fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/debug_sync.log") 2>&1
fi

ROWS=()
STATUS=0
# run LABEL BUDGET_S ENV_VALUE COMMAND...  (ENV_VALUE: CODA_DEBUG_SYNC, "-" = unset)
run() {
  local label=$1 budget=$2 env=$3 t0 rc state
  shift 3
  echo
  echo "=== $label: ${*#$T/}"
  t0=$(date +%s)
  if [ "$env" = - ]; then
    env -u CODA_DEBUG_SYNC timeout -k 5 "$budget" "$@" 2>&1 | tail -6
  else
    CODA_DEBUG_SYNC=$env timeout -k 5 "$budget" "$@" 2>&1 | tail -6
  fi
  rc=${PIPESTATUS[0]}
  case $rc in
    0) state=pass ;;
    124 | 137) state=timeout ;;
    *) state="fail(rc=$rc)" ;;
  esac
  [ "$state" = pass ] || STATUS=1
  ROWS+=("$(printf '%-34s %-12s %4ss' "$label" "$state" "$(($(date +%s) - t0))")")
}

for t in test_gemm_gpu test_epilogue_gpu test_attention_gpu test_plan_gpu test_debug_sync_gpu; do
  [ -x "$T/$t" ] || { echo "debug_sync: $T/$t is missing (build the CUDA tests first)"; exit 2; }
done
START=$(date +%s)
run "gemm (debug sync)" 150 1 "$T/test_gemm_gpu"
run "epilogue (debug sync)" 90 1 "$T/test_epilogue_gpu"
run "attention (debug sync)" 45 1 "$T/test_attention_gpu"
run "plans (debug sync)" 90 1 "$T/test_plan_gpu"
run "fault, debug_sync option" 20 - "$T/test_debug_sync_gpu"
run "fault, CODA_DEBUG_SYNC=1" 20 1 "$T/test_debug_sync_gpu" --env
run "fault, no debug sync" 20 - "$T/test_debug_sync_gpu" --off

echo
for r in "${ROWS[@]}"; do echo "$r"; done
echo "debug_sync: $([ $STATUS -eq 0 ] && echo 'all passed' || echo FAILED) in $(($(date +%s) - START)) s"
exit $STATUS
