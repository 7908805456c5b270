#!/bin/bash
# After the merges of the day (the backend state and tables, program
# parameters, src/train split by concern, jansson, the SVG chart, progress
# bars): every GPU test of the merged tree and the training smoke test
# (tests/gpu/run_all.sh stages tests and train). Call 4 has the rest.
# Here: cmake --build build; tests/gpu/pack_shared.sh build .carry/after;
#   git rev-parse HEAD > .carry/after/commit.txt
# There (carry .carry/after):
#   bash bench/results/gpu-2026-12-06b/call3/run.sh
PACK=.carry/after . bench/results/gpu-2026-12-06b/common.sh
OUT=$L/tests timeout -k 5 380 tests/gpu/run_all.sh "$P" tests > "$L/run_all.txt" 2>&1
echo "run_all tests exit $? ($SECONDS s)"; grep -E "^== .*exit|checks|passed|FAIL" "$L/run_all.txt" | tail -20
OUT=$L/train timeout -k 5 190 tests/gpu/run_all.sh "$P" train > "$L/train.txt" 2>&1
echo "run_all train exit $? ($SECONDS s)"; tail -15 "$L/train.txt"
finish
