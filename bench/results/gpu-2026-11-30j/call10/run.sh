#!/bin/bash
# The context's workspace pool: GPU tests (GEMM incl. split-K, attention, plans), then the blocks with the
# device's default pool (CODA_WS_POOL=0) and the context's pool alternated in one call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k5/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
t0=$SECONDS
timeout 200 $P/tests/gpu/test_gemm_gpu > $L/test_gemm.log 2>&1; echo "test_gemm rc=$? ($((SECONDS-t0)) s)"; tail -1 $L/test_gemm.log
timeout 100 $P/tests/gpu/test_attention_gpu > $L/test_attention.log 2>&1; echo "test_attention rc=$? ($((SECONDS-t0)) s)"; tail -1 $L/test_attention.log
timeout 100 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$? ($((SECONDS-t0)) s)"; tail -1 $L/test_plan.log
tar -czf $O/logs.tgz -C $O logs
for k in 1 2; do
  CODA_WS_POOL=0 timeout 100 $P/coda bench block d512 d768 gpt2-768 d2048 d4096 --fused --steps --csv > $L/default$k.csv 2> $L/default$k.err; echo "default pool rc=$? ($((SECONDS-t0)) s)"
  timeout 100 $P/coda bench block d512 d768 gpt2-768 d2048 d4096 --fused --steps --csv > $L/ctxpool$k.csv 2> $L/ctxpool$k.err; echo "context pool rc=$? ($((SECONDS-t0)) s)"
done
for f in default1 ctxpool1 default2 ctxpool2; do echo "== $f"; cut -d, -f1,10,11,12,21 $L/$f.csv; done
for f in default2 ctxpool2; do echo "== $f"; grep -E "d512 fused bwd step.*(dw|attention)" $L/$f.err; done
tar -czf $O/logs.tgz -C $O logs
