#!/bin/bash
# Attention profile: the default forward and backward kernels at the 1B (shape 2, hd64) and 8B (shape 3, hd128) shapes
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
B=.carry/p4/bench_attention
$B 3 > $L/bench8b.md 2>&1; echo "bench 8b rc=$?"
$B 2 > $L/bench1b.md 2>&1; echo "bench 1b rc=$?"
S="--section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis --section LaunchStats --section SchedulerStats"
prof() { # shape kernel skip tag
  timeout 100 ncu --clock-control none --kernel-name regex:"$2" --launch-skip $3 --launch-count 1 $S $B $1 > $L/ncu-$4.txt 2>&1; echo "ncu $4 rc=$?"
}
prof 3 fwd_wg_kernel 30 8b-fwd
prof 3 bwd_prep 90 8b-prep
prof 3 bwd_dq_wg 60 8b-dq
prof 3 bwd_dkdv_wg 60 8b-dkdv
prof 2 fwd_wg_kernel 30 1b-fwd
prof 2 bwd_prep 240 1b-prep
prof 2 bwd_dq_wg 120 1b-dq
prof 2 bwd_dkdv_wg 120 1b-dkdv
tar -czf $O/logs.tgz -C $O logs
