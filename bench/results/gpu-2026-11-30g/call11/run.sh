#!/bin/bash
# the Llama-1B-like model, 10 training steps on one GPU (throughput after the epilogue work)
set -u
O=${OUT:?}; L=LOGS; mkdir -p $L
mkdir -p PACKDIR && tar -xzf .carry/c11/gpu-all.tgz -C PACKDIR; P=PACK
export CODA_CACHE_DIR=$P/cache
mkdir -p $L/corpus
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' > $L/corpus/docs
timeout 60 $P/coda train --prepare --corpus $L/corpus --data $L/data --out $L/prep > $L/prep.log 2>&1; echo "prepare rc=$?"
timeout 150 $P/coda train --device gpu --config 1b --data $L/data --steps 10 --batch 4 --val-every 0 --val-batches 0 --warmup 2 --lr 3e-3 --seed 1 --out $L/run > $L/train-1b.log 2>&1; echo "train rc=$?"
cat $L/train-1b.log | head -16
tar -czf $O/logs.tgz -C $L train-1b.log prep.log
