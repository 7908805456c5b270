#!/bin/bash
# 48 KB epilogue scratch for the programs it double-buffers (SwiGLU- and norm-backward dgrads) against the
# 32 KB cap: correctness, fused-kernel bench and block bench, alternating in one call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c8/gpu.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
git rev-parse HEAD > $L/commit.txt 2>/dev/null
timeout 60 $P/tests/gpu/test_epilogue_gpu > $L/test_epi.log 2>&1; echo "test_epi rc=$?"; tail -1 $L/test_epi.log
timeout 100 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -1 $L/test_plan.log
for i in 1 2; do
  CODA_EPI_SCRATCH_MAX=32768 timeout 60 $P/bench_fused > $L/fused-32k-$i.md 2>&1; echo "fused 32k $i rc=$?"
  timeout 60 $P/bench_fused > $L/fused-48k-$i.md 2>&1; echo "fused 48k $i rc=$?"
done
CODA_EPI_SCRATCH_MAX=32768 timeout 150 $P/coda bench block d2048 d4096 gpt2-768 gpt2-1600 --fused --steps --csv > $L/block-32k.csv 2> $L/block-32k.err; echo "block 32k rc=$?"
timeout 150 $P/coda bench block d2048 d4096 gpt2-768 gpt2-1600 --fused --steps --csv > $L/block-48k.csv 2> $L/block-48k.err; echo "block 48k rc=$?"
cut -d, -f1,10-12 $L/block-32k.csv $L/block-48k.csv
tar -czf $O/logs.tgz -C $O logs
