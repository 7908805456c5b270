#!/bin/bash
# 2026-12-06 (d), call 1, on the tree with the hostile-input round and Qwen3
# on the plan engine merged (.carry/c5):
#  1. the GPU tests those changes touch: test_plan_gpu, test_graph_gpu,
#     test_optim_gpu, test_train_device (a Qwen3 device step against the
#     CPU plan engine among its cases), then tests/gpu/train_gpu_smoke.sh
#     (stage h: Qwen3 on the GPU against the CPU reference and plan engine);
#  2. beside them, tests/gpu/fault_gpu.sh within this call's time: kill -9
#     of coda train --device gpu in the start-up, the steps and inside
#     saves, each resumed and the final checkpoint compared byte for byte
#     with an uninterrupted run's, at the small shape and the 1.1 B shape;
#     memcheck, racecheck, synccheck and initcheck over the GPU tests until
#     the deadline (runs not started by then are reported as not clean).
PACK=.carry/c5
source bench/gpu_env.sh
mkdir -p "$L/fault"
SMALL_KILLS=20 SMALL_BUDGET=70 BIG_KILLS=1 BIG_BUDGET=150 SANITIZE_DEADLINE_S=240 \
  OUT=$L/fault timeout -k 5 330 tests/gpu/fault_gpu.sh "$P" > "$L/fault/fault.out" 2>&1 &
FP=$!
for t in tests/gpu/test_plan_gpu:80 tests/gpu/test_graph_gpu:60 tests/gpu/test_optim_gpu:40 tests/test_train_device:90; do
  n=${t%%:*}; b=$(basename "$n")
  timeout -k 5 ${t##*:} "$P/$n" > "$L/$b.log" 2>&1; echo "$b rc=$?"; tail -2 "$L/$b.log"
done
OUT=$L timeout -k 5 170 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/train-smoke.out" 2>&1
echo "train smoke rc=$?"; tail -12 "$L/train-smoke.out"
wait $FP; echo "fault_gpu rc=$?"; cat "$L/fault/fault.log"
finish
