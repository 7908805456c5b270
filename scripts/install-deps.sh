#!/bin/sh
# Installs what building and testing coda needs on a Debian machine (run as
# root). Packages already present are left alone. The CUDA toolkit is
# optional: without it the CPU library, tool and tests build and run.
set -eu
need=""
command -v cmake >/dev/null 2>&1 || need="$need cmake"
command -v cc >/dev/null 2>&1 || need="$need gcc"
command -v make >/dev/null 2>&1 || need="$need make"
command -v clang >/dev/null 2>&1 || need="$need clang"
# LeakSanitizer/AddressSanitizer/libFuzzer runtimes for clang
ls /usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.fuzzer-x86_64.a >/dev/null 2>&1 || need="$need libclang-rt-dev"
# Default training corpus of `coda train` (the text of the fortune databases)
[ -d /usr/share/games/fortunes ] || need="$need fortunes"
# Unicode general categories (the BPE tokenizer's split patterns)
[ -f /usr/include/utf8proc.h ] || need="$need libutf8proc-dev"
# JSON reader of tokenizer.json, config.json and JSON Lines corpora
[ -f /usr/include/jansson.h ] || need="$need libjansson-dev"
# coda.pc's test (CTest install_pkgconfig) links through pkg-config
command -v pkg-config >/dev/null 2>&1 || need="$need pkgconf"
# CRC-32 of checkpoints and token shards
[ -f /usr/include/zlib.h ] || need="$need zlib1g-dev"
if [ -n "$need" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # shellcheck disable=SC2086
  apt-get install -y -q --no-install-recommends $need || \
    apt-get install -y -q --no-install-recommends $(echo $need | sed 's/libclang-rt-dev/libclang-rt-14-dev/')
fi
# The reference side of the tokenizer test (tests/tokenizer/compare.py)
python3 -c 'import tokenizers' >/dev/null 2>&1 || \
  python3 -m pip install -q --only-binary=:all: tokenizers==0.23.3 || \
  python3 -m pip install -q --only-binary=:all: --break-system-packages tokenizers==0.23.3
# The Python package's build and tests (python/, CTest python_package):
# python3 with pip and venv, then pinned numpy, pytest and scikit-build-core
# from PyPI. PyTorch, transformers and accelerate (for the coda.torch and
# apply_to_llama tests) only with CODA_PYTHON_TORCH=1: PyPI's Linux x86-64
# torch wheel brings the CUDA libraries (about 4 GB, about 4 minutes);
# without them those tests skip.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends python3 python3-pip python3-venv
fi
py_pkgs="numpy==2.4.6 pytest==9.0.3 scikit-build-core==1.1.2"
[ "${CODA_PYTHON_TORCH:-0}" = 1 ] && py_pkgs="$py_pkgs torch==2.15.0 transformers==5.24.0 accelerate==1.15.0"
if ! python3 -c "import numpy, pytest, scikit_build_core" 2>/dev/null || [ "${CODA_PYTHON_TORCH:-0}" = 1 ]; then
  # shellcheck disable=SC2086
  python3 -m pip install -q --disable-pip-version-check $py_pkgs || \
    python3 -m pip install -q --disable-pip-version-check --break-system-packages $py_pkgs
fi
echo "install-deps: ok"
