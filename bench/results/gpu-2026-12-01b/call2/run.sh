#!/bin/bash
# Call 2 (b): the step profile at d512 and 1.1 B with the plans tuned at
# build time (--tune-plans 1, the default), the 1.1 B one also with
# --tune-plans 0, the start-up and checkpoint times of each.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > "$L/gpu.txt"
export CODA_CACHE_DIR=$P/cache
W=$(mktemp -d); mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' > "$W/corpus/docs"
"$P/coda" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" > /dev/null
D512="--layers 6 --dim 512 --heads 8 --kv-heads 8 --ffn 2048 --vocab 32768 --tied 0 --seq 1024 --batch 16"
B1="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32768 --tied 0 --seq 2048 --batch 4"
COMMON="--data $W/data --val-every 0 --val-batches 0 --warmup 3 --profile --profile-warmup 3"
timeout 100 "$P/coda" train --device gpu $D512 $COMMON --steps 23 --out "$W/a" > "$L/profile-d512.txt" 2>&1; echo "d512 rc=$?"
timeout 150 "$P/coda" train --device gpu $B1 $COMMON --steps 13 --out "$W/b" > "$L/profile-1b.txt" 2>&1; echo "1b rc=$?"
timeout 150 "$P/coda" train --device gpu $B1 $COMMON --steps 13 --out "$W/c" --tune-plans 0 > "$L/profile-1b-notune.txt" 2>&1; echo "1b notune rc=$?"
for f in d512 1b 1b-notune; do echo "== $f"; grep -A16 '^profile:' "$L/profile-$f.txt"; grep '^time:\|^step     13' "$L/profile-$f.txt"; done
