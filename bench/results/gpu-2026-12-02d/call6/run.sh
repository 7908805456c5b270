#!/bin/bash
# Call 6 (d): the fixed deal of the one-kernel step again, now opt-in
# (CODA_DECODE_ROW_STEP=1), and coda.torch on the GPU:
#   1. test_decode_gpu --sanitize (every case, few steps);
#   2. batch 1, one kernel and separate kernels, with the step by phase
#      (call1/run.sh, one round, without its test);
#   3. python/tests on the GPU (the bf16 gradients of the patched model
#      against the unpatched one, not yet run with coda::hf_llama_mlp);
#   4. the HF training step at the 1.1 B shape: Liger, coda-patched with
#      python/ ("new") and with python/ before 96a7d78 ("old": the SwiGLU
#      output kept), same libcoda.
. bench/results/gpu-2026-12-02c/common.sh
t0=$SECONDS
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" --sanitize > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu --sanitize exit $? ($((SECONDS - t0)) s)"; grep -E "one kernel|FAIL|coverage|checks" "$L/test_decode.txt" | tail -8
O2=$L/decode; mkdir -p "$O2"
OUT=$O2 SKIP_TEST=1 PROFILE=1 ROUNDS=1 bash bench/results/gpu-2026-12-02d/call1/run.sh 2>&1 | tail -8
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" .whl/*.whl > /dev/null 2>&1
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  timeout -k 5 240 python3 -m pytest -q -p no:cacheprovider -rs python/tests > "$L/pytest.txt" 2>&1
echo "pytest exit $? ($((SECONDS - t0)) s)"; tail -6 "$L/pytest.txt"
for v in new old; do
  py=$PWD/python modes=coda,liger; [ $v = old ] && py=$PWD/.carry/oldpy/python modes=coda
  CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$py:$S" PYTHONUNBUFFERED=1 \
    timeout -k 5 150 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --modes $modes --mode-timeout 70 \
    --out "$L/$v" > "$L/hf_llama-$v.md" 2>&1
  echo "hf_llama $v exit $? ($((SECONDS - t0)) s)"; grep -E "^\| (coda|HF|liger)" "$L/hf_llama-$v.md"
done
finish
