#!/bin/bash
# The GPU paths under fault and under the sanitizers in one command of about
# 8 minutes on an H100, from the repository root:
#
#   tests/gpu/fault_gpu.sh PACK_DIR
#
# PACK_DIR is the gpu/ folder of tests/gpu/pack_all.sh's archive (coda,
# tests/gpu/test_*_gpu, tests/test_train_device and the kernel cache cache/,
# exported as CODA_CACHE_DIR), as for tests/gpu/run_all.sh. Two tracks run
# side by side on the one GPU; neither needs it alone (the kills check
# bits, not speed, and each sanitizer run has a budget a few times its
# need):
#   kills     tests/gpu/train_kill_gpu.sh (kill -9 of coda train --device gpu
#             in the start-up, the steps and inside checkpoint saves, each
#             resumed; the final checkpoint must equal an uninterrupted
#             run's byte for byte): the small shape, SMALL_KILLS kills
#             (default 60) within SMALL_BUDGET s (default 110); then the
#             1.1 B shape (saves of 13 GB, 15-19 s each), BIG_KILLS kills
#             (default 3) within BIG_BUDGET s (default 290); on a machine of
#             two GPUs or more, between the two, the small shape on two
#             data-parallel ranks (RANKS=2: the kill hits the launcher, its
#             ranks must end with it), DP_KILLS kills (default 10) within
#             DP_BUDGET s (default 70)
#   sanitize  tests/gpu/sanitize.sh: memcheck, racecheck, synccheck and
#             initcheck over every GPU test (GEMM, epilogue programs,
#             attention, the decoder, the block plans, graphs, the bf16
#             AdamW, the trainer's device step with the head recomputing and
#             keeping its logits), within SANITIZE_DEADLINE_S s (default 450;
#             a run not started by then is reported as not clean)
# The logs go to $OUT (default gpu-logs): kill-small.log, kill-dp.log,
# kill-1b.log, sanitize.log and fault.log (the summary: one line per
# track). The kills work in FAULT_WORK (default runs/fault_gpu.PID under the
# repository, on its disk: not under $OUT, and not in /tmp, which may be
# memory; the 1.1 B runs write checkpoints of 13 GB, three at a time),
# removed after a pass and kept, with the checkpoints, after a failure. Exit status 0 when every
# kill run passes and every sanitizer run is clean, 1 otherwise, 2 on a
# usage error.
set -u
cd "$(dirname "$0")/../.." || exit 2
P=${1:?usage: tests/gpu/fault_gpu.sh PACK_DIR}
P=$(cd "$P" && pwd) || exit 2
[ -x "$P/coda" ] || { echo "fault_gpu: no executable $P/coda"; exit 2; }
L=${OUT:-gpu-logs}
mkdir -p "$L" || exit 2
L=$(cd "$L" && pwd)
if [ -z "${CODA_CACHE_DIR:-}" ] && [ -d "$P/cache" ]; then export CODA_CACHE_DIR=$P/cache; fi
T0=$SECONDS
{
  echo "fault_gpu: pack $P, logs $L, $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null |
    sed 's/^/fault_gpu: GPU /'
} | tee "$L/fault.log"

WK=${FAULT_WORK:-$PWD/runs/fault_gpu.$$}
# kill_run NAME LIMIT_S KILLS BUDGET_S [VAR=VALUE...]: one run of the kill
# script in WK/NAME, its log copied to L/kill-NAME.log, its status to
# L/kill.status; a pass leaves only the log behind
kill_run() {
  local name=$1 limit=$2 n=$3 budget=$4
  shift 4
  env OUT="$WK/$name" "$@" timeout -k 5 "$limit" tests/gpu/train_kill_gpu.sh "$P" "$n" "$budget" \
    > /dev/null 2>&1
  local rc=$?
  cp "$WK/$name/train-kill.log" "$L/kill-$name.log" 2> /dev/null
  echo "$name $rc" >> "$L/kill.status"
  [ $rc -ne 0 ] || rm -rf "${WK:?}/$name"
}
# the kills: the small shape many times, two ranks, then the 1.1 B shape a few times
rm -f "$L/kill.status"
(
  kill_run small $((${SMALL_BUDGET:-110} + 30)) "${SMALL_KILLS:-60}" "${SMALL_BUDGET:-110}" SHAPE=small
  if [ "$(nvidia-smi -L 2> /dev/null | grep -c '^GPU')" -ge 2 ]; then
    kill_run dp $((${DP_BUDGET:-70} + 30)) "${DP_KILLS:-10}" "${DP_BUDGET:-70}" SHAPE=small RANKS=2
  fi
  kill_run 1b $((${BIG_BUDGET:-290} + 40)) "${BIG_KILLS:-3}" "${BIG_BUDGET:-290}" SHAPE=1b
  rmdir "$WK" "$(dirname "$WK")" 2> /dev/null
) &
kills=$!
# the sanitizers, meanwhile
SANITIZE_DEADLINE_S=${SANITIZE_DEADLINE_S:-450} OUT=$L \
  timeout -k 5 $((${SANITIZE_DEADLINE_S:-450} + 60)) tests/gpu/sanitize.sh "$P" "${CODA_CACHE_DIR:-}" \
  > /dev/null 2>&1
san=$?
wait "$kills"

status=0
# one summary line per track: its verdict line, or why there is none
verdict() { # LABEL LOG PATTERN RC
  local line
  line=$(grep -E "$3" "$2" 2>/dev/null | tail -1)
  [ -n "$line" ] || line="no verdict in $2 (exit status $4)"
  echo "fault_gpu: $1: $line"
}
for shape in small dp 1b; do
  rc=$(sed -n "s/^$shape //p" "$L/kill.status" 2>/dev/null)
  if [ "$shape" = dp ] && [ -z "$rc" ]; then
    echo "fault_gpu: kill -9, 2 ranks: not run (one GPU)" | tee -a "$L/fault.log"
    continue
  fi
  rc=${rc:-none}
  verdict "kill -9, $([ $shape = dp ] && echo "2 ranks, small" || echo "$shape") shape" \
    "$L/kill-$shape.log" '^train_kill: (PASS|FAIL)' "$rc" | tee -a "$L/fault.log"
  if [ "$rc" != 0 ]; then
    status=1
    [ ! -d "$WK/$shape" ] ||
      echo "fault_gpu: its runs and checkpoints are kept in $WK/$shape" | tee -a "$L/fault.log"
  fi
done
verdict sanitizers "$L/sanitize.log" '^sanitize: (clean|NOT clean)' "$san" | tee -a "$L/fault.log"
grep '^sanitize: NOT clean: ' "$L/sanitize.log" 2>/dev/null | tee -a "$L/fault.log"
[ "$san" = 0 ] || status=1
echo "fault_gpu: exit $status ($((SECONDS - T0)) s)" | tee -a "$L/fault.log"
exit $status
