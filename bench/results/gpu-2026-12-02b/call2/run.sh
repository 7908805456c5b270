#!/bin/bash
# Call 2 (2026-12-02b): the Llama SwiGLU programs as math fast. The GPU
# tests the programs reach (epilogue, block plans, graphs, the decoder with
# its plan prefill), then coda bench block at the 1.1 B and
# 8B shapes with the pack before (.carry/old, be4a08c: exact SwiGLU) and
# after, interleaved, twice; then the coda-patched Llama's first steps under
# torch.compile at 1 and 16 layers, each in a fresh process.
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
st() { # NAME TIMEOUT CMD...
  local n=$1 t=$2; shift 2
  timeout -k 5 "$t" "$@" > "$L/$n.txt" 2>&1
  echo "$n exit $? ($((SECONDS - t0)) s)"; grep -E "checks|FAIL|failed|coverage" "$L/$n.txt" | tail -4
}
st test_epilogue 90 "$P/tests/gpu/test_epilogue_gpu"
st test_plan 120 "$P/tests/gpu/test_plan_gpu"
st test_graph 60 "$P/tests/gpu/test_graph_gpu"
st test_decode 150 "$P/tests/gpu/test_decode_gpu"
rm -rf PKO; mkdir -p PKO && tar -xzf .carry/old/gpu-all.tgz -C PKO
for r in 1 2; do
  CODA_CACHE_DIR=$PWD/PKO/gpu/cache LD_LIBRARY_PATH=$PWD/PKO/gpu/lib:$LD_LIBRARY_PATH timeout -k 5 90 \
    PKO/gpu/coda bench block 1b 8b --fused --floor > "$L/block-old-$r.txt" 2>&1
  echo "block old $r exit $?"; cat "$L/block-old-$r.txt"
  timeout -k 5 90 "$P/coda" bench block 1b 8b --fused --floor > "$L/block-new-$r.txt" 2>&1
  echo "block new $r exit $?"; cat "$L/block-new-$r.txt"
done
echo "elapsed $((SECONDS - t0)) s"
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  TORCH_LOGS="recompiles,graph_breaks" timeout -k 5 270 python3 bench/hf_llama/diag_compile.py \
  --layers 1,16 --timeout 240 > "$L/diag_compile.txt" 2>&1
echo "diag exit $? ($((SECONDS - t0)) s)"; grep -E "^== |^layers" "$L/diag_compile.txt" | cut -c1-200
finish
