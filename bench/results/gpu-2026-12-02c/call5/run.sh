#!/bin/bash
# Call 5 (c): the coda-patched training step with the python/ tree before
# coda::hf_llama_mlp ("old", 9083507, the SwiGLU output kept) and after it
# ("new"), interleaved in one call, same libcoda.
. bench/results/gpu-2026-12-02c/common.sh
t0=$SECONDS
for v in old new; do
  py=$PWD/python; [ $v = old ] && py=$PWD/.carry/pyold/python
  CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$py" PYTHONUNBUFFERED=1 \
    timeout -k 5 45 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes coda --mode-timeout 40 \
    --out "$L/$v" > "$L/hf_llama-$v.md" 2>&1
  echo "$v exit $? ($((SECONDS - t0)) s)"; grep "^| coda" "$L/hf_llama-$v.md"
done
finish
