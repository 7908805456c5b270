#!/bin/bash
# Experiment (not kept): fused backward with unordered red.add dQ sums, timing only
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
gunzip -c .carry/a3/bench_attention_red.gz > /tmp/bar && chmod +x /tmp/bar
CODA_ATTN_RED=1 timeout 100 /tmp/bar 3 > $L/red-8b.md 2>&1
CODA_ATTN_RED=1 timeout 100 /tmp/bar 2 > $L/red-1b.md 2>&1
grep -h "bwd" $L/red-*.md
tar -czf $O/logs.tgz -C $O logs
