#!/bin/bash
# 2026-12-07, call 1: the GPU paths built since the last GPU run, and the
# fault and sanitizer run, side by side on one GPU, within LIMIT seconds
# (default 480):
#  1. tests/gpu/fault_gpu.sh (kill -9 at the small and the 1.1 B shape,
#     compute-sanitizer's four tools over every GPU test), in the background
#     for the whole call, its budgets cut to fit (SANITIZE_DEADLINE_S,
#     BIG_BUDGET);
#  2. meanwhile every GPU test and the training smoke test
#     (tests/gpu/run_all.sh tests train): the decode attention's last-block
#     merge against the merge kernel (test_decode_gpu), GPT-2's device step
#     against the CPU plan engine (test_train_device), the smoke test's
#     stage (i) (GPT-2 on the GPU against both CPU engines);
#  3. then the Python package's CUDA tests (pytest -k cuda: the torch ops,
#     apply_to_llama, apply_to_qwen3, apply_to_gpt2 and apply_to_gemma3 in
#     bf16 on the GPU);
#  4. then, while time is left, the sm80 mainloop forced on this GPU
#     (run_all.sh sm80: CODA_ARCH=sm80 test_epilogue_gpu --layouts).
# None of these checks speed, so sharing the GPU changes no verdict; the
# sanitizer runs keep their budgets.
# Here: cmake --build build -j2; tests/gpu/pack_shared.sh build .carry/p3;
#   git rev-parse HEAD > .carry/p3/commit.txt
# There (carry .carry/p3): bash bench/results/gpu-2026-12-07/call1/run.sh
PACK=${PACK:-.carry/p3} source bench/gpu_env.sh
T0=$SECONDS
LIMIT=${LIMIT:-480}
left() { echo $((LIMIT - (SECONDS - T0))); }
OUT=$L/fault SANITIZE_DEADLINE_S=$((LIMIT - 60)) BIG_BUDGET=$((LIMIT - 200)) timeout -k 5 $((LIMIT - 5)) \
  tests/gpu/fault_gpu.sh "$P" > /dev/null 2>&1 &
F=$!
OUT=$L/tests timeout -k 5 300 tests/gpu/run_all.sh "$P" tests train > "$L/run_all.txt" 2>&1
echo "run_all rc=$? ($((SECONDS - T0)) s)"
grep -E "== .*exit|run_all:|coverage|passed|failed" "$L/run_all.txt" | tail -40
tail -15 "$L/tests/train-smoke.out"
t=$(left); [ "$t" -gt 150 ] && t=150
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 $((t - 10)) python3 -m pytest -q -p no:cacheprovider -rs -k cuda python/tests > "$L/pytest-cuda.txt" 2>&1
echo "pytest -k cuda rc=$? ($((SECONDS - T0)) s)"; tail -8 "$L/pytest-cuda.txt"
t=$(left)
if [ "$t" -gt 40 ]; then
  CODA_ARCH=sm80 timeout -k 5 $((t - 20)) "$P/tests/gpu/test_epilogue_gpu" --layouts > "$L/sm80.txt" 2>&1
  echo "sm80 layouts rc=$? ($((SECONDS - T0)) s)"; grep -E "FAIL|passed|failed|coverage" "$L/sm80.txt" | tail -8
fi
wait "$F"; echo "fault rc=$? ($((SECONDS - T0)) s)"
cat "$L/fault/fault.log"
grep -E "^sanitize:|NOT clean" "$L/fault/sanitize.log" | tail -12
finish
