#!/bin/bash
# TMA loads of staged tile inputs: correctness (every program vs CPU), racecheck, fused bench with TMA loads on and off
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/q1/gpu-q1.tgz -C PK; P=PK/gpu
export CODA_CACHE_DIR=$P/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > $L/gpu.txt 2>&1
git rev-parse HEAD >> $L/gpu.txt 2>/dev/null
date -u >> $L/gpu.txt
timeout 200 $P/tests/gpu/test_epilogue_gpu > $L/test_epi.log 2>&1; echo "test_epi rc=$?"; tail -3 $L/test_epi.log
CODA_EPI_TMA_LOADS=0 timeout 150 $P/bench_fused > $L/fused-cpasync.md 2> $L/fused-cpasync.err; echo "fused cp rc=$?"
timeout 150 $P/bench_fused > $L/fused-tma.md 2> $L/fused-tma.err; echo "fused tma rc=$?"
timeout 120 compute-sanitizer --tool racecheck $P/tests/gpu/test_epilogue_gpu --only llama_norm_bwd,llama_residual_norm,llama_swiglu_bwd > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -3 $L/racecheck.log
tar -czf $O/logs.tgz -C $O logs
