#!/bin/bash
# Runs the GPU tests on a machine with an sm_90 GPU, from a CUDA build
# directory (default build-cuda):  tests/gpu/run.sh [build-dir]
# Then a memory check of the small shapes if compute-sanitizer is present.
set -e
B=${1:-build-cuda}
"$B/tests/gpu/test_gemm_gpu"
if command -v compute-sanitizer > /dev/null; then
  compute-sanitizer --tool memcheck --error-exitcode 1 "$B/tests/gpu/test_gemm_gpu" --small | tail -3
fi
