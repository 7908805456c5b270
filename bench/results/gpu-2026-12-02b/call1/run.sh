#!/bin/bash
# Call 1 (2026-12-02b): `math fast` and the half-split output staging.
# test_epilogue_gpu (every program, with the two fast ones), then
# bench_fused over the fused-vs-plain programs (exact), their `math fast`
# variants and the probes, twice, and the half-split RoPE against the
# adjacent one with the pack before the change (.carry/old); then the
# coda-patched Llama's first steps under torch.compile at 4 layers
# (bench/hf_llama/diag_compile.py), after the custom ops took the weight
# re-layouts inside.
. bench/results/gpu-2026-12-01e/common.sh
t0=$SECONDS
timeout -k 5 240 "$P/tests/gpu/test_epilogue_gpu" > "$L/test_epilogue.txt" 2>"$L/test_epilogue.err"
echo "test_epilogue_gpu exit $? ($((SECONDS - t0)) s)"; tail -3 "$L/test_epilogue.txt"
grep -iE "fail|fast" "$L/test_epilogue.txt" | head -20
EXACT=$(tests/gpu/fused_programs.sh)
FAST=$(bench/fused/fast_programs.sh "$PWD/fastprog")
for r in 1 2; do
  timeout -k 5 200 "$P/bench_fused" $EXACT $FAST > "$L/fused-$r.txt" 2>&1
  echo "fused run $r exit $? ($((SECONDS - t0)) s)"; cat "$L/fused-$r.txt"
done
rm -rf PKO; mkdir -p PKO && tar -xzf .carry/old/gpu-all.tgz -C PKO
SPLIT="--program programs/examples/rope_half_split.coda --program builtin:llama_qkv_rope"
for r in 1 2; do
  CODA_CACHE_DIR=$PWD/PKO/gpu/cache LD_LIBRARY_PATH=$PWD/PKO/gpu/lib:$LD_LIBRARY_PATH timeout -k 5 60 \
    PKO/gpu/bench_fused $SPLIT > "$L/split-old-$r.txt" 2>&1
  echo "split old $r exit $?"; cat "$L/split-old-$r.txt"
  timeout -k 5 60 "$P/bench_fused" $SPLIT > "$L/split-new-$r.txt" 2>&1
  echo "split new $r exit $?"; cat "$L/split-new-$r.txt"
done
echo "elapsed $((SECONDS - t0)) s"
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 \
  TORCH_LOGS="recompiles,graph_breaks" timeout -k 5 200 python3 bench/hf_llama/diag_compile.py \
  --layers 4 --timeout 180 > "$L/diag_compile.txt" 2>&1
echo "diag exit $?"; cut -c1-400 "$L/diag_compile.txt" | tail -30
finish
