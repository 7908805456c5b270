#!/bin/bash
# On a machine with an sm_90 GPU: runs the GEMM correctness test, the
# benchmark and (optionally) compute-sanitizer, logging under $OUT.
# Uses the binaries in .carry/ (bench/gemm/build_standalone.sh) and rebuilds
# them here if they do not load. Usage: run_device.sh [test] [bench] [sanitize] [sass]
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/gemm-out}
mkdir -p "$OUT"
export PATH=$PATH:${CUDA_HOME:-/usr/local/cuda}/bin
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$OUT/gpu.txt" 2>&1
cat "$OUT/gpu.txt"
if ldd .carry/test_gemm_gpu | grep -q "not found"; then
  echo "carried binaries do not load here; rebuilding"
  bash bench/gemm/build_standalone.sh > "$OUT/build.log" 2>&1 || { tail -20 "$OUT/build.log"; exit 1; }
fi
for what in "$@"; do
  case $what in
    sass)
      for f in .carry/obj/gemm_*.o; do
        echo "$f: $(cuobjdump -sass $f | grep -c HGMMA) HGMMA, $(cuobjdump -sass $f | grep -cE 'LDL|STL') LDL/STL"
      done 2>&1 | tee "$OUT/sass.txt" ;;
    test)
      timeout 300 .carry/test_gemm_gpu > "$OUT/test.log" 2>&1; echo "test rc=$?"
      grep -E "FAIL" "$OUT/test.log" | head -15; grep -E "passed|seed" "$OUT/test.log" ;;
    bench)
      timeout 300 .carry/bench_gemm > "$OUT/bench.md" 2>&1; echo "bench rc=$?"; cat "$OUT/bench.md" ;;
    sanitize)
      timeout 200 compute-sanitizer --tool memcheck .carry/test_gemm_gpu --small > "$OUT/memcheck.log" 2>&1
      echo "memcheck rc=$?"; tail -4 "$OUT/memcheck.log" ;;
  esac
done
