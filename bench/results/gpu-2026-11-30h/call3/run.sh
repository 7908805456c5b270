#!/bin/bash
# Final block table: coda bench block (all variants; and with bf16 weight gradients) beside PyTorch
# (baseline_torch.py: eager, torch.compile, floor; torch_peak.py: peak memory, GPT-2 rows) in one call.
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c3/gpu-all.tgz -C PK; P=PK/gpu
export CODA_CACHE_DIR=$PWD/$P/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > $L/gpu.txt 2>&1
date -u >> $L/gpu.txt
timeout 100 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -1 $L/test_plan.log
timeout 150 $P/coda bench block all --csv > $L/block.csv 2> $L/block.err; echo "block rc=$?"
timeout 80 $P/coda bench block all --grad-bf16 --fused --tuned --csv > $L/block-g.csv 2> $L/block-g.err; echo "block grad-bf16 rc=$?"
tar -czf $O/logs.tgz -C $O logs
BASELINE_OUT=$L timeout 200 python3 bench/block/baseline_torch.py seed-6L-512 gpt2s-768 llama1b-2048 llama8b-4096 > $L/torch.log 2>&1; echo "torch rc=$?"
tar -czf $O/logs.tgz -C $O logs
OUT=$L timeout 140 python3 bench/block/torch_peak.py > $L/torch_peak.log 2>&1; echo "torch_peak rc=$?"
tar -czf $O/logs.tgz -C $O logs
