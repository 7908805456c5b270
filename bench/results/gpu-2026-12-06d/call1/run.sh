#!/bin/bash
# 2026-12-06 (d), call 1, on the tree with the hostile-input round and Qwen3
# on the plan engine merged (.carry/c5):
#  1. the GPU tests those changes touch: test_plan_gpu, test_graph_gpu,
#     test_optim_gpu, test_train_device (a Qwen3 device step against the
#     CPU plan engine among its cases);
#  2. beside them, kill -9 of coda train --device gpu at the small shape
#     in the start-up, the steps and inside saves, each resumed and the
#     final checkpoint compared byte for byte with an uninterrupted run's
#     (tests/gpu/train_kill_gpu.sh), and memcheck, racecheck, synccheck
#     and initcheck over the GPU tests until the deadline
#     (tests/gpu/sanitize.sh: runs not started by then are reported as not
#     clean).
PACK=.carry/c5
source bench/gpu_env.sh
mkdir -p "$L/kill" "$L/san"
# the small shape's kills (tests/gpu/fault_gpu.sh's first track) and the
# sanitizers beside the tests; fault_gpu.sh as a whole (the 1.1 B kills
# too) takes about 8 minutes
( SHAPE=small OUT=$PWD/runs/kill timeout -k 5 110 tests/gpu/train_kill_gpu.sh "$P" 20 75 \
    > "$L/kill/kill.out" 2>&1; echo "train_kill rc=$?" >> "$L/kill/kill.out"
  cp runs/kill/train-kill.log "$L/kill/" 2>/dev/null ) &
KP=$!
SANITIZE_DEADLINE_S=150 OUT=$L/san timeout -k 5 200 tests/gpu/sanitize.sh "$P" "$P/cache" \
  > "$L/san/sanitize.out" 2>&1 &
FP=$!
for t in tests/gpu/test_plan_gpu:80 tests/gpu/test_graph_gpu:60 tests/gpu/test_optim_gpu:40 tests/test_train_device:90; do
  n=${t%%:*}; b=$(basename "$n")
  timeout -k 5 ${t##*:} "$P/$n" > "$L/$b.log" 2>&1; echo "$b rc=$?"; tail -2 "$L/$b.log"
done
wait $KP; tail -3 "$L/kill/kill.out"; grep -E "^train_kill: (PASS|FAIL)" "$L/kill/train-kill.log"
wait $FP; echo "sanitize rc=$?"; grep -E "^sanitize: " "$L/san/sanitize.log" | tail -12
finish
