#!/bin/bash
# kill -9 of `coda train --device gpu` at random moments (every third inside
# a checkpoint save), each resumed from its last checkpoint, the final
# checkpoint compared with an uninterrupted run's (tests/gpu/train_kill_gpu.sh,
# small shape, 15 kills and a 180 s budget, twice), with the merged tree's pack.
# There (carry .carry/after): bash bench/results/gpu-2026-12-06b/call4/run.sh
PACK=.carry/after . bench/results/gpu-2026-12-06b/common.sh
for r in 1 2; do # the checkpoints of a failing run stay in /tmp, the log comes back
  OUT=/tmp/kill$r timeout -k 5 200 tests/gpu/train_kill_gpu.sh "$P" 15 180 > "$L/train-kill$r.txt" 2>&1
  echo "train_kill $r exit $? ($SECONDS s)"; tail -4 "$L/train-kill$r.txt"
  cp /tmp/kill$r/train-kill.log "$L/train-kill$r.log" 2>/dev/null
done
finish
