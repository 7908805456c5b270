#!/bin/bash
# Kernel lookup by the program's text and IR instead of its regenerated functor: GPU tests, then the blocks with the
# previous build (coda_old, b49ada8) and the new one alternated, with the host's enqueue time per run
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k1/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
timeout 150 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -1 $L/test_plan.log
timeout 150 $P/tests/gpu/test_epilogue_gpu > $L/test_epi.log 2>&1; echo "test_epi rc=$?"; tail -1 $L/test_epi.log
for i in 1 2; do
  for v in coda_old coda; do
    timeout 100 $P/$v bench block d512 d768 d2048 gpt2-768 --fused --csv > $L/$v-$i.csv 2> $L/$v-$i.err; echo "$v $i rc=$?"
    cut -d, -f1,10-12 $L/$v-$i.csv | tail -4
    grep "host enqueue" $L/$v-$i.err
  done
done
tar -czf $O/logs.tgz -C $O logs
