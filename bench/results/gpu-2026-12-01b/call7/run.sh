#!/bin/bash
# Call 7 (b): the GPU training smoke test and test_train_device after the
# bindings of the plan engine were folded into one function.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
OUT=$L timeout 200 tests/gpu/run_all.sh "$P" train; echo "train rc=$?"
