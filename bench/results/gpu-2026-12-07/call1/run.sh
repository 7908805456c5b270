#!/bin/bash
# 2026-12-07, call 1: the GPU paths built since the last GPU run, and the
# fault and sanitizer run, side by side on one GPU:
#  1. tests/gpu/fault_gpu.sh (kill -9 at the small and the 1.1 B shape,
#     compute-sanitizer's four tools over every GPU test), in the background
#     for the whole call;
#  2. meanwhile every GPU test and the training smoke test
#     (tests/gpu/run_all.sh tests train): the decode attention's last-block
#     merge against the merge kernel (test_decode_gpu), GPT-2's device step
#     against the CPU plan engine (test_train_device), the smoke test's
#     stage (i) (GPT-2 on the GPU against both CPU engines);
#  3. then the Python package's CUDA tests (pytest -k cuda: the torch ops,
#     apply_to_llama, apply_to_qwen3 and apply_to_gpt2 in bf16 on the GPU).
# None of these checks speed, so sharing the GPU changes no verdict; the
# sanitizer runs keep their budgets.
# Here: cmake --build build -j2; tests/gpu/pack_shared.sh build .carry/p2;
#   git rev-parse HEAD > .carry/p2/commit.txt
# There (carry .carry/p2): bash bench/results/gpu-2026-12-07/call1/run.sh
PACK=${PACK:-.carry/p2} source bench/gpu_env.sh
T0=$SECONDS
OUT=$L/fault SANITIZE_DEADLINE_S=${SANITIZE_DEADLINE_S:-470} timeout -k 5 570 \
  tests/gpu/fault_gpu.sh "$P" > /dev/null 2>&1 &
F=$!
OUT=$L/tests timeout -k 5 330 tests/gpu/run_all.sh "$P" tests train > "$L/run_all.txt" 2>&1
echo "run_all rc=$? ($((SECONDS - T0)) s)"
grep -E "== .*exit|run_all:|coverage|passed|failed" "$L/run_all.txt" | tail -40
tail -15 "$L/tests/train-smoke.out"
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 150 python3 -m pytest -q -p no:cacheprovider -rs -k cuda python/tests > "$L/pytest-cuda.txt" 2>&1
echo "pytest -k cuda rc=$? ($((SECONDS - T0)) s)"; tail -8 "$L/pytest-cuda.txt"
wait "$F"; echo "fault rc=$? ($((SECONDS - T0)) s)"
cat "$L/fault/fault.log"
grep -E "^sanitize:|NOT clean" "$L/fault/sanitize.log" | tail -12
finish
