#!/bin/bash
# Call 1 (b): the GPU training tests and the step profile after binding the
# plans to flat weight and gradient buffers and the one-launch AdamW, at the d512
# and 1.1 B shapes of bench/train/run.sh. Pack: tests/gpu/pack_shared.sh.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$L/gpu.txt"
OUT=$L tests/gpu/run_all.sh "$P" train
export CODA_CACHE_DIR=$P/cache
W=$(mktemp -d); mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' > "$W/corpus/docs"
"$P/coda" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" > /dev/null
timeout 100 "$P/coda" train --device gpu --layers 6 --dim 512 --heads 8 --kv-heads 8 --ffn 2048 --vocab 32768 --tied 0 \
  --seq 1024 --batch 16 --data "$W/data" --val-every 0 --val-batches 0 --steps 23 --warmup 3 --out "$W/a" \
  --profile --profile-warmup 3 > "$L/profile-d512.txt" 2>&1; echo "d512 rc=$?"
timeout 300 "$P/coda" train --device gpu --layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32768 --tied 0 \
  --seq 2048 --batch 4 --data "$W/data" --val-every 0 --val-batches 0 --steps 13 --warmup 3 --out "$W/b" \
  --profile --profile-warmup 3 > "$L/profile-1b.txt" 2>&1; echo "1b rc=$?"
grep -A16 '^profile:' "$L/profile-d512.txt"; grep -A16 '^profile:' "$L/profile-1b.txt"
tar -czf "$O/logs.tgz" -C "$O" logs
