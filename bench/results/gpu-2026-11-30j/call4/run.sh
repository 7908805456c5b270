#!/bin/bash
# Warp-specialized attention, final code, part 1: GPU tests (attention incl. the fused RoPE backward for every
# variant, plans vs CPU and fp64), the GPU training smoke test, attention against SDPA
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/k2/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader > $L/gpu.txt
t0=$SECONDS
timeout 150 $P/tests/gpu/test_attention_gpu > $L/test_attention.log 2>&1; echo "test_attention rc=$? ($((SECONDS-t0)) s)"; tail -1 $L/test_attention.log
timeout 150 $P/tests/gpu/test_plan_gpu > $L/test_plan.log 2>&1; echo "test_plan rc=$? ($((SECONDS-t0)) s)"; tail -1 $L/test_plan.log
timeout 60 $P/coda run --builtin llama_rope_bwd --gpu --m 4096 --n 3072 > $L/run_rope.log 2>&1; echo "run rope rc=$?"; tail -2 $L/run_rope.log
tar -czf $O/logs.tgz -C $O logs
timeout 170 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > $L/train-smoke.out 2>&1; echo "train smoke rc=$? ($((SECONDS-t0)) s)"; tail -6 $L/train-smoke.out
timeout 100 $P/bench_attention > $L/attention.md 2>&1; echo "bench_attention rc=$?"
timeout 100 python3 bench/attention/sdpa.py $L/attention.md > $L/sdpa.md 2>&1; echo "sdpa rc=$? ($((SECONDS-t0)) s)"
tail -9 $L/sdpa.md
tar -czf $O/logs.tgz -C $O logs
