#!/bin/bash
# The plain backward before the fused RoPE backward (66874fd) against now (the RoPE store code in its own kernel
# instantiations), alternating, at the 1B and 8B shapes; the attention test
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/a7/b; tar -xzf .carry/a7/b.tgz -C .carry/a7
timeout 150 $B/test_attention_gpu > $L/test_attention.log 2>&1; echo "test rc=$?"; tail -1 $L/test_attention.log
for i in 1 2; do
  timeout 100 $B/bench_attention_old 3 > $L/old-8b-$i.md 2>&1
  timeout 100 $B/bench_attention 3 > $L/new-8b-$i.md 2>&1
  timeout 100 $B/bench_attention_old 2 > $L/old-1b-$i.md 2>&1
  timeout 100 $B/bench_attention 2 > $L/new-1b-$i.md 2>&1
done
for f in $L/old-*.md $L/new-*.md; do echo "$(basename $f) $(grep '^CODA|' $f | cut -d'|' -f8-10)"; done
grep -h -A3 "difference ms" $L/new-*.md | grep "^| d"
tar -czf $O/logs.tgz -C $O logs
