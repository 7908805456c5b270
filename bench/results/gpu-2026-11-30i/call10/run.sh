#!/bin/bash
# Final tree, part 2: the blocks (fused, unfused, tuned, floor; bf16 weight grads; in place; the RoPE backward as a
# map pass for comparison), then PyTorch's blocks and peak memory in the same call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/f1/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
t0=$SECONDS
timeout 170 $P/coda bench block all --csv > $L/block.csv 2> $L/block.err; echo "block rc=$? ($((SECONDS-t0)) s)"
timeout 90 $P/coda bench block all --fused --tuned --grad-bf16 --csv > $L/block-grad-bf16.csv 2> $L/block-grad-bf16.err; echo "grad rc=$? ($((SECONDS-t0)) s)"
timeout 60 $P/coda bench block d512 d768 d2048 d4096 --fused --tuned --inplace --csv > $L/block-inplace.csv 2> $L/block-inplace.err; echo "inplace rc=$? ($((SECONDS-t0)) s)"
timeout 60 $P/coda bench block d2048 d4096 --fused --steps --rope-map --csv > $L/block-ropemap.csv 2> $L/block-ropemap.err; echo "ropemap rc=$? ($((SECONDS-t0)) s)"
timeout 60 $P/coda bench block d2048 d4096 --fused --steps --csv > $L/block-ropefused.csv 2> $L/block-ropefused.err; echo "ropefused rc=$? ($((SECONDS-t0)) s)"
tar -czf $O/logs.tgz -C $O logs
BASELINE_OUT=$L timeout 230 python3 bench/block/baseline_torch.py seed-6L-512 gpt2s-768 llama1b-2048 llama8b-4096 > $L/torch.log 2>&1; echo "torch rc=$? ($((SECONDS-t0)) s)"
tar -czf $O/logs.tgz -C $O logs
OUT=$L timeout 150 python3 bench/block/torch_peak.py > $L/torch_peak.log 2>&1; echo "torch_peak rc=$? ($((SECONDS-t0)) s)"
cut -d, -f1,12,15,18,21,26 $L/block.csv
tar -czf $O/logs.tgz -C $O logs
