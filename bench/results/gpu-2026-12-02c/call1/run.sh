#!/bin/bash
# Call 1 (c): the decoder's L2 prefetch, early trigger and merge in the
# partials. Packs: "old" = 84d1c83 (the decoder of gpu-2026-12-01e), "new" =
# this commit; "new pf0" = new with CODA_DECODE_PREFETCH=0, "new msep" = new
# with CODA_DECODE_MERGE=separate. test_decode_gpu with new; the decoder at
# 1.1 B (batch 1, 16, 64) and 8B (batch 1, 64), then batch 1 again, each
# round interleaving the four variants.
. bench/results/gpu-2026-12-02c/common.sh
rm -rf PKO; mkdir -p PKO; tar -xzf .carry/old/gpu-old.tgz -C PKO
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "vs|FAIL|coverage|checks" "$L/test_decode.txt" | tail -14
copy_bw
run() { # VARIANT SHAPE BATCHES ROUND
  local v=$1 d=$P env=()
  case $v in old) d=$PWD/PKO/gpu;; pf0) env=(CODA_DECODE_PREFETCH=0);; msep) env=(CODA_DECODE_MERGE=separate);; esac
  local f="$L/generate-$2-$v-$4.txt"
  env LD_LIBRARY_PATH="$d/lib:$LD_LIBRARY_PATH" "${env[@]}" timeout -k 5 90 "$d/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" --shape "$2" --batches "$3" > "$f" 2>&1
  echo "$2 $v round $4 exit $?"; grep -E "^ +[0-9]" "$f"
}
for v in old new pf0 msep; do run "$v" 1.1b 1,16,64 1; run "$v" 8b 1,64 1; done
for v in old new pf0 msep; do run "$v" 1.1b 1 2; run "$v" 8b 1 2; done
finish
