#!/bin/bash
# Call 4 (e): the Hugging Face Llama training step at the 1.1 B shape
# (bench/hf_llama/bench_hf_llama.py, each mode in its own process): Liger
# (wheel carried), coda.torch.apply_to_llama, and the coda-patched model
# under torch.compile, in one call.
. bench/results/gpu-2026-12-01e/common.sh
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" .whl/*.whl > /dev/null 2>&1 && export PYTHONPATH=$S
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 \
  timeout -k 5 560 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes liger,coda,coda_compile --mode-timeout 330 \
  --out "$L" > "$L/hf_llama.md" 2>&1
echo "hf_llama exit $?"; cat "$L/hf_llama.md"
finish
