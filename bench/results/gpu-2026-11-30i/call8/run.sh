#!/bin/bash
# The fused RoPE backward's cost with sincospif (as built) against __sincosf (experiment), alternating
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/a8/b; tar -xzf .carry/a8/b.tgz -C .carry/a8
for i in 1 2; do
  timeout 100 $B/bench_attention 3 > $L/acc-8b-$i.md 2>&1
  timeout 100 $B/bench_attention_fast 3 > $L/fast-8b-$i.md 2>&1
  timeout 100 $B/bench_attention 2 > $L/acc-1b-$i.md 2>&1
  timeout 100 $B/bench_attention_fast 2 > $L/fast-1b-$i.md 2>&1
done
for f in $L/*.md; do echo "$(basename $f) $(grep -A3 'difference ms' $f | grep '^| d')"; done
tar -czf $O/logs.tgz -C $O logs
