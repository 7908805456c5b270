#!/bin/bash
# Builds the GEMM GPU test and benchmark (targets test_gemm_gpu and
# bench_gemm of a CUDA build folder, default build, configured here if it is
# not) into .carry/, with the mainloop's object files in .carry/obj/ for
# the SASS check of run_device.sh. Used to prepare binaries for a GPU
# machine.
set -e
cd "$(dirname "$0")/../.."
B=${BUILD:-build}
[ -f "$B/CMakeCache.txt" ] || cmake -S . -B "$B" > /dev/null
cmake --build "$B" -j2 --target test_gemm_gpu bench_gemm
mkdir -p .carry/obj
cp "$B/tests/gpu/test_gemm_gpu" "$B/bench/gemm/bench_gemm" .carry/
for f in "$B"/CMakeFiles/coda_obj.dir/src/backends/cuda/gemm*.cu.o; do
  cp "$f" ".carry/obj/$(basename "$f" .cu.o).o"
done
ls -l .carry/test_gemm_gpu .carry/bench_gemm
