#!/bin/bash
# One GPU call for the one-row GEMV variants behind CODA_DECODE_ROW_SPLIT
# (src/backends/cuda/decode_kernels.cu), prepared here, run there:
#   1. test_decode_gpu (the decoder against the CPU decoder, graphs
#      included, each CODA_DECODE_ROW_SPLIT value among its cases);
#   2. bench/generate/gemv_row (the variants alone, checked against fp64,
#      per layer against the floor) at 1b and 8b;
#   3. batch-1 decode steps at 1.1 B and 8B, default against auto, 2 and 4,
#      interleaved over ROUNDS (default "1 2").
# Here: build (cmake --build build), then
#   PACK_ONLY="test_decode_gpu" tests/gpu/pack_all.sh build .carry/post
#   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a \
#     bench/generate/gemv_row.cu -o .carry/post/gemv_row
#   git rev-parse HEAD > .carry/commit.txt
# There (carry .carry): bash bench/generate/row_split_call.sh
# Logs: $OUT/logs.tgz; the table goes to bench/results/ with the date.
. bench/results/gpu-2026-12-02c/common.sh
timeout -k 5 200 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "ROW_SPLIT|FAIL|checks" "$L/test_decode.txt" | tail -14
for s in 1b 8b; do
  timeout -k 5 90 .carry/post/gemv_row $s > "$L/gemv_row-$s.txt" 2>&1
  echo "gemv_row $s exit $?"; cat "$L/gemv_row-$s.txt" | tail -25
done
copy_bw
run() { # VARIANT SHAPE ROUND
  local env=(); [ "$1" = default ] || env=(CODA_DECODE_ROW_SPLIT=$1)
  local f="$L/generate-$2-$1-$3.txt"
  env "${env[@]}" timeout -k 5 90 "$P/coda" generate --device gpu --bench --prompt-len 512 \
    --tokens 256 --hbm-gbps "$BW" --shape "$2" --batches 1 ${PROFILE:+--profile} > "$f" 2>&1
  echo "$2 $1 round $3 exit $?"; grep -E "^ +[0-9]|rror|phase" "$f" | head -5
}
for r in ${ROUNDS:-1 2}; do for v in default auto 2 4; do run $v 1.1b $r; run $v 8b $r; done; done
finish
