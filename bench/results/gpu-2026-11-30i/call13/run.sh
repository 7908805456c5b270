#!/bin/bash
# compute-sanitizer racecheck and synccheck of the attention kernels (every variant, with and without the fused RoPE
# backward) on the ragged shapes of test_attention_gpu --small
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/s1/b; tar -xzf .carry/s1/b.tgz -C .carry/s1
t0=$SECONDS
timeout 250 compute-sanitizer --tool racecheck --print-limit 20 $B/test_attention_gpu --small > $L/racecheck_attention.log 2>&1; echo "racecheck rc=$? ($((SECONDS-t0)) s)"; tail -3 $L/racecheck_attention.log
timeout 200 compute-sanitizer --tool synccheck --print-limit 20 $B/test_attention_gpu --small > $L/synccheck_attention.log 2>&1; echo "synccheck rc=$? ($((SECONDS-t0)) s)"; tail -3 $L/synccheck_attention.log
tar -czf $O/logs.tgz -C $O logs
