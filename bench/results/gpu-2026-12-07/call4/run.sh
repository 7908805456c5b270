#!/bin/bash
# 2026-12-07, call 4 (same warm machine): a Hugging Face Llama folder of
# random weights at the 1.1b bench shape with a BPE tokenizer
# (bench/generate/hf_checkpoint.py), imported and streamed by
# coda generate --checkpoint --device gpu --stats.
PACK=.carry/p3 source bench/gpu_env.sh
T0=$SECONDS
timeout -k 3 45 python3 bench/generate/hf_checkpoint.py --shape 1.1b --out "$PWD/PK/hfck" > "$L/hfck.txt" 2>&1
echo "hf_checkpoint exit $? ($((SECONDS - T0)) s)"
timeout -k 3 25 "$P/coda" generate --checkpoint "$PWD/PK/hfck" --device gpu --prompt "The decoder" --tokens 256 \
  --temperature 0 --stats > "$L/stream-1.1b.txt" 2>&1
echo "stream exit $? ($((SECONDS - T0)) s)"; tail -c 700 "$L/stream-1.1b.txt"
finish
