#!/bin/bash
# Fetches quack-kernels and the packages it needs that the GPU machine's
# image lacks into .whl/ (git-ignored; never commit wheels). quack 0.2.4 is
# the newest release whose CuTe DSL (nvidia-cutlass-dsl 4.3.x) is one wheel;
# that wheel (56 MiB, deflate) is recompressed with LZMA (pip installs LZMA
# zip members like any other), which brings the whole set to about 44 MiB,
# under the GPU machine's per-call transfer limit together with the
# benchmark. Newer quack (gated-SwiGLU GEMM epilogues) needs a 90+ MiB DSL
# library wheel, too large to carry.
set -e
cd "$(dirname "$0")/../.."
mkdir -p .whl
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl \
  quack-kernels==0.2.4 nvidia-cutlass-dsl==4.3.5 apache-tvm-ffi==0.1.15.post2 torch-c-dlpack-ext==0.1.5
python3 - .whl/nvidia_cutlass_dsl-4.3.5-*.whl <<'PY'
import os, sys, zipfile
src = sys.argv[1]
with zipfile.ZipFile(src) as z:
    if all(i.compress_type == zipfile.ZIP_LZMA for i in z.infolist() if i.file_size > 1 << 20):
        sys.exit(0)  # already recompressed
    tmp = src + ".tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_LZMA) as out:
        for info in z.infolist():
            out.writestr(info, z.read(info), compress_type=zipfile.ZIP_LZMA)
os.replace(tmp, src)
PY
ls -l .whl
du -ch .whl/*.whl | tail -1
