#!/bin/bash
# The decode table in one GPU call: coda and HF generate with the static
# cache at the shapes given (default "1.1b 8b"), from the repository root:
#   PACK=DIR bash bench/generate/decode_table.sh ["1.1b 8b"]
# PACK holds tests/gpu/pack_shared.sh's gpu-all.tgz and commit.txt; the
# logs, decode.md and decode.json go to $OUT (bench/gpu_env.sh).
#  1. test_decode_gpu (the cached decode against the CPU decoder and the
#     plan prefill; the last-block merge against the merge kernel);
#  2. coda generate --device gpu --bench (256 greedy steps, random bf16
#     weights): batch 1, 16 and 64 at 512 and 8192-token prompts (8B's
#     64 x 8192 only where the GPU holds its 69 GB cache), and batch 1
#     with --profile (the step by phase against its floor);
#  3. a Hugging Face checkpoint of random weights and a BPE tokenizer
#     (bench/generate/hf_checkpoint.py, 1.1b) imported by coda generate
#     --checkpoint --device gpu --stats: the text streamed, with its rate;
#  4. HF generate, static cache (compiled forward), 64 new tokens, each
#     (shape, batch, prompt) in its own process, the most telling rows
#     first, until the call's time (LIMIT, default 560 s) runs out;
#  5. bench/generate/table.py: decode.md and decode.json.
SHAPES=${1:-1.1b 8b}
PACK=${PACK:?set PACK to the packed GPU build} source bench/gpu_env.sh
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
