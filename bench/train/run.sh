#!/bin/bash
# The training benchmark: `coda train --device gpu` and the peers at the
# same shapes, in one GPU call, printed as one table (tokens/s, MFU at
# 989 TFLOP/s, peak device memory, time to the first step).
#
#   bench/train/run.sh PACK_DIR [PEERS_DIR] [WHEELS_DIR]
#
# PACK_DIR holds `coda` and its kernel cache (tests/gpu/pack_shared.sh or
# pack_all.sh). PEERS_DIR, when given, holds the PyTorch scripts of the
# benchmark environment (train_torch2.py: eager, torch.compile bf16,
# torch.compile with fp32 master weights + autocast; peers_train.py: Hugging
# Face LlamaForCausalLM with Liger kernels); WHEELS_DIR the liger-kernel
# wheel. Shapes (random-order text tokens for coda, random tokens for the
# peers; 20 timed steps after warm-up):
#   d512: 6 layers, d 512, ffn 2048, 8/8 heads, vocab 32768, 16 x 1024
#   1b:   16 layers, d 2048, ffn 8192, 32/8 heads, vocab 32768, 4 x 2048
# PROFILE=1 adds `--profile` to the coda runs (the per-phase table);
# EXTRA adds its words to them (e.g. EXTRA="--keep-logits 1").
# Writes $OUT (default ./train-logs): coda-SHAPE.txt, torch.log, peers.log,
# train.md. coda's time to the first step and time per checkpoint save are
# the trainer's own counts (the summary's `time:` line).
set -u
P=${1:?usage: bench/train/run.sh PACK_DIR [PEERS_DIR] [WHEELS_DIR]}
PEERS=${2:-}
WHL=${3:-}
L=${OUT:-train-logs}
mkdir -p "$L"
export CODA_CACHE_DIR=$P/cache
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' \
  > "$W/corpus/docs"
"$P/coda" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" > /dev/null || exit 1
declare -A SHAPE=(
  [d512]="--layers 6 --dim 512 --heads 8 --kv-heads 8 --ffn 2048 --vocab 32768 --tied 0 --seq 1024 --batch 16"
  [1b]="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32768 --tied 0 --seq 2048 --batch 4"
)
prof=""
[ "${PROFILE:-0}" = 1 ] && prof="--profile"
for s in d512 1b; do
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout 200 "$P/coda" train --device gpu ${SHAPE[$s]} --data "$W/data" --val-every 0 --val-batches 0 \
    --steps 23 --warmup 3 --out "$W/run-$s" $prof ${EXTRA:-} > "$L/coda-$s.txt" 2>&1
  rc=$?
  echo "coda $s rc=$rc wall $(( ($(date +%s%N) - t0) / 1000000 / 1000 )).$(( ($(date +%s%N) - t0) / 1000000 % 1000 )) s" >> "$L/coda-walls.txt"
done
if [ -n "$PEERS" ]; then
  if [ -n "$WHL" ] && ls "$WHL"/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/peer-site \
      "$WHL"/*.whl > "$L/pip.log" 2>&1 && export PYTHONPATH=/tmp/peer-site:${PYTHONPATH:-}
  fi
  OUT=$L PYTHONUNBUFFERED=1 timeout 330 python3 "$PEERS/train_torch2.py" 1b,d512 eager,compile,compile_amp > "$L/torch.log" 2>&1
  OUT=$L PYTHONUNBUFFERED=1 timeout 120 python3 "$PEERS/peers_train.py" 1b,d512 liger > "$L/peers.log" 2>&1
fi
python3 bench/train/table.py "$L" | tee "$L/train.md"
