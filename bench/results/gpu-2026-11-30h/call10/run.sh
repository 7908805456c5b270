#!/bin/bash
# The trainer with dz in place over z: the GPU training smoke test (loss falls, bit-identical reruns, GPU vs CPU,
# resume, test_train_device, throughput and device memory of the d512 model)
set -u
O=${OUT:?}; L=$O/logs; mkdir -p $L
mkdir -p PK && tar -xzf .carry/c10/gpu-all.tgz -C PK; P=$PWD/PK/gpu
OUT=$L timeout 300 tests/gpu/run_all.sh $P train > $L/run_all.out 2>&1; echo "run_all rc=$?"
tail -12 $L/run_all.out
tar -czf $O/logs.tgz -C $O logs
