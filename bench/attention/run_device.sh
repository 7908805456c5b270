#!/bin/bash
# On a machine with an sm_90 GPU: the attention correctness test, the kernel
# timings and the PyTorch SDPA baseline at the same shapes with the ratios,
# logged under $OUT (about 1-2 minutes). Uses the binaries from
# bench/attention/build.sh in .carry/attn/ (or $BIN).
#   run_device.sh          test + bench + SDPA ratios
#   run_device.sh test     the test only
#   run_device.sh cudnn    cuDNN through coda (CODA_ATTENTION) beside the own
#                          kernels and SDPA's cuDNN and flash backends
#                          (bench_cudnn, sdpa_cudnn.py); cuDNN from PyTorch's
#                          nvidia-cudnn wheel unless CODA_CUDNN_LIB is set
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/attn-out}
BIN=${BIN:-.carry/attn}
mkdir -p "$OUT"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"
if [ -z "$CODA_CUDNN_LIB" ]; then
  L=$(python3 -c "import torch,os,glob;r=os.path.dirname(os.path.dirname(torch.__file__));c=glob.glob(r+'/nvidia/**/libcudnn.so.9',recursive=True);print(c[0] if c else '')" 2>/dev/null)
  [ -n "$L" ] && export CODA_CUDNN_LIB=$L LD_LIBRARY_PATH=$(dirname "$L"):$LD_LIBRARY_PATH
fi
if [ "$1" = "cudnn" ]; then
  timeout 150 "$BIN/bench_cudnn" "$OUT/bench_cudnn.json" > "$OUT/bench_cudnn.md" 2> "$OUT/bench_cudnn.err"
  echo "bench_cudnn rc=$?"; grep -v "^CUDNN|" "$OUT/bench_cudnn.md"
  timeout 100 python3 bench/attention/sdpa_cudnn.py "$OUT/bench_cudnn.md" "$OUT/sdpa_cudnn.json" > "$OUT/sdpa_cudnn.md" 2>&1
  echo "sdpa_cudnn rc=$?"; cat "$OUT/sdpa_cudnn.md"
  exit 0
fi
timeout 100 "$BIN/test_attention_gpu" > "$OUT/test.log" 2>&1; echo "test rc=$?"
grep -E "FAIL|mismatch|passed" "$OUT/test.log" | head -40
if [ "$1" != "test" ]; then
  timeout 100 "$BIN/bench_attention" > "$OUT/bench.md" 2>&1; echo "bench rc=$?"
  grep -v "^CODA|" "$OUT/bench.md"
  timeout 100 python3 bench/attention/sdpa.py "$OUT/bench.md" > "$OUT/sdpa.md" 2>&1
  echo "sdpa rc=$?"; cat "$OUT/sdpa.md"
fi
