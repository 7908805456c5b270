#!/bin/bash
# compute-sanitizer (memcheck, racecheck, synccheck) over the GPU tests, on a
# machine with an sm_90 GPU:
#
#   tests/gpu/sanitize.sh BUILD_DIR [CACHE_DIR]
#
# BUILD_DIR is a CUDA build folder (its tests/gpu/test_*_gpu are run);
# CACHE_DIR (exported as CODA_CACHE_DIR) holds the NVRTC kernels compiled
# beforehand with
#   CODA_CACHE_DIR=CACHE_DIR BUILD_DIR/tests/gpu/test_epilogue_gpu --precompile
# so that nothing is compiled under the sanitizer. With $OUT set, the output
# is also written to $OUT/sanitize.log.
#
# Each (tool, test) run has a time budget (racecheck is by far the slowest,
# so it gets the smallest shapes and a subset of the fused programs); the
# whole script stays under about 150 s. SANITIZE_BUDGET_SCALE multiplies
# every budget. A run that hits its budget is reported as "timeout" with the
# errors counted up to that point. Exit status: 0 if every run finished with
# zero sanitizer errors and a passing test, 1 otherwise.
set -u

B=${1:?usage: tests/gpu/sanitize.sh BUILD_DIR [CACHE_DIR]}
T=$B/tests/gpu
if [ -n "${2:-}" ]; then export CODA_CACHE_DIR=$2; fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/sanitize.log") 2>&1
fi
export CUDA_MODULE_LOADING=LAZY # only the kernels a test uses get instrumented

CS=$(command -v compute-sanitizer || true)
for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
  [ -z "$CS" ] && [ -n "$d" ] && [ -x "$d/bin/compute-sanitizer" ] && CS=$d/bin/compute-sanitizer
done
if [ -z "$CS" ]; then
  echo "sanitize: compute-sanitizer not found (PATH, \$CUDA_HOME/bin, /usr/local/cuda/bin)"
  exit 2
fi
for t in test_gemm_gpu test_epilogue_gpu test_attention_gpu; do
  [ -x "$T/$t" ] || { echo "sanitize: $T/$t is missing (build the CUDA tests first)"; exit 2; }
done
echo "sanitize: $CS ($("$CS" --version | grep -i version | head -1))"
echo "sanitize: build $B, NVRTC cache ${CODA_CACHE_DIR:-(default)}"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/sanitize: GPU /'

# Options that older sanitizers lack are used only when present.
HELP=$("$CS" --help 2>&1)
MEMCHECK_OPTS=()
# padding after each allocation: an overrun that would land in a
# neighbouring allocation is reported too
grep -q -- '--padding' <<< "$HELP" && MEMCHECK_OPTS+=(--padding 64)
grep -q -- '--track-stream-ordered-races' <<< "$HELP" && MEMCHECK_OPTS+=(--track-stream-ordered-races all)

# Fused programs for racecheck: the plain store, reductions over rows,
# columns and x2 pairs, the pair-mode output, segment dots, and a map pass.
RACE_PROGRAMS=prim_store,prim_elem_reduce_x2,gpt2_colsum,llama_residual_norm,llama_swiglu_bwd_pairs,qknorm_rope_bwd_dots,llama_rmsnorm

SCALE=${SANITIZE_BUDGET_SCALE:-1}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ROWS=()
LINE=
STATUS=0

# run TOOL LABEL BUDGET_S COMMAND...
run() {
  local tool=$1 label=$2 budget=$3
  shift 3
  budget=$(awk -v b="$budget" -v s="$SCALE" 'BEGIN { t = int(b * s + 0.5); print t < 1 ? 1 : t }')
  local opts=()
  [ "$tool" = memcheck ] && opts=(${MEMCHECK_OPTS[@]+"${MEMCHECK_OPTS[@]}"})
  local log=$TMP/$tool-$label.log t0 t1 rc
  echo
  echo "=== $tool / $label (budget ${budget} s): ${*#$T/}"
  t0=$(date +%s)
  timeout -k 5 "$budget" "$CS" --tool "$tool" ${opts[@]+"${opts[@]}"} --print-limit 50 "$@" > "$log" 2>&1
  rc=$?
  t1=$(date +%s)
  # the sanitizer's report: headline lines of each error, then its summary
  grep -E '^========= [^ ]' "$log" | grep -v -E 'COMPUTE-SANITIZER' | head -40
  # the test's own verdict lines
  grep -v '^=========' "$log" | grep -i -E 'passed|failed|FAIL|programs x|error' | tail -4 | sed 's/^/  test: /'
  local errors api state
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log" | tail -1)
  if [ -z "$errors" ]; then # no summary (killed): count the reported errors so far
    errors=$(grep -E '^========= [^ ]' "$log" |
               grep -c -v -E 'COMPUTE-SANITIZER|SUMMARY|Target application')
  fi
  # of which failed CUDA API calls (host side; the library checks those)
  api=$(grep -c '^========= Program hit' "$log")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    state=timeout
  elif [ $rc -eq 0 ]; then
    state=pass
  else
    state="fail(rc=$rc)"
  fi
  [ "$state" = pass ] && [ "$errors" = 0 ] || STATUS=1
  echo "--- $tool / $label: $errors sanitizer errors ($api failed API calls), test $state, $((t1 - t0)) s"
  LINE+="$tool/$label=$errors$([ "$state" = pass ] || echo "($state)") "
  ROWS+=("$(printf '%-10s %-22s %6s %4s  %-12s %4ss' "$tool" "$label" "$errors" "$api" "$state" "$((t1 - t0))")")
}

START=$(date +%s)
run memcheck gemm-small 25 "$T/test_gemm_gpu" --small
run memcheck epilogue-all 30 "$T/test_epilogue_gpu"
run memcheck attention 10 "$T/test_attention_gpu"
run racecheck gemm-tiny 15 "$T/test_gemm_gpu" --tiny
run racecheck epilogue-subset 15 "$T/test_epilogue_gpu" --only "$RACE_PROGRAMS"
run racecheck attention-small 20 "$T/test_attention_gpu" --small
run synccheck gemm-tiny 10 "$T/test_gemm_gpu" --tiny
run synccheck epilogue-all 20 "$T/test_epilogue_gpu"
run synccheck attention-small 8 "$T/test_attention_gpu" --small
END=$(date +%s)

echo
echo "tool       run                    errors  api  test         time"
for r in ${ROWS[@]+"${ROWS[@]}"}; do echo "$r"; done
echo "sanitize: $([ $STATUS -eq 0 ] && echo clean || echo 'NOT clean') in $((END - START)) s: $LINE"
exit $STATUS
