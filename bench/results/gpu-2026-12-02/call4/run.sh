#!/bin/bash
# Call 4 (2026-12-02): the coda-patched Llama under torch.compile, where its
# time goes (bench/hf_llama/diag_compile.py: 1, 2 and 4 layers at the 1.1 B
# widths, dynamo's recompile and graph-break logs).
. bench/results/gpu-2026-12-01e/common.sh
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  TORCH_LOGS="recompiles,graph_breaks" timeout -k 5 420 python3 bench/hf_llama/diag_compile.py \
  --layers 1,2,4 --timeout 130 > "$L/diag_compile.txt" 2>&1
echo "diag exit $?"; cut -c1-400 "$L/diag_compile.txt" | tail -60
finish
