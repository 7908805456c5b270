#!/bin/bash
# Attention backward with the dQ and dK/dV passes on two streams: correctness, timing against one stream and SDPA
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/p5; tar -xzf .carry/p5.tgz -C $B
timeout 120 $B/test_attention_gpu > $L/test.log 2>&1; echo "test rc=$?"; tail -2 $L/test.log
CODA_ATTN_CONCURRENT=0 timeout 100 $B/bench_attention > $L/bench-one.md 2>&1; echo "bench one-stream rc=$?"
timeout 100 $B/bench_attention > $L/bench-two.md 2>&1; echo "bench two-stream rc=$?"
CODA_ATTN_CONCURRENT=0 timeout 100 $B/bench_attention 2 > $L/bench-one-1b-b.md 2>&1
timeout 100 $B/bench_attention 2 > $L/bench-two-1b-b.md 2>&1
CODA_ATTN_CONCURRENT=0 timeout 100 $B/bench_attention 3 > $L/bench-one-8b-b.md 2>&1
timeout 100 $B/bench_attention 3 > $L/bench-two-8b-b.md 2>&1
timeout 100 python3 $B/sdpa.py $L/bench-two.md > $L/sdpa.md 2>&1; echo "sdpa rc=$?"
grep -h "^CODA|" $L/bench-*.md
tar -czf $O/logs.tgz -C $O logs
