#!/bin/bash
# Call 6 (b): the Hugging Face Llama training benchmark (bench/hf_llama:
# eager, torch.compile, Liger, coda.torch.apply_to_llama, and the patched
# model under torch.compile) at the 1.1 B shape.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
cat .carry/commit.txt > "$L/commit.txt"
export CODA_CACHE_DIR=$P/cache
S=$(mktemp -d)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$S" .whl/*.whl > /dev/null 2>&1 && export PYTHONPATH=$S
OUT=$L timeout 560 tests/gpu/run_all.sh "$P" hfbench; echo "hfbench rc=$?"
