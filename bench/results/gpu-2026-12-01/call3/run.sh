#!/bin/bash
# Call 3, after the language, tokenizer, hostile-input and Python work
# merged: every GPU test again (the new functions erf, relu, pow,
# round_bf16, round_f16 through NVRTC in test_epilogue_gpu), the training
# smoke test, the Python package's GPU tests (torch CUDA tensors on torch's
# stream, over the packed libcoda.so), and three more interleaved pairs of
# the fused 1B- and 8B-like blocks before (bbc03b0) and after.
# Pack: tests/gpu/pack_shared.sh.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
mkdir -p PRE && tar -xzf .carry/pre/pre.tgz -C PRE; Q=$PWD/PRE/pre
cat .carry/commit.txt > "$L/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > "$L/gpu.txt"
OUT=$L tests/gpu/run_all.sh "$P" tests train
t0=$SECONDS
CODA_LIBRARY=$P/lib/libcoda.so.0 PYTHONPATH=$PWD/python CODA_CACHE_DIR=$P/cache PYTHONUNBUFFERED=1 \
  timeout 200 python3 -m pytest -q -p no:cacheprovider python/tests > "$L/python.log" 2>&1
echo "python rc=$? ($((SECONDS-t0)) s)"; tail -5 "$L/python.log"
for r in 1 2 3; do
  CODA_CACHE_DIR=$Q/cache timeout 60 "$Q/coda" bench block d2048 d4096 --fused --csv > "$L/pre$r.csv" 2> "$L/pre$r.err"
  CODA_CACHE_DIR=$P/cache timeout 60 "$P/coda" bench block d2048 d4096 --fused --csv > "$L/post$r.csv" 2> "$L/post$r.err"
done
echo "bench ($((SECONDS-t0)) s)"
for f in pre1 post1 pre2 post2 pre3 post3; do echo "$f $(cut -d, -f1,10-12 "$L/$f.csv" | tail -2 | tr '\n' ' ')"; done
tar -czf "$O/logs.tgz" -C "$O" logs
