#!/bin/bash
# Prepared call: the changed attention kernels' test, then the decode table
# (bench/generate/decode_table.sh). Carries .carry/p6 (tests/gpu/pack_shared.sh of the tree).
#  1. test_attention_gpu (the sliding window and score scale in every kernel
#     family, the unmasked cases as before: the training and prefill
#     attention the tables below run), log under $OUT/tests; with
#     MORE_TESTS=1 also test_train_device (device steps and sampling logits
#     against the CPU plan engine for Llama, Qwen3, GPT-2 and Gemma 3) and
#     the Python package's CUDA tests of the attention op and the Gemma 3
#     patch;
#  2. bench/generate/decode_table.sh "1.1b 8b" (test_decode_gpu with the
#     Qwen3, GPT-2 and Gemma 3 cases, coda generate --bench at batch 1/16/64
#     and prompts of 512 and 8192 tokens, the batch-1 step profile, an
#     imported HF checkpoint streamed, HF generate with the static cache in
#     the same call) with what is left of LIMIT (default 560 s; skipped
#     with 200 s or less left), under $OUT/decode.
LIMIT=${LIMIT:-560}
T0=$SECONDS
D=$OUT
OUT=$D/tests PACK=${PACK:-.carry/p6} source bench/gpu_env.sh
timeout -k 5 150 "$P/tests/gpu/test_attention_gpu" > "$L/test_attention_gpu.txt" 2>&1
echo "test_attention_gpu exit $? ($((SECONDS - T0)) s)"; grep -E "FAIL|passed|failed" "$L/test_attention_gpu.txt" | tail -8
if [ "${MORE_TESTS:-0}" = 1 ]; then
  timeout -k 5 60 "$P/tests/test_train_device" > "$L/test_train_device.txt" 2>&1
  echo "test_train_device exit $? ($((SECONDS - T0)) s)"; grep -E "FAIL|checks" "$L/test_train_device.txt" | tail -8
  CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 timeout -k 5 70 \
    python3 -m pytest -q -p no:cacheprovider -rs -k "cuda and (gemma3 or attention)" python/tests \
    > "$L/pytest-cuda.txt" 2>&1
  echo "pytest -k 'cuda and (gemma3 or attention)' rc=$? ($((SECONDS - T0)) s)"; tail -4 "$L/pytest-cuda.txt"
fi
finish
left=$((LIMIT - (SECONDS - T0)))
[ "$left" -gt 200 ] || { echo "decode table skipped: $left s left"; exit 0; }
OUT=$D/decode PACK=${PACK:-.carry/p6} LIMIT=$left bash bench/generate/decode_table.sh "1.1b 8b"
