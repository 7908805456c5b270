#!/bin/bash
# Call 3 (c): the decoder beside Hugging Face generate in one call. Packs:
# "old" = 84d1c83 (the decoder of gpu-2026-12-01e), "mid" = 43e5755 (call 2's
# column pairs and norm on load), "new" = this commit (four warps a block,
# each lane's weight loads of several k steps issued together).
# test_decode_gpu with new; new at 1.1 B and 8B, batch 1, 16, 64; batch 1
# with old, mid and new interleaved; then HF generate with the static cache
# (which compiles the forward itself) at 1.1 B batch 1, 16, 64 and 8B batch 1.
. bench/results/gpu-2026-12-02c/common.sh
for v in old mid; do rm -rf PK$v; mkdir -p PK$v; tar -xzf .carry/$v/gpu-$v.tgz -C PK$v; done
timeout -k 5 100 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode.txt" 2>&1
echo "test_decode_gpu exit $?"; grep -E "batch 1, |FAIL|coverage|checks" "$L/test_decode.txt" | tail -6
copy_bw
run() { # VARIANT SHAPE BATCHES ROUND
  local v=$1 d=$P
  case $v in old|mid) d=$PWD/PK$v/gpu;; esac
  local f="$L/generate-$2-$v-$4.txt"
  env LD_LIBRARY_PATH="$d/lib:$LD_LIBRARY_PATH" timeout -k 5 60 "$d/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" --shape "$2" --batches "$3" > "$f" 2>&1
  echo "$2 $v round $4 exit $?"; grep -E "^ +[0-9]" "$f"
}
run new 1.1b 1,16,64 1; run new 8b 1,16,64 1
for v in old mid new; do run "$v" 1.1b 1 2; run "$v" 8b 1 2; done
t0=$SECONDS
timeout -k 5 230 python3 bench/generate/hf_generate.py --shape 1.1b --batches 1,16,64 --modes static \
  --out "$L/hf-1.1b.json" > "$L/hf-1.1b.txt" 2>&1
echo "hf 1.1b exit $? ($((SECONDS - t0)) s)"; tail -5 "$L/hf-1.1b.txt"
t0=$SECONDS
timeout -k 5 120 python3 bench/generate/hf_generate.py --shape 8b --batches 1 --modes static \
  --out "$L/hf-8b.json" > "$L/hf-8b.txt" 2>&1
echo "hf 8b exit $? ($((SECONDS - t0)) s)"; tail -3 "$L/hf-8b.txt"
finish
