#!/bin/bash
# Call 6 again with splits under 64 positions kept on the position-at-a-time
# scan: test_decode_gpu (against the CPU decoder), then
# coda generate --bench --profile before (8373527,
# .carry/base2: its coda, lib and kernel cache, xz) and after
# (.carry/post), interleaved: 1.1b with 512- and 8192-token prompts at
# batch 1 and 16, 1.1b batch 64 at 512, 8b batch 1 at 512 and 8192.
# There (carry .carry/base2 .carry/post):
#   bash bench/results/gpu-2026-12-06b/call7/run.sh
. bench/results/gpu-2026-12-06b/common.sh
rm -rf PRE; mkdir -p PRE && tar -xJf .carry/base2/pack.txz -C PRE; Q=$PWD/PRE/gpu
cat .carry/base2/commit.txt > "$L/commit-before.txt"
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $? ($SECONDS s)"; grep -E "FAIL|checks, " "$L/test_decode.txt" | tail -4
copy_bw
gen() { # LABEL DIR SHAPE BATCHES PROMPT
  [ $SECONDS -gt 200 ] && { echo "== $3 b$4 p$5 $1 skipped (time)"; return; }
  local f="$L/gen-$3-$4-$5-$1-1.txt"
  LD_LIBRARY_PATH=$2/lib:$LD_LIBRARY_PATH CODA_CACHE_DIR=$2/cache timeout -k 5 100 "$2/coda" generate \
    --device gpu --bench --prompt-len "$5" --tokens 256 --hbm-gbps "$BW" --shape "$3" --batches "$4" \
    --profile > "$f" 2>&1
  echo "== $3 b$4 p$5 $1 exit $? ($SECONDS s)"; grep -E "^ +[0-9]|rror|attention " "$f" | head -8
}
for a in "1.1b 1,16,64 512" "8b 1 512" "1.1b 1,16 8192"; do
  gen before "$Q" $a; gen after "$P" $a
done
finish
