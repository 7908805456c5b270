#!/bin/bash
# compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over the GPU
# tests, on a machine with an sm_90 GPU:
#
#   tests/gpu/sanitize.sh BUILD_DIR [CACHE_DIR]
#
# BUILD_DIR is a CUDA build folder (its tests/gpu/test_*_gpu are run, and
# tests/test_train_device where present: the trainer's device step, AdamW
# and round trips, with the head recomputing and keeping its logits); every
# GPU test runs under every tool but test_debug_sync_gpu, whose kernel
# faults on purpose (memcheck would report the fault the test is about;
# tests/gpu/debug_sync.sh runs it);
# CACHE_DIR (exported as CODA_CACHE_DIR) holds the NVRTC kernels compiled
# beforehand with
#   CODA_CACHE_DIR=CACHE_DIR BUILD_DIR/tests/gpu/test_epilogue_gpu --precompile
# so that nothing is compiled under the sanitizer. With $OUT set, the output
# is also written to $OUT/sanitize.log.
#
# Every tool runs every kernel variant: the tests' sanitizer modes keep
# every variant and template instantiation but use minimal shapes
# (test_gemm_gpu --sanitize: every tile configuration, layout and type;
# test_attention_gpu --sanitize: every forward and backward variant of each
# head size, and --persistent: the warp-specialized variants on more tiles
# than SMs; test_epilogue_gpu: every program, in three parts under
# racecheck; test_decode_gpu: the decoder's kernels, its GEMV and GEMM
# paths and replayed step graphs, with --sanitize: every case a few steps;
# test_train_device: both heads, keep-logits included; test_plan_gpu: the
# block and head plans at their small test shape, fused, unfused, folded;
# test_graph_gpu: plans and GEMMs captured into CUDA graphs and replayed;
# test_optim_gpu: the bf16-state AdamW kernel). initcheck reports
# device memory read before it was written. Each (tool, test) run has a time
# budget, a few times what it should need (racecheck of test_attention_gpu
# --small, which --sanitize halves, took 189 s); SANITIZE_BUDGET_SCALE
# multiplies every budget. The budgets sum to about 72 minutes, far above
# what the runs take together (17 of them took 160 s:
# bench/results/gpu-2026-12-01e.md); a hung run still ends at its budget.
# SANITIZE_DEADLINE_S (default none) bounds the whole: a run starts only
# while 10 s of it are left, with its budget cut to what is left, and a run
# not started is reported as not clean ("deadline"). SANITIZE_RUNS, a list
# of globs over "tool/label" (default "*", every run), picks runs, e.g.
#   SANITIZE_RUNS="memcheck/*"                           (budgets 650 s)
#   SANITIZE_RUNS="synccheck/*"                          (510 s)
#   SANITIZE_RUNS="initcheck/*"                          (650 s)
#   SANITIZE_RUNS="racecheck/gemm racecheck/epilogue-*"  (540 s)
#   SANITIZE_RUNS="racecheck/attention"                  (540 s)
#   SANITIZE_RUNS="racecheck/attention-persistent"       (540 s)
#   SANITIZE_RUNS="racecheck/decode racecheck/train-device"  (360 s)
#   SANITIZE_RUNS="racecheck/plan racecheck/graph racecheck/optim"  (540 s)
# Each test ends with a "coverage:" line (which variants, configurations or
# programs ran), shown per run and in the table.
#
# A run is clean only when it finished inside its budget, the test passed,
# it printed its coverage line, and the sanitizer reported zero errors. A
# run that hits its budget (timeout's status 124 or 137) is NOT clean: it
# is reported as "timeout" with the errors counted up to that point and the
# last line the test printed. Exit status: 0 if every run is clean, 1
# otherwise; the last line says which runs are not clean and why.
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

SCALE=${SANITIZE_BUDGET_SCALE:-1}
START=$(date +%s)
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
ROWS=()
LINE=
STATUS=0
NOT_CLEAN=()

# picked TOOL/LABEL: it matches SANITIZE_RUNS
picked() {
  # the patterns are split on blanks but not expanded against the files of
  # the current directory (a bare "*" would otherwise become their names)
  local pats pat
  read -r -a pats <<< "${SANITIZE_RUNS:-*}"
  for pat in "${pats[@]}"; do
    # shellcheck disable=SC2254
    case "$1" in $pat) return 0 ;; esac
  done
  return 1
}

# run TOOL LABEL BUDGET_S COMMAND...  (only when TOOL/LABEL matches SANITIZE_RUNS)
run() {
  local tool=$1 label=$2 budget=$3
  shift 3
  picked "$tool/$label" || return 0
  budget=$(awk -v b="$budget" -v s="$SCALE" 'BEGIN { t = int(b * s + 0.5); print t < 1 ? 1 : t }')
  if [ -n "${SANITIZE_DEADLINE_S:-}" ]; then # what is left of the whole
    local left=$((SANITIZE_DEADLINE_S - ($(date +%s) - START)))
    if [ "$left" -lt 10 ]; then
      STATUS=1
      NOT_CLEAN+=("$tool/$label: not run, SANITIZE_DEADLINE_S=$SANITIZE_DEADLINE_S spent")
      LINE+="$tool/$label=(deadline) "
      ROWS+=("$(printf '%-10s %-22s %6s %4s  %-12s %4ss  %s' "$tool" "$label" "-" "-" "deadline" 0 "not run")")
      echo "--- $tool / $label: not run: the deadline of $SANITIZE_DEADLINE_S s is spent"
      return 0
    fi
    [ "$budget" -le "$left" ] || budget=$left
  fi
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
  # the test's own verdict lines and its coverage line
  grep -v '^=========' "$log" | grep -i -E 'passed|failed|FAIL|programs x|error' | tail -4 | sed 's/^/  test: /'
  local coverage
  coverage=$(grep -v '^=========' "$log" | grep '^coverage:' | tail -1 | sed 's/^coverage: *//')
  local errors api state why=
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9][0-9]*\) error.*/\1/p' "$log" | tail -1)
  if [ -z "$errors" ]; then
    errors=$(sed -n 's/.*RACECHECK SUMMARY: .*(\([0-9][0-9]*\) error.*/\1/p' "$log" | tail -1)
  fi
  if [ -z "$errors" ]; then # no summary (killed): count the reported errors so far
    errors=$(grep -E '^========= [^ ]' "$log" |
               grep -c -v -E 'COMPUTE-SANITIZER|SUMMARY|Target application')
  fi
  # of which failed CUDA API calls (host side; the library checks those)
  api=$(grep -c '^========= Program hit' "$log")
  if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
    state=timeout
    why="hit its ${budget} s budget before the test finished (coverage incomplete; last test line: $(grep -v '^=========' "$log" | grep -v '^[[:space:]]*$' | tail -1 | cut -c1-100))"
  elif [ $rc -eq 0 ]; then
    state=pass
    [ -n "$coverage" ] || { state=no-coverage; why="the test printed no coverage line"; }
  else
    state="fail(rc=$rc)"
    why="the test failed (exit status $rc)"
  fi
  if [ "$state" = pass ] && [ "$errors" != 0 ]; then why="$errors sanitizer errors"; fi
  if [ -n "$why" ]; then
    STATUS=1
    NOT_CLEAN+=("$tool/$label: $why")
    echo "--- $tool / $label: NOT clean: $why"
  fi
  echo "--- $tool / $label: $errors sanitizer errors ($api failed API calls), test $state, $((t1 - t0)) s; coverage: ${coverage:-none}"
  LINE+="$tool/$label=$errors$([ "$state" = pass ] || echo "($state)") "
  ROWS+=("$(printf '%-10s %-22s %6s %4s  %-12s %4ss  %s' "$tool" "$label" "$errors" "$api" "$state" "$((t1 - t0))" "${coverage:-none}")")
}

G=$T/test_gemm_gpu E=$T/test_epilogue_gpu A=$T/test_attention_gpu D=$T/test_decode_gpu
TD=$B/tests/test_train_device
# run_td TOOL BUDGET_S: test_train_device under TOOL, where the build has it
run_td() {
  if [ -x "$TD" ]; then run "$1" train-device "$2" "$TD"
  else echo "sanitize: $TD is missing: $1/train-device not run"; fi
}
# run_more TOOL PLAN_S GRAPH_S OPTIM_S: the plan, graph and optimizer tests
# under TOOL (a test the build lacks is said, and not clean)
run_more() {
  local tool=$1 t b
  shift
  for t in plan graph optim; do
    b=$1
    shift
    if [ -x "$T/test_${t}_gpu" ]; then
      run "$tool" "$t" "$b" "$T/test_${t}_gpu"
    elif picked "$tool/$t"; then
      STATUS=1
      NOT_CLEAN+=("$tool/$t: not run, $T/test_${t}_gpu is missing")
      echo "sanitize: $T/test_${t}_gpu is missing: $tool/$t not run"
    fi
  done
}
run memcheck gemm 60 "$G" --sanitize
run memcheck epilogue-all 60 "$E"
run memcheck attention 100 "$A" --sanitize
run memcheck attention-persistent 100 "$A" --persistent
run memcheck decode 60 "$D" --sanitize
run_td memcheck 60
run_more memcheck 120 60 30
run racecheck gemm 180 "$G" --sanitize
run racecheck epilogue-part0 120 "$E" --part 0/3
run racecheck epilogue-part1 120 "$E" --part 1/3
run racecheck epilogue-part2 120 "$E" --part 2/3
run racecheck attention 540 "$A" --sanitize
run racecheck attention-persistent 540 "$A" --persistent
run racecheck decode 240 "$D" --sanitize
run_td racecheck 120
run_more racecheck 300 180 60
run synccheck gemm 45 "$G" --sanitize
run synccheck epilogue-all 45 "$E"
run synccheck attention 60 "$A" --sanitize
run synccheck attention-persistent 60 "$A" --persistent
run synccheck decode 60 "$D" --sanitize
run_td synccheck 60
run_more synccheck 90 60 30
run initcheck gemm 60 "$G" --sanitize
run initcheck epilogue-all 60 "$E"
run initcheck attention 100 "$A" --sanitize
run initcheck attention-persistent 100 "$A" --persistent
run initcheck decode 60 "$D" --sanitize
run_td initcheck 60
run_more initcheck 120 60 30
END=$(date +%s)
if [ ${#ROWS[@]} -eq 0 ]; then
  STATUS=1
  NOT_CLEAN+=("no run matched SANITIZE_RUNS=\"${SANITIZE_RUNS:-*}\"")
fi

echo
echo "tool       run                    errors  api  test         time  coverage"
for r in ${ROWS[@]+"${ROWS[@]}"}; do echo "$r"; done
for r in ${NOT_CLEAN[@]+"${NOT_CLEAN[@]}"}; do echo "sanitize: NOT clean: $r"; done
echo "sanitize: $([ $STATUS -eq 0 ] && echo clean || echo "NOT clean (${#NOT_CLEAN[@]} of ${#ROWS[@]} runs)") in $((END - START)) s: $LINE"
exit $STATUS
