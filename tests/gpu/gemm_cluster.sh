#!/bin/bash
# The cluster entries of the GEMM tile table ("... c2") on a machine with an
# sm_90 GPU:  tests/gpu/gemm_cluster.sh BUILD_DIR [STEP]...
# Steps (default: test sanitize bench):
#  test      test_gemm_gpu restricted to them (every layout, both operand
#            types, ragged and odd tile counts, split-K 3, large shapes vs
#            cuBLAS, tuned calls);
#  sanitize  compute-sanitizer memcheck and synccheck on the tiny shapes;
#  bench     bench_gemm --tuned on the 1B and 8B Transformer shapes (all
#            tile entries; a fresh tuning cache, so the tuned column shows
#            whether the tuner picks a cluster entry);
#  quick     the same on three shapes.
# Logs go to $OUT (default gemm-cluster-out). Exit status 1 on any failure.
set -u
B=${1:?usage: tests/gpu/gemm_cluster.sh BUILD_DIR [test|sanitize|bench|quick]...}
shift
[ $# -gt 0 ] || set -- test sanitize bench
OUT=${OUT:-gemm-cluster-out}
mkdir -p "$OUT"
rc=0
for step in "$@"; do
  case $step in
    test)
      r=0
      CODA_TEST_GEMM_CONFIG=c2 timeout 540 "$B/tests/gpu/test_gemm_gpu" > "$OUT/test_c2.log" 2>&1 || r=1
      echo "test_gemm_gpu (c2 entries): rc=$r"
      grep -E "^FAIL" "$OUT/test_c2.log" | head -15
      grep -E "tile configuration|passed|tuner" "$OUT/test_c2.log"
      [ $r = 0 ] || rc=1 ;;
    sanitize)
      command -v compute-sanitizer > /dev/null || { echo "no compute-sanitizer"; continue; }
      for tool in memcheck synccheck; do
        r=0
        CODA_TEST_GEMM_CONFIG=c2 timeout 240 compute-sanitizer --tool $tool --error-exitcode 1 \
          "$B/tests/gpu/test_gemm_gpu" --tiny > "$OUT/$tool.log" 2>&1 || r=1
        echo "$tool: rc=$r: $(grep -E 'ERROR SUMMARY|passed' "$OUT/$tool.log" | tr '\n' ' ')"
        [ $r = 0 ] || rc=1
      done ;;
    bench | quick)
      export CODA_CACHE_DIR="$OUT/tune-cache"
      rm -rf "$CODA_CACHE_DIR"
      mkdir -p "$CODA_CACHE_DIR"
      if [ $step = quick ]; then
        args=(--shape "1B up fwd" --shape "8B down dgrad" --shape "8B up wgrad")
      else
        args=(--shape 1B --shape 8B)
      fi
      timeout 560 "$B/bench/gemm/bench_gemm" --tuned "${args[@]}" > "$OUT/bench.md" 2>&1 || rc=1
      cat "$OUT/bench.md" ;;
    *) echo "unknown step $step"; rc=1 ;;
  esac
done
exit $rc
