#!/bin/bash
# Call 3 (2026-12-02b): the fused-vs-plain table with both maths of every
# program the declaration changes (bench/fused/math_variants.sh), twice;
# where the first compile of the coda-patched Llama (4 layers, 1.1 B widths)
# goes (diag_compile.py --profile: cProfile and dynamo's compile_times);
# the Hugging Face training step at the 1.1 B shape, Liger (wheel carried)
# and coda-patched.
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
ARGS=$(bench/fused/math_variants.sh "$PWD/mathprog")
for r in 1 2; do
  timeout -k 5 100 "$P/bench_fused" $ARGS > "$L/fused-$r.txt" 2>&1
  echo "fused run $r exit $? ($((SECONDS - t0)) s)"; sed "s#$PWD/##" "$L/fused-$r.txt"
done
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 200 python3 bench/hf_llama/diag_compile.py --layers 4 --timeout 180 --profile 30 \
  > "$L/diag_compile.txt" 2>&1
echo "diag exit $? ($((SECONDS - t0)) s)"; grep -E "^== |^layers|compile_times" "$L/diag_compile.txt" | cut -c1-160 | head -70
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" .whl/*.whl > /dev/null 2>&1 && export PYTHONPATH=$S
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 \
  timeout -k 5 290 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes liger,coda --mode-timeout 140 \
  --out "$L" > "$L/hf_llama.md" 2>&1
echo "hf_llama exit $? ($((SECONDS - t0)) s)"; cat "$L/hf_llama.md"
finish
