#!/bin/bash
# 2026-12-06, call 1: AdamW and the gradient norm beside the forward and
# backward, the head's automatic keep-logits, cuDNN's attention in the
# trainer. Carries .carry/post/gpu-all.tgz (tests/gpu/pack_shared.sh) and
# .carry/commit.txt.
#  1. tests/gpu/train_gpu_smoke.sh (with (f): overlapped and serial AdamW
#     give byte-identical loss logs and checkpoints);
#  2. bench/train/run.sh A/B with the step profile, interleaved:
#     d512 and 1b: base (the defaults: overlap on, keep-logits auto,
#     CODA_ATTENTION=auto), serial (CODA_OPTIM_OVERLAP=0), recompute
#     (--keep-logits 0); 1b-8k: base, serial, own (CODA_ATTENTION=own),
#     nondet (CODA_ATTENTION=cudnn-nondet).
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$L/gpu.txt"
# cuDNN from PyTorch's wheel
CL=$(python3 -c "import torch,os,glob;r=os.path.dirname(os.path.dirname(torch.__file__));c=glob.glob(r+'/nvidia/**/libcudnn.so.9',recursive=True);print(c[0] if c else '')" 2>/dev/null)
[ -n "$CL" ] && export CODA_CUDNN_LIB=$CL LD_LIBRARY_PATH=$(dirname "$CL"):$LD_LIBRARY_PATH
echo "cuDNN: ${CL:-none}" | tee -a "$L/gpu.txt"
timeout 200 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/smoke.log" 2>&1
echo "smoke rc=$?"; grep -E "^(==|FAIL|bit-identical|train_gpu_smoke|batch)" "$L/smoke.log"
export COMMIT=$(cat .carry/commit.txt) PROFILE=1
SHAPES="d512 1b" BUDGET=170 VARIANTS="base:|serial:CODA_OPTIM_OVERLAP=0|recompute:--keep-logits 0" \
  OUT=$L/ab bench/train/run.sh "$P" > "$L/ab.log" 2>&1
echo "ab rc=$?"
SHAPES="1b-8k" STEPS=13 BUDGET=230 \
  VARIANTS="base:|serial:CODA_OPTIM_OVERLAP=0|own:CODA_ATTENTION=own|nondet:CODA_ATTENTION=cudnn-nondet" \
  OUT=$L/ab8k bench/train/run.sh "$P" > "$L/ab8k.log" 2>&1
echo "ab8k rc=$?"
cat "$L/ab/train.md" "$L/ab8k/train.md"
tar -czf "$O/logs.tgz" -C "$O" logs
