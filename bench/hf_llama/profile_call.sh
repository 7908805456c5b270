#!/bin/bash
# One GPU call: where the coda-patched Hugging Face training step spends its
# time against HF + Liger, at the 1.1 B shape (bench_hf_llama.py --profile:
# the step's device time by kernel family and kernel, and the device's idle
# time inside the step). Prepared here, run there:
#   Here: build, PACK_ONLY=... tests/gpu/pack_all.sh build .carry/post (the
#   pack holds lib/libcoda.so.0), git rev-parse HEAD > .carry/commit.txt, and
#   the Liger wheel in .whl (pip download --no-deps liger-kernel==0.8.5).
#   There (carry .carry and .whl): bash bench/hf_llama/profile_call.sh
# Writes $OUT/logs.tgz (profile-1b-coda.txt, profile-1b-liger.txt, the
# bench table); the tables go to bench/results/ with the date.
. bench/results/gpu-2026-12-02c/common.sh
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" .whl/*.whl > /dev/null 2>&1
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:$S" PYTHONUNBUFFERED=1 \
  timeout -k 5 300 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes ${MODES:-coda,liger} \
  --mode-timeout 120 --profile --out "$L/hf" > "$L/hf_llama.md" 2>&1
echo "hf_llama exit $?"; grep -E "^\| (coda|liger|eager|compile)" "$L/hf_llama.md"
for f in "$L"/hf/profile-*.txt; do echo "== $f"; head -14 "$f"; done
# coda's own trainer, its head recomputing the logits (0) and keeping them (1)
for k in 0 1; do
  OUT=$L/train-keep$k EXTRA="--keep-logits $k" PROFILE=1 timeout -k 5 200 bash bench/train/run.sh "$P" \
    > /dev/null 2>&1
  echo "coda train --keep-logits $k exit $?"; cat "$L/train-keep$k/train.md" 2>/dev/null | grep -E "coda"
done
finish
