#!/bin/bash
# Is the attention backward slower in the block because of the GEMMs before it (clocks under the power limit)?
# bench_attention at the 1B and 8B shapes with 0 and 20 plain 4096^3 GEMMs before every timed run; clocks sampled
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/a12/b; tar -xzf .carry/a12/b.tgz -C .carry/a12
nvidia-smi dmon -s pc -d 1 > $L/dmon.txt 2>&1 &
DM=$!
for s in 2 3; do
  for h in 0 20 0 20; do
    CODA_BENCH_HEAT=$h timeout 200 $B/bench_attention $s > $L/s$s-h$h.md 2>&1
    echo "shape $s heat $h: $(grep '^CODA|' $L/s$s-h$h.md | cut -d'|' -f8-10)"
  done
done
kill $DM
tail -30 $L/dmon.txt
tar -czf $O/logs.tgz -C $O logs
