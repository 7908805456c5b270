#!/bin/bash
# Fused RoPE backward in the attention backward: GPU tests (every attention variant with and without it; plans
# vs CPU and fp64), then the Llama blocks fused with the fused RoPE backward and with the map pass, per-step times
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c4/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
timeout 150 $P/tests/gpu/test_attention_gpu > $L/test_attention.log 2>&1; echo "test_attention rc=$?"; tail -1 $L/test_attention.log
timeout 150 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -1 $L/test_plan.log
for i in 1 2; do
timeout 100 $P/coda bench block d2048 d4096 --fused --csv --steps > $L/block-fused-$i.csv 2> $L/block-fused-$i.err; echo "block fused rc=$?"
timeout 100 $P/coda bench block d2048 d4096 --fused --csv --steps --rope-map > $L/block-map-$i.csv 2> $L/block-map-$i.err; echo "block map rc=$?"
done
cat $L/block-*.csv | cut -d, -f1,10-12,21
grep -h "attention\|rope" $L/block-*-1.err
tar -czf $O/logs.tgz -C $O logs
