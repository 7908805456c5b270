#!/bin/bash
# Call 4 (b): the Python package's tests on the GPU (torch ops on CUDA
# tensors against the CPU fp64 run, the patched Hugging Face Llama in bf16
# against the unpatched one, 200 training steps), then compute-sanitizer
# (memcheck, racecheck, synccheck) over the GPU tests.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
export CODA_CACHE_DIR=$P/cache
OUT=$L timeout 300 tests/gpu/run_all.sh "$P" python; echo "python rc=$?"
tail -15 "$L/gpu-tests.log"
OUT=$L timeout 200 tests/gpu/run_all.sh "$P" sanitize; echo "sanitize rc=$?"
