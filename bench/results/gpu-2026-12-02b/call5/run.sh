#!/bin/bash
# Call 5 (2026-12-02b): each patched decoder layer as one nested compile
# region (torch.compiler.nested_compile_region: traced and compiled once,
# called per layer). The first compile of the coda-patched Llama at 16
# layers (1.1 B widths, fresh process, compile_times), then the Hugging Face
# training step of the coda-patched model under torch.compile.
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 160 python3 bench/hf_llama/diag_compile.py --layers 16 --timeout 150 --profile 1 \
  > "$L/diag_compile.txt" 2>&1
echo "diag exit $? ($((SECONDS - t0)) s)"
grep -E "^== |^layers|not finished|Error|GraphLowering.run|fw_compiler_base|calls_captured" "$L/diag_compile.txt" | cut -c1-300 | head -20
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 170 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes coda_compile --mode-timeout 160 \
  --out "$L" > "$L/hf_llama.md" 2>&1
echo "hf_llama exit $? ($((SECONDS - t0)) s)"; cat "$L/hf_llama.md"; tail -5 "$L"/hf_llama-1b-coda_compile.log | cut -c1-300
finish
