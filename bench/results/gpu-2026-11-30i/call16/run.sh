#!/bin/bash
# Final tree (e3f3a37): the GPU training smoke test and the coda run examples
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k1/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
timeout 170 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > $L/train-smoke.out 2>&1; echo "train smoke rc=$?"; tail -5 $L/train-smoke.out
timeout 30 $P/coda run programs/examples/geglu_scaled.coda --gpu --m 4096 --n 4096 --k 2048 > $L/run_user.log 2>&1; echo "run user rc=$?"; tail -2 $L/run_user.log
timeout 30 $P/coda run --builtin llama_swiglu_bwd --gpu --m 4096 --n 2048 --k 2048 > $L/run_builtin.log 2>&1; echo "run builtin rc=$?"; tail -2 $L/run_builtin.log
tar -czf $O/logs.tgz -C $O logs
