#!/bin/bash
# Final tree checks: GPU tests (plans incl. folded and shared temporaries), racecheck of TMA-loaded
# and folded epilogues, fused bench TMA loads on/off (alternating, twice), block bench folded vs
# separate finishers (all variants), fused tuning cache hit.
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c2/gpu-all.tgz -C PK; P=PK/gpu
export CODA_CACHE_DIR=$PWD/$P/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv > $L/gpu.txt 2>&1
git rev-parse HEAD >> $L/gpu.txt 2>/dev/null; date -u >> $L/gpu.txt
timeout 120 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$?"; tail -2 $L/test_plan.log
timeout 60 $P/tests/gpu/test_epilogue_gpu > $L/test_epi.log 2>&1; echo "test_epi rc=$?"; tail -1 $L/test_epi.log
timeout 100 compute-sanitizer --tool racecheck $P/tests/gpu/test_epilogue_gpu --only llama_swiglu_folded,llama_norm_bwd_folded,gpt2_ln_bwd_folded,llama_swiglu_bwd > $L/racecheck.log 2>&1; echo "racecheck rc=$?"; tail -2 $L/racecheck.log
for i in 1 2; do
  CODA_EPI_TMA_LOADS=0 timeout 60 $P/bench_fused > $L/fused-cpasync-$i.md 2> $L/fused-cpasync-$i.err; echo "fused cp $i rc=$?"
  timeout 60 $P/bench_fused > $L/fused-tma-$i.md 2> $L/fused-tma-$i.err; echo "fused tma $i rc=$?"
done
timeout 200 $P/coda bench block all --csv > $L/block-sep.csv 2> $L/block-sep.err; echo "block sep rc=$?"
timeout 120 $P/coda bench block all --fold --fused --tuned --csv > $L/block-fold.csv 2> $L/block-fold.err; echo "block fold rc=$?"
cut -d, -f1-8 $L/block-sep.csv $L/block-fold.csv | head -30
timeout 60 $P/coda bench block d512 gpt2-768 --tuned --csv > $L/block-cache.csv 2> $L/block-cache.err; echo "block cache rc=$?"
grep -c "from the tuning cache" $L/block-cache.err
cp $CODA_CACHE_DIR/fused-tune.txt $L/ 2>/dev/null
tar -czf $O/logs.tgz -C $O logs
