#!/bin/bash
# 2026-12-07: the decode table, coda and HF generate with the static cache
# in the same call, at the shapes given (default "1.1b 8b"):
#   bash bench/results/gpu-2026-12-07/decode.sh ["1.1b 8b"]
#  1. test_decode_gpu (the cached decode against the CPU decoder and the
#     plan prefill; the last-block merge against the merge kernel);
#  2. batch 1, 512-token prompt: the decode attention's split merge in a
#     kernel of its own (default) against the last block's merge
#     (CODA_DECODE_MERGE=last): A B B A at 1.1b, A B at 8b;
#  3. coda generate --device gpu --bench (256 greedy steps, random bf16
#     weights): batch 1, 16 and 64 at 512 and 8192-token prompts (8B's
#     64 x 8192 only where the GPU holds its 69 GB cache), and batch 1
#     with --profile (the step by phase against its floor);
#  4. a Hugging Face checkpoint of random weights and a BPE tokenizer
#     (bench/generate/hf_checkpoint.py, 1.1b) imported by coda generate
#     --checkpoint --device gpu --stats: the text streamed, with its rate;
#  5. HF generate, static cache (compiled forward), 64 new tokens, each
#     (shape, batch, prompt) in its own process, the most telling rows
#     first, until the call's time (LIMIT, default 560 s) runs out;
#  6. bench/generate/table.py: decode.md and decode.json.
# Here: cmake --build build -j2; tests/gpu/pack_shared.sh build .carry/p2;
#   git rev-parse HEAD > .carry/p2/commit.txt
# There (carry .carry/p2): bash bench/results/gpu-2026-12-07/decode.sh
SHAPES=${1:-1.1b 8b}
PACK=${PACK:-.carry/p2} source bench/gpu_env.sh
T0=$SECONDS
LIMIT=${LIMIT:-560}
copy_bw
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $? ($((SECONDS - T0)) s)"; grep -E "FAIL|checks|coverage" "$L/test_decode.txt" | tail -6
gen() { # SHAPE BATCHES PROMPT [VARIANT ROUND [ENV...]] [-- FLAGS]
  local s=$1 b=$2 p=$3 v=${4:-} r=${5:-} f
  f="$L/gen-$s-$b-$p${v:+-$v-$r}.txt"
  shift 5 2>/dev/null || shift $#
  local envs=() flags=()
  while [ $# -gt 0 ]; do case $1 in --) shift; flags=("$@"); break ;; *) envs+=("$1"); shift ;; esac; done
  env "${envs[@]}" timeout -k 5 150 "$P/coda" generate --device gpu --bench --prompt-len "$p" \
    --tokens 256 --hbm-gbps "$BW" --shape "$s" --batches "$b" "${flags[@]}" > "$f" 2>&1
  echo "== $s b$b p$p ${v:-} ${r:-} exit $? ($((SECONDS - T0)) s)"; grep -E "^ +[0-9]|rror" "$f" | head -4
}
gen 1.1b 1 512 kernel 1 CODA_DECODE_MERGE=kernel
gen 1.1b 1 512 last 1 CODA_DECODE_MERGE=last
gen 1.1b 1 512 last 2 CODA_DECODE_MERGE=last
gen 1.1b 1 512 kernel 2 CODA_DECODE_MERGE=kernel
gen 8b 1 512 kernel 1 CODA_DECODE_MERGE=kernel
gen 8b 1 512 last 1 CODA_DECODE_MERGE=last
MIB=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -1)
fits() { # SHAPE BATCH PROMPT: 8B's cache of 64 x 8192 tokens is 69 GB
  ! { [ "$1" = 8b ] && [ "$2" = 64 ] && [ "$3" = 8192 ] && [ "${MIB:-0}" -lt 100000 ]; }
}
for s in $SHAPES; do
  for p in 512 8192; do
    b=1,16; fits "$s" 64 $p && b=1,16,64
    gen "$s" "$b" $p
  done
  gen "$s" 1 512 profile 1 -- --profile
done
if [ "${SHAPES#*1.1b}" != "$SHAPES" ]; then # an imported HF checkpoint streams text
  timeout -k 5 120 python3 bench/generate/hf_checkpoint.py --shape 1.1b --out "$PWD/PK/hfck" > "$L/hfck.txt" 2>&1
  echo "hf_checkpoint exit $? ($((SECONDS - T0)) s)"
  timeout -k 5 90 "$P/coda" generate --checkpoint "$PWD/PK/hfck" --device gpu --prompt "The decoder" \
    --tokens 256 --temperature 0 --stats > "$L/stream-1.1b.txt" 2>&1
  echo "stream exit $? ($((SECONDS - T0)) s)"; tail -c 400 "$L/stream-1.1b.txt"; echo
  rm -rf "$PWD/PK/hfck"
fi
for p in 512 8192; do
  for b in 1 16 64; do
    for s in $SHAPES; do
      fits "$s" $b $p || continue
      left=$((LIMIT - (SECONDS - T0) - 15))
      [ $left -lt 45 ] && { echo "HF static $s b$b p$p: not run (time)"; continue; }
      timeout -k 5 $((left < 200 ? left : 200)) python3 bench/generate/hf_generate.py --shape "$s" --batches $b \
        --modes static --prompt-len $p --tokens 64 --out "$L/hf-$s-b$b-p$p.json" > "$L/hf-$s-b$b-p$p.txt" 2>&1
      echo "== HF static $s b$b p$p exit $? ($((SECONDS - T0)) s)"; tail -1 "$L/hf-$s-b$b-p$p.txt"
    done
  done
done
python3 bench/generate/table.py "$L" --json "$O/decode.json" --gpu "$(cut -d, -f1 "$L/gpu.txt" | head -1)" \
  --commit "$COMMIT" > "$O/decode.md" 2>&1
cat "$O/decode.md"
finish
