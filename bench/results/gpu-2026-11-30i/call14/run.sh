#!/bin/bash
# Final attention code: the GPU attention test; then the small Llama blocks and PyTorch's, twice each, for the spread
# of torch.compile's times at those sizes
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/v1/b; tar -xzf .carry/v1/b.tgz -C .carry/v1
mkdir -p PK && tar -xzf .carry/f1/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
timeout 150 $B/test_attention_gpu > $L/test_attention.log 2>&1; echo "test_attention rc=$?"; tail -1 $L/test_attention.log
for i in 1 2; do
  timeout 60 $P/coda bench block d512 d768 --fused --tuned --csv > $L/small-$i.csv 2> $L/small-$i.err; echo "block $i rc=$?"
  mkdir -p $L/torch-$i
  BASELINE_OUT=$L/torch-$i timeout 150 python3 bench/block/baseline_torch.py seed-6L-512 gpt2s-768 > $L/torch-$i/torch.log 2>&1; echo "torch $i rc=$?"
done
cut -d, -f1,12,26 $L/small-*.csv
for i in 1 2; do python3 -c "
import json; b=json.load(open('$L/torch-$i/baseline.json'))
print({k: (round(b[k]['eager_ms'],3), round(b[k]['compiled_ms'],3)) for k in ('seed-6L-512','gpt2s-768')})"; done
tar -czf $O/logs.tgz -C $O logs
