#!/bin/bash
# Call 4 (c): the Hugging Face training step at the 1.1 B shape, HF + Liger
# (wheel carried) and coda-patched, after the patched MLP stopped keeping
# the SwiGLU output for its backward (coda::hf_llama_mlp): peak memory and
# tokens/s.
. bench/results/gpu-2026-12-02c/common.sh
t0=$SECONDS
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" .whl/*.whl > /dev/null 2>&1 && export PYTHONPATH=$S
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 \
  timeout -k 5 200 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes coda,liger --mode-timeout 95 \
  --out "$L" > "$L/hf_llama.md" 2>&1
echo "hf_llama exit $? ($((SECONDS - t0)) s)"; cat "$L/hf_llama.md"
finish
