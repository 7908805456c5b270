#!/bin/bash
# coda_plan_tune_fusion's choices cached on disk, on a machine with an sm_90
# GPU:  tests/gpu/fused_tune_cache.sh BUILD_DIR [KERNEL_CACHE_DIR]
#
# KERNEL_CACHE_DIR (optional): compiled kernels to start from (copied; e.g.
# one filled by `coda bench block CONFIGS --precompile`); missing kernels are
# compiled first. The tuning files start empty in $OUT/cache.
#  1. test_gemm_gpu --small with the GEMM tuner on: its tuned choice read back
#     by a fresh context from gemm-tune.txt (the device tag is shared);
#  2. `coda bench block CONFIGS --tuned` three times:
#       a. fresh: every GEMM step timed, fused-tune.txt written;
#       b. again: every step "(from the tuning cache)", the same choices;
#       c. CODA_RETUNE=1: every step timed again.
# CONFIGS: $CONFIGS (default "d512 gpt2-768"). Logs in $OUT (default
# fused-tune-out). Exit status 1 on any failure.
set -u
B=${1:?usage: tests/gpu/fused_tune_cache.sh BUILD_DIR [KERNEL_CACHE_DIR]}
OUT=${OUT:-fused-tune-out}
CONFIGS=${CONFIGS:-d512 gpt2-768}
mkdir -p "$OUT/cache"
export CODA_CACHE_DIR=$(cd "$OUT/cache" && pwd)
if [ -n "${2:-}" ]; then cp -r "$2"/. "$CODA_CACHE_DIR"/; fi
rm -f "$CODA_CACHE_DIR/fused-tune.txt" "$CODA_CACHE_DIR/gemm-tune.txt"
unset CODA_RETUNE
rc=0
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | tee "$OUT/gpu.txt"

r=0
CODA_AUTOTUNE=1 timeout 300 "$B/tests/gpu/test_gemm_gpu" --small > "$OUT/gemm.log" 2>&1 || r=1
echo "test_gemm_gpu --small (tuner on): rc=$r"
grep -E "^FAIL|tuner|passed" "$OUT/gemm.log" | head -12
head -3 "$CODA_CACHE_DIR/gemm-tune.txt" 2>/dev/null
[ $r = 0 ] || rc=1

# shellcheck disable=SC2086
timeout 500 "$B/coda" bench block $CONFIGS --precompile > "$OUT/precompile.log" 2>&1
echo "precompile: rc=$? $(tail -1 "$OUT/precompile.log")"

# Runs the tuned benchmark; writes the step choices (times and cache marker
# dropped) to $OUT/$1.choices; echoes "steps cached milliseconds rc".
tuned() {
  local t0 r
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout 500 "$B/coda" bench block $CONFIGS --tuned --iters 3 --warmup 1 --csv \
    > "$OUT/$1.csv" 2> "$OUT/$1.err"
  r=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  grep ": tuned " "$OUT/$1.err" | sed 's/ (from the tuning cache)$//; s/ pingpong .*  -> / -> /' \
    > "$OUT/$1.choices"
  local n c
  n=$(grep -c ': tuned ' "$OUT/$1.err")
  c=$(grep -c '(from the tuning cache)$' "$OUT/$1.err")
  echo "${n:-0} ${c:-0} $ms $r"
}

read -r n1 c1 s1 r1 <<< "$(tuned fresh)"
lines=$(grep -vc '^#' "$CODA_CACHE_DIR/fused-tune.txt" 2>/dev/null)
lines=${lines:-0}
echo "fresh:   $n1 steps, $c1 from the cache, ${s1} ms; fused-tune.txt: $lines entries"
[ "$r1" = 0 ] && [ "$n1" -gt 0 ] && [ "$c1" = 0 ] && [ "$lines" -gt 0 ] || { echo "FAIL fresh"; rc=1; }
head -4 "$CODA_CACHE_DIR/fused-tune.txt"

read -r n2 c2 s2 r2 <<< "$(tuned cached)"
echo "cached:  $n2 steps, $c2 from the cache, ${s2} ms"
[ "$r2" = 0 ] && [ "$n2" = "$n1" ] && [ "$c2" = "$n2" ] || { echo "FAIL cached"; rc=1; }
if cmp -s "$OUT/fresh.choices" "$OUT/cached.choices"; then
  echo "cached choices equal the timed ones"
else
  echo "FAIL cached choices differ:"; diff "$OUT/fresh.choices" "$OUT/cached.choices" | head; rc=1
fi

export CODA_RETUNE=1
read -r n3 c3 s3 r3 <<< "$(tuned retune)"
unset CODA_RETUNE
echo "retune:  $n3 steps, $c3 from the cache, ${s3} ms"
[ "$r3" = 0 ] && [ "$n3" = "$n1" ] && [ "$c3" = 0 ] || { echo "FAIL retune"; rc=1; }
diff "$OUT/fresh.choices" "$OUT/retune.choices" > "$OUT/retune.diff" ||
  echo "retune changed $(grep -c '^>' "$OUT/retune.diff") choices (timing noise; see $OUT/retune.diff)"
grep -h "vs fused\|cannot" "$OUT"/fresh.err "$OUT"/cached.err | head -8
echo "fused_tune_cache: rc=$rc"
exit $rc
