#!/bin/bash
# After the review mends (TMA slots per loaded kernel, one v0 substitution; generated source unchanged):
# epilogue and plan GPU tests, and one fused bench row set to see the TMA loads still in use
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c11/gpu.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
timeout 60 $P/tests/gpu/test_epilogue_gpu > $L/test_epi.log 2>&1; echo "test_epi rc=$?"; tail -1 $L/test_epi.log
timeout 100 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -1 $L/test_plan.log
timeout 60 $P/coda run --builtin llama_norm_bwd --gpu --m 4096 --n 2048 --k 2048 > $L/run_norm_bwd.log 2>&1; echo "run rc=$?"; tail -3 $L/run_norm_bwd.log
tar -czf $O/logs.tgz -C $O logs
