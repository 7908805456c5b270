#!/bin/bash
# Prepared call: the GPU paths written since the last GPU run, tested.
# Carries .carry/p6 (tests/gpu/pack_shared.sh of the tree).
#  test_train_device (device steps and sampling logits against the CPU plan
#  engine: Llama, Qwen3, GPT-2, Gemma 3), test_decode_gpu (the decoder
#  against the CPU decoder: Llama, Qwen3, GPT-2, Gemma 3),
#  test_attention_gpu (windows and score scale), the Python package's CUDA
#  tests (the Gemma 3 patch's local layers through the window kernels),
#  logs under $OUT/logs (the training smoke test's stage (j), Gemma 3 on
#  the GPU trainer, is tests/gpu/run_all.sh's: a call of its own).
PACK=${PACK:-.carry/p6} source bench/gpu_env.sh
T0=$SECONDS
t() { # NAME LIMIT CMD...
  local n=$1 lim=$2; shift 2
  timeout -k 5 "$lim" "$@" > "$L/$n.txt" 2>&1
  echo "$n exit $? ($((SECONDS - T0)) s)"; grep -E "FAIL|passed|failed|checks|PASS" "$L/$n.txt" | tail -5
}
t test_train_device 90 "$P/tests/test_train_device"
t test_decode_gpu 150 "$P/tests/gpu/test_decode_gpu"
t test_attention_gpu 150 "$P/tests/gpu/test_attention_gpu"
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  t pytest-cuda 120 python3 -m pytest -q -p no:cacheprovider -rs -k cuda python/tests
finish
