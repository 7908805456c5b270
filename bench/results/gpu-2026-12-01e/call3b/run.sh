#!/bin/bash
# Call 3b (e): every compute-sanitizer run of tests/gpu/sanitize.sh again,
# after the fix of its default pattern (call 3's run matched no run: the
# default "*" was expanded against the files of the current directory).
# Run as one command line:
. bench/results/gpu-2026-12-01e/common.sh; t0=$SECONDS; OUT= timeout -k 5 420 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1; echo "sanitize exit $? ($((SECONDS - t0)) s)"; grep -E "^(memcheck|racecheck|synccheck) |^sanitize:" "$L/sanitize.txt"; finish
