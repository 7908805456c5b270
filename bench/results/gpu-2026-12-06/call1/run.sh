#!/bin/bash
# 2026-12-06, call 1: AdamW beside the next forward and the head's
# automatic keep-logits. Carries .carry/post/gpu-all.tgz
# (tests/gpu/pack_shared.sh) and .carry/commit.txt.
#  1. tests/gpu/train_gpu_smoke.sh (with (f): overlapped and serial AdamW
#     give byte-identical loss logs and checkpoints);
#  2. bench/train/run.sh A/B with the step profile at d512, 1b and 1b-8k:
#     base (the new defaults: overlap on, keep-logits auto), serial
#     (CODA_OPTIM_OVERLAP=0), recompute (--keep-logits 0), interleaved.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$L/gpu.txt"
timeout 200 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/smoke.log" 2>&1
echo "smoke rc=$?"; grep -E "^(==|FAIL|bit-identical|train_gpu_smoke)" "$L/smoke.log"
COMMIT=$(cat .carry/commit.txt) SHAPES="d512 1b 1b-8k" BUDGET=330 PROFILE=1 \
  VARIANTS="base:|serial:CODA_OPTIM_OVERLAP=0|recompute:--keep-logits 0" \
  OUT=$L/ab bench/train/run.sh "$P" > "$L/ab.log" 2>&1
echo "ab rc=$?"; tail -80 "$L/ab.log"
tar -czf "$O/logs.tgz" -C "$O" logs
