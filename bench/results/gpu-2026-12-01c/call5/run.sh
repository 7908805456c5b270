#!/bin/bash
# Call 5 (c): transformers' recorded numbers again (call 4's file did not
# come back), then, after the device state moved to model_device.c and
# generation to generate.c, the GPU training smoke test (with
# test_train_device) and the Python tests (torch ops after the folding of
# their backward tails).
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
t0=$SECONDS
python3 tests/hf_reference/build_fixtures.py "$O/fx" > "$L/hf_reference.txt" 2>&1 &&
  CUDA_VISIBLE_DEVICES= timeout -k 5 100 python3 tests/hf_reference/record_transformers.py "$O/fx" "$O/recorded.json" >> "$L/hf_reference.txt" 2>&1
echo "hf_reference record exit $? ($((SECONDS - t0)) s)"; grep -v "Loading weights" "$L/hf_reference.txt" | tail -8; rm -rf "$O/fx"
OUT=$L timeout -k 5 170 tests/gpu/run_all.sh "$P" train; echo "train rc=$?"
t0=$SECONDS
CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 \
  timeout -k 5 110 python3 -m pytest -q -p no:cacheprovider -rs python/tests > "$L/python.txt" 2>&1
echo "python exit $? ($((SECONDS - t0)) s)"; tail -6 "$L/python.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
