#!/bin/bash
# 2026-12-07, call 3 (same warm machine): batch-1 decode at 1.1b, the
# decode attention's split merge in a kernel of its own (the default,
# CODA_DECODE_MERGE=kernel) against the last block's merge
# (CODA_DECODE_MERGE=last), A B B A; table: bench/generate/table.py.
PACK=.carry/p3 source bench/gpu_env.sh
copy_bw
r=0
for v in kernel last last kernel; do
  r=$((r + 1))
  CODA_DECODE_MERGE=$v timeout -k 3 25 "$P/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" --shape 1.1b --batches 1 > "$L/gen-1.1b-1-512-$v-$r.txt" 2>&1
  echo "$v $r exit $?"; grep -E "^ +[0-9]" "$L/gen-1.1b-1-512-$v-$r.txt" | head -2
done
finish
