#!/bin/bash
# Where the time goes: every step of the fused and unfused plans timed alone (1B, 8B, GPT-2 d1600)
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k2/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
t0=$SECONDS
timeout 300 $P/coda bench block d2048 d4096 gpt2-1600 gpt2-768 --fused --unfused --steps --csv > $L/steps.csv 2> $L/steps.err; echo "steps rc=$? ($((SECONDS-t0)) s)"
nvidia-smi --query-gpu=clocks.sm,power.draw --format=csv,noheader
tar -czf $O/logs.tgz -C $O logs
