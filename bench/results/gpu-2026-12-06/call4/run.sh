#!/bin/bash
# 2026-12-06, call 4: the GPU tests on the final tree: the epilogue
# programs (with the index built-ins' code generation: idiv, imod, seg,
# segpos), plans, graphs, and the training smoke test whose (f) compares
# CODA_OPTIM_OVERLAP=1 with the default.
source bench/results/gpu-2026-12-06/common.sh
for t in test_epilogue_gpu test_plan_gpu test_graph_gpu; do
  timeout 150 "$P/tests/gpu/$t" > "$L/$t.log" 2>&1; echo "$t rc=$?"; grep -i "index\|idiv" "$L/$t.log" | head -5; tail -2 "$L/$t.log"
done
timeout 120 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/smoke.log" 2>&1
echo "smoke rc=$?"; grep -E "^(FAIL|bit-identical|train_gpu_smoke|batch)" "$L/smoke.log"
finish
