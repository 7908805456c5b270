#!/bin/bash
# Call 1 (d): a one-row decode step as one persistent kernel
# (decode_row_step.cu). One pack: "row" = the one kernel at batch 1
# (CODA_DECODE_ROW_STEP=1: the default in calls 1-5, the knob's value
# ignored there), "sep" = the separate kernels of the previous rounds
# (CODA_DECODE_ROW_STEP=0: the knob in calls 1-5, the default after). test_decode_gpu first; then
# batch 1 at 1.1 B and 8B, three rounds interleaving the two (ROUNDS="1 2": fewer; PROFILE=1:
# each with its step by phase; SKIP_TEST=1: without the test).
. bench/results/gpu-2026-12-02c/common.sh
[ -n "${SKIP_TEST:-}" ] || { timeout -k 5 200 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "batch 1|FAIL|coverage|checks|one-kernel" "$L/test_decode.txt" | tail -14; }
copy_bw
run() { # VARIANT SHAPE BATCHES ROUND
  local v=$1 env=()
  case $v in sep) env=(CODA_DECODE_ROW_STEP=0);; row) env=(CODA_DECODE_ROW_STEP=1);; esac
  local f="$L/generate-$2-$v-$4.txt"
  env "${env[@]}" timeout -k 5 90 "$P/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" --shape "$2" --batches "$3" ${PROFILE:+--profile} > "$f" 2>&1
  echo "$2 $v round $4 exit $?"; grep -E "^ +[0-9]|rror|phase" "$f" | head -5
}
for r in ${ROUNDS:-1 2 3}; do for v in row sep; do run "$v" 1.1b 1 $r; run "$v" 8b 1 $r; done; done
finish
