#!/bin/sh
# Fetches CUTLASS's headers for bench_gemm --cutlass (bench/gemm/cutlass_sm80.cu):
# NVIDIA's nvidia-cutlass wheel from PyPI, unpacked into DIR (git-ignored
# by the caller's choice: .carry/ or /tmp), never committed. Prints the
# include folder to give CMake:
#   cmake -S . -B build -DCODA_CUTLASS_INCLUDE="$(sh bench/gemm/fetch_cutlass.sh .carry/cutlass)"
#   cmake --build build -j2 --target bench_gemm
# CUTLASS_VERSION picks the wheel's version (default 4.2.0.0, whose 2.x
# device GEMM API cutlass_sm80.cu is written against).
set -eu
dir=${1:?usage: fetch_cutlass.sh DIR}
ver=${CUTLASS_VERSION:-4.2.0.0}
inc="$dir/cutlass_library/source/include"
if [ ! -f "$inc/cutlass/gemm/device/gemm.h" ]; then
  mkdir -p "$dir"
  python3 -m pip download --quiet --no-deps --disable-pip-version-check -d "$dir" "nvidia-cutlass==$ver" >&2
  whl=$(ls "$dir"/nvidia_cutlass-"$ver"-*.whl)
  python3 -m zipfile -e "$whl" "$dir" >&2
fi
if [ ! -f "$inc/cutlass/gemm/device/gemm.h" ]; then
  echo "fetch_cutlass.sh: the wheel has no $inc/cutlass/gemm/device/gemm.h" >&2
  exit 1
fi
cd "$inc" && pwd
