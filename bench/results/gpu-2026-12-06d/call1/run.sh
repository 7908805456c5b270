#!/bin/bash
# 2026-12-06 (d), call 1: the GPU paths under fault and under the
# sanitizers (tests/gpu/fault_gpu.sh): kill -9 of coda train --device gpu
# in the start-up, the steps and inside checkpoint saves, each resumed and
# the final checkpoint compared byte for byte with an uninterrupted run's,
# at the small shape and at the 1.1 B shape; beside them memcheck,
# racecheck, synccheck and initcheck over every GPU test (the trainer's
# device step with both heads included). Carries .carry/c5.
PACK=.carry/c5
source bench/gpu_env.sh
OUT=$L timeout -k 5 585 tests/gpu/fault_gpu.sh "$P" > "$L/fault.out" 2>&1
echo "fault_gpu rc=$?"; cat "$L/fault.log"; tail -30 "$L/sanitize.log" 2>/dev/null
finish
