#!/bin/bash
# kill -9 as call 4, at the d512 shape (SHAPE=d512), 20 kills, 260 s budget,
# and the small shape with 40 kills.
# There (carry .carry/after): bash bench/results/gpu-2026-12-06b/call5/run.sh
PACK=.carry/after . bench/results/gpu-2026-12-06b/common.sh
SHAPE=d512 OUT=/tmp/killd timeout -k 5 280 tests/gpu/train_kill_gpu.sh "$P" 20 260 > "$L/train-kill-d512.txt" 2>&1
echo "train_kill d512 exit $? ($SECONDS s)"; tail -3 "$L/train-kill-d512.txt"
cp /tmp/killd/train-kill.log "$L/train-kill-d512.log" 2>/dev/null
OUT=/tmp/kills timeout -k 5 150 tests/gpu/train_kill_gpu.sh "$P" 40 140 > "$L/train-kill-small40.txt" 2>&1
echo "train_kill small 40 exit $? ($SECONDS s)"; tail -2 "$L/train-kill-small40.txt"
cp /tmp/kills/train-kill.log "$L/train-kill-small40.log" 2>/dev/null
finish
