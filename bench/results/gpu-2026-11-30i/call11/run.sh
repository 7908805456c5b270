#!/bin/bash
# Does the data move the attention timings? bench_attention at the 1B and 8B shapes with other value ranges
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/a11/b; tar -xzf .carry/a11/b.tgz -C .carry/a11
for s in 2 3; do
  for qa in 1.5 0.3 6; do
    CODA_BENCH_QKV_AMP=$qa timeout 100 $B/bench_attention $s > $L/s$s-q$qa.md 2>&1
    echo "shape $s qkv amp $qa dout amp 1: $(grep '^CODA|' $L/s$s-q$qa.md | cut -d'|' -f8-10)"
  done
  CODA_BENCH_DOUT_AMP=0.001 timeout 100 $B/bench_attention $s > $L/s$s-d0.001.md 2>&1
  echo "shape $s qkv amp 1.5 dout amp 0.001: $(grep '^CODA|' $L/s$s-d0.001.md | cut -d'|' -f8-10)"
done
tar -czf $O/logs.tgz -C $O logs
