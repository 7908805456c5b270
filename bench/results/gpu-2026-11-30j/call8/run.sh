#!/bin/bash
# Final code: the blocks (fused, unfused, tuned, floor on random operands; Llama plans in place, and the 8B-like
# one keeping z; bf16 weight grads) and PyTorch's blocks and peak memory in the same call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k4/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
t0=$SECONDS
timeout 170 $P/coda bench block all --csv > $L/block.csv 2> $L/block.err; echo "block rc=$? ($((SECONDS-t0)) s)"
timeout 90 $P/coda bench block all --fused --tuned --grad-bf16 --csv > $L/block-grad-bf16.csv 2> $L/block-grad-bf16.err; echo "grad rc=$? ($((SECONDS-t0)) s)"
timeout 90 $P/coda bench block llama --keep-saved --csv > $L/block-keep-saved.csv 2> $L/block-keep-saved.err; echo "keep-saved rc=$? ($((SECONDS-t0)) s)"
tar -czf $O/logs.tgz -C $O logs
BASELINE_OUT=$L timeout 200 python3 bench/block/baseline_torch.py seed-6L-512 gpt2s-768 llama1b-2048 llama8b-4096 > $L/torch.log 2>&1; echo "torch rc=$? ($((SECONDS-t0)) s)"
tar -czf $O/logs.tgz -C $O logs
OUT=$L timeout 120 python3 bench/block/torch_peak.py > $L/torch_peak.log 2>&1; echo "torch_peak rc=$? ($((SECONDS-t0)) s)"
cut -d, -f1,12,15,18,21,26,33 $L/block.csv
cut -d, -f1,12,15,18,21,26,33 $L/block-keep-saved.csv
grep "host enqueue" $L/block.err
tar -czf $O/logs.tgz -C $O logs
