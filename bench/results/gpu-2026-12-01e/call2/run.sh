#!/bin/bash
# Call 2 (e): the staging ring. test_epilogue_gpu (every program, the two
# ragged shapes and, for programs reading a tile input, 2200 x 2176 x 64:
# more tiles than SMs), then bench_fused over the fused-vs-plain programs
# with the pack before the ring (.carry/old, c712d2c) and after it, in the
# same call, twice each, interleaved.
. bench/results/gpu-2026-12-01e/common.sh
rm -rf PKO; mkdir -p PKO && tar -xzf .carry/old/gpu-all.tgz -C PKO
t0=$SECONDS
timeout -k 5 300 "$P/tests/gpu/test_epilogue_gpu" > "$L/test_epilogue.txt" 2>"$L/test_epilogue.err"
echo "test_epilogue_gpu exit $? ($((SECONDS - t0)) s)"; tail -3 "$L/test_epilogue.txt"
grep -i "fail" "$L/test_epilogue.txt" | head -20
ARGS=$(tests/gpu/fused_programs.sh)
for r in 1 2; do
  CODA_CACHE_DIR=$PWD/PKO/gpu/cache LD_LIBRARY_PATH=$PWD/PKO/gpu/lib:$LD_LIBRARY_PATH timeout -k 5 120 \
    PKO/gpu/bench_fused $ARGS > "$L/fused-old-$r.txt" 2>&1
  echo "old $r exit $?"; cat "$L/fused-old-$r.txt"
  timeout -k 5 120 "$P/bench_fused" $ARGS > "$L/fused-new-$r.txt" 2>&1
  echo "new $r exit $?"; cat "$L/fused-new-$r.txt"
done
finish
