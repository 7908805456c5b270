#!/bin/bash
# Call 2 (c): the one-row GEMV with column pairs per warp and the RMSNorm
# applied on load. Packs: "old" = 84d1c83 (the decoder of gpu-2026-12-01e),
# "new" = this commit, "nsep" = new with CODA_DECODE_NORM=separate (the
# RMSNorm kernel, then the new GEMV on its bf16 row). test_decode_gpu with
# new; the decoder at 1.1 B and 8B, batch 1, 16, 64, then batch 1 twice
# more, each round interleaving the three.
. bench/results/gpu-2026-12-02c/common.sh
rm -rf PKO; mkdir -p PKO; tar -xzf .carry/old/gpu-old.tgz -C PKO
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "batch 1, |FAIL|coverage|checks" "$L/test_decode.txt" | tail -8
copy_bw
run() { # VARIANT SHAPE BATCHES ROUND
  local v=$1 d=$P env=()
  case $v in old) d=$PWD/PKO/gpu;; nsep) env=(CODA_DECODE_NORM=separate);; esac
  local f="$L/generate-$2-$v-$4.txt"
  env LD_LIBRARY_PATH="$d/lib:$LD_LIBRARY_PATH" "${env[@]}" timeout -k 5 90 "$d/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" --shape "$2" --batches "$3" > "$f" 2>&1
  echo "$2 $v round $4 exit $?"; grep -E "^ +[0-9]" "$f"
}
for v in old new nsep; do run "$v" 1.1b 1,16,64 1; run "$v" 8b 1,16,64 1; done
for r in 2 3; do for v in old new nsep; do run "$v" 1.1b 1 $r; run "$v" 8b 1 $r; done; done
finish
