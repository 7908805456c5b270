#!/bin/bash
# On a machine with an sm_90 GPU: the attention correctness test, the
# kernel timings and the PyTorch SDPA baseline, logged under $OUT.
# Uses the binaries from bench/attention/build.sh in .carry/attn/.
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/attn-out}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
timeout 120 .carry/attn/test_attention_gpu > "$OUT/test.log" 2>&1; echo "test rc=$?"
grep -E "FAIL|mismatch|max\|err|passed" "$OUT/test.log" | head -40
if [ "$1" != "test" ]; then
  timeout 120 .carry/attn/bench_attention > "$OUT/bench.md" 2>&1; echo "bench rc=$?"; cat "$OUT/bench.md"
  timeout 150 python3 bench/attention/sdpa.py > "$OUT/sdpa.md" 2>&1; echo "sdpa rc=$?"; cat "$OUT/sdpa.md"
fi
