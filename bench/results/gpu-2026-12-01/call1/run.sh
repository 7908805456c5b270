#!/bin/bash
# Call 1 after the restructuring: every GPU test (GEMM, epilogue programs,
# attention with the shared tile math, block plans, the CUDA-graph replay,
# debug mode, coda run) and the GPU training smoke test, from the packed
# build: the binaries of tests/gpu/pack_all.sh (the tests, test_train_device,
# coda) relinked against one libcoda.so, and the kernel cache.
set -u
# the pack links libcoda.so (one copy of the library for all binaries, so it fits one call)
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > "$L/gpu.txt"
OUT=$L tests/gpu/run_all.sh "$P" tests train
tar -czf "$O/logs.tgz" -C "$O" logs
