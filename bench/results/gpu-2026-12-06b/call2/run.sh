#!/bin/bash
# Decode after the prefill chunk grew to a whole prompt of max_len:
#   1. test_decode_gpu (against the CPU decoder; the 2100-token prompt in
#      one chunk and in chunks of 2048 rows);
#   2. coda generate --bench --profile with 8192-token prompts: 1.1b batch 1
#      and 16, 8b batch 1 (call 1 has the same rows before the change);
#   3. HF generate with the static cache (compiled forward) at 1.1b batch 1,
#      512 and 8192-token prompts, 64 new tokens, for the prefill ratio.
# Here: cmake --build build; tests/gpu/pack_shared.sh build .carry/post;
#   git rev-parse HEAD > .carry/commit.txt; cp .carry/commit.txt .carry/post/
# There (carry .carry/post): bash bench/results/gpu-2026-12-06b/call2/run.sh
. bench/results/gpu-2026-12-06b/common.sh
timeout -k 5 200 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $? ($SECONDS s)"; grep -E "FAIL|checks|coverage|long prompt" "$L/test_decode.txt" | tail -8
copy_bw
gen() { # SHAPE BATCHES PROMPT
  local f="$L/gen-$1-$2-$3.txt"
  timeout -k 5 150 "$P/coda" generate --device gpu --bench --prompt-len "$3" \
    --tokens 256 --hbm-gbps "$BW" --shape "$1" --batches "$2" --profile > "$f" 2>&1
  echo "== $1 b$2 p$3 exit $? ($SECONDS s)"; grep -E "^ +[0-9]|rror|sum " "$f" | head -8
}
gen 1.1b 1,16 8192
gen 8b 1 8192
gen 1.1b 1,16 512
for pl in 512 8192; do
  [ $SECONDS -gt 420 ] && break
  timeout -k 5 150 python3 bench/generate/hf_generate.py --shape 1.1b --batches 1 --modes static \
    --prompt-len $pl --tokens 64 --out "$L/hf-1.1b-p$pl.json" > "$L/hf-1.1b-p$pl.txt" 2>&1
  echo "== HF static 1.1b b1 p$pl exit $? ($SECONDS s)"; tail -4 "$L/hf-1.1b-p$pl.txt"
done
finish
