#!/bin/bash
# dz in place over z: GPU tests (plans incl. the in-place block vs the default, bit-identical; epilogues after the
# dispatcher change), the block with and without --inplace, PyTorch's blocks and peak memory in the same call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c9/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
git rev-parse HEAD > $L/commit.txt 2>/dev/null
timeout 100 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -1 $L/test_plan.log
timeout 60 $P/tests/gpu/test_epilogue_gpu > $L/test_epi.log 2>&1; echo "test_epi rc=$?"; tail -1 $L/test_epi.log
timeout 120 $P/coda bench block all --fused --tuned --csv > $L/block.csv 2> $L/block.err; echo "block rc=$?"
timeout 120 $P/coda bench block all --fused --tuned --inplace --csv > $L/block-inplace.csv 2> $L/block-inplace.err; echo "block inplace rc=$?"
tar -czf $O/logs.tgz -C $O logs
BASELINE_OUT=$L timeout 200 python3 bench/block/baseline_torch.py seed-6L-512 gpt2s-768 llama1b-2048 llama8b-4096 > $L/torch.log 2>&1; echo "torch rc=$?"
OUT=$L timeout 140 python3 bench/block/torch_peak.py > $L/torch_peak.log 2>&1; echo "torch_peak rc=$?"
tar -czf $O/logs.tgz -C $O logs
