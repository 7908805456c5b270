#!/bin/bash
# The small blocks' weight-gradient GEMMs: default heuristic vs the GEMM autotuner (CODA_AUTOTUNE=1), same call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k4/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
t0=$SECONDS
for k in 1 2; do
timeout 100 $P/coda bench block d512 d768 gpt2-768 gpt2-1600 --fused --steps --csv > $L/default$k.csv 2> $L/default$k.err; echo "default rc=$? ($((SECONDS-t0)) s)"
CODA_AUTOTUNE=1 timeout 200 $P/coda bench block d512 d768 gpt2-768 gpt2-1600 --fused --steps --csv > $L/autotune$k.csv 2> $L/autotune$k.err; echo "autotune rc=$? ($((SECONDS-t0)) s)"
done
cp $P/cache/gemm-tune.txt $L/ 2>/dev/null
cut -d, -f1,10,11,12 $L/default1.csv $L/autotune1.csv $L/default2.csv $L/autotune2.csv
for f in default2 autotune2; do grep -E "fused bwd step .*(gemm  |dW|dw)" $L/$f.err | grep -v "gemm+" | head -24; done
tar -czf $O/logs.tgz -C $O logs
