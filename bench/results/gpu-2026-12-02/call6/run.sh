#!/bin/bash
# Call 6 (2026-12-02): the coda-patched Llama under torch.compile with the
# re-layouts inside the custom ops (python/ of the commit in
# logs/python-commit.txt; libcoda from the pack of logs/commit.txt, whose
# training kernels are those of f7846bf): 4 layers at the 1.1 B widths, as
# in call 4.
. bench/results/gpu-2026-12-01e/common.sh
cat .carry/python-commit.txt > "$L/python-commit.txt"
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 75 python3 bench/hf_llama/diag_compile.py --layers 4 --timeout 70 > "$L/diag_compile.txt" 2>&1
echo "diag exit $?"; cut -c1-400 "$L/diag_compile.txt" | tail -12
finish
