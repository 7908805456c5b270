#!/bin/bash
# Final tree: every GPU test of the pack (GEMM after the mainloop's epilogue-load barriers, epilogues, plans,
# debug-sync, user/builtin programs) and the GPU training smoke test (arena-shared plan temporaries in training)
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c6/gpu-all.tgz -C PK; P=$PWD/PK/gpu
git rev-parse HEAD > $L/commit.txt 2>/dev/null
OUT=$L timeout 560 tests/gpu/run_all.sh $P tests train > $L/run_all.out 2>&1; echo "run_all rc=$?"
tail -30 $L/run_all.out
tar -czf $O/logs.tgz -C $O logs
