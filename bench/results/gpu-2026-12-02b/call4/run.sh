#!/bin/bash
# Call 4 (2026-12-02b): the first compile of the coda-patched Llama (1.1 B
# widths) by phase (dynamo's compile_times), 1 layer in a fresh process,
# then 4 layers after it, so the phases' growth per layer shows.
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 280 python3 bench/hf_llama/diag_compile.py --layers 1,4 --timeout 135 --profile 1 \
  > "$L/diag_compile.txt" 2>&1
echo "diag exit $? ($((SECONDS - t0)) s)"; grep -E "^== |^layers|compile_times" "$L/diag_compile.txt" | cut -c1-160 | head -150
finish
