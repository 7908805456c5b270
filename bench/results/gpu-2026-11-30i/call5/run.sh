#!/bin/bash
# Attention with the fused RoPE backward: every variant checked with and without it; timings; SDPA in the same call
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/aN/b; tar -xzf .carry/aN/b.tgz -C .carry/aN
timeout 150 $B/test_attention_gpu > $L/test_attention.log 2>&1; echo "test rc=$?"; tail -1 $L/test_attention.log; grep FAIL $L/test_attention.log | head -5
timeout 200 $B/bench_attention > $L/bench.md 2>&1; echo "bench rc=$?"
timeout 120 python3 $B/sdpa.py $L/bench.md > $L/sdpa.md 2>&1; echo "sdpa rc=$?"
grep -A10 "fused RoPE" $L/bench.md
tail -9 $L/sdpa.md
tar -czf $O/logs.tgz -C $O logs
