#!/bin/bash
# On a machine with an sm_90 GPU: the attention correctness test, the kernel
# timings and the PyTorch SDPA baseline at the same shapes with the ratios,
# logged under $OUT (about 1-2 minutes). Uses the binaries from
# bench/attention/build.sh in .carry/attn/ (or $BIN).
#   run_device.sh          test + bench + SDPA ratios
#   run_device.sh test     the test only
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/attn-out}
BIN=${BIN:-.carry/attn}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
timeout 100 "$BIN/test_attention_gpu" > "$OUT/test.log" 2>&1; echo "test rc=$?"
grep -E "FAIL|mismatch|passed" "$OUT/test.log" | head -40
if [ "$1" != "test" ]; then
  timeout 100 "$BIN/bench_attention" > "$OUT/bench.md" 2>&1; echo "bench rc=$?"
  grep -v "^CODA|" "$OUT/bench.md"
  timeout 100 python3 bench/attention/sdpa.py "$OUT/bench.md" > "$OUT/sdpa.md" 2>&1
  echo "sdpa rc=$?"; cat "$OUT/sdpa.md"
fi
