#!/bin/bash
# Fused backward, top-first vs diagonal-first summation order: correctness, timings
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/a2/b; tar -xzf .carry/a2/b.tgz -C .carry/a2
timeout 150 $B/test_attention_gpu > $L/test.log 2>&1; echo "test rc=$?"; tail -1 $L/test.log
timeout 100 $B/bench_attention 2 > $L/bench-1b.md 2>&1
timeout 100 $B/bench_attention 3 > $L/bench-8b.md 2>&1
grep -h "bwd" $L/bench-1b.md $L/bench-8b.md
tar -czf $O/logs.tgz -C $O logs
