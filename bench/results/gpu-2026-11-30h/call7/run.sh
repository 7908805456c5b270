#!/bin/bash
# Final tree: compute-sanitizer over the changed paths (memcheck and synccheck of the TMA-loaded and folded
# epilogues, memcheck of the GEMM with the mainloop's new epilogue-load barriers) and the fused tuning cache script
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c6/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache CUDA_MODULE_LOADING=LAZY
E="llama_norm_bwd,llama_residual_norm,llama_swiglu_bwd,llama_swiglu_folded,llama_norm_bwd_folded,gpt2_ln_bwd"
timeout 150 compute-sanitizer --tool memcheck $P/tests/gpu/test_epilogue_gpu --only $E > $L/memcheck_epi.log 2>&1; echo "memcheck epi rc=$?"; tail -2 $L/memcheck_epi.log
timeout 120 compute-sanitizer --tool synccheck $P/tests/gpu/test_epilogue_gpu --only $E > $L/synccheck_epi.log 2>&1; echo "synccheck epi rc=$?"; tail -2 $L/synccheck_epi.log
timeout 150 compute-sanitizer --tool memcheck $P/tests/gpu/test_gemm_gpu --small > $L/memcheck_gemm.log 2>&1; echo "memcheck gemm rc=$?"; tail -2 $L/memcheck_gemm.log
OUT=$L/ftc timeout 150 tests/gpu/fused_tune_cache.sh $P $P/cache > $L/fused_tune_cache.log 2>&1; echo "fused_tune_cache rc=$?"; tail -8 $L/fused_tune_cache.log
tar -czf $O/logs.tgz -C $O logs
