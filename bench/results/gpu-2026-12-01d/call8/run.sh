#!/bin/bash
# Call 8 (d): racecheck over test_decode_gpu --sanitize with its progress
# lines, inside a 190 s limit: where the time goes.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache CUDA_MODULE_LOADING=LAZY
cat .carry/commit.txt > "$L/commit.txt"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$SECONDS
timeout -k 5 190 "$CS" --tool racecheck --print-limit 50 "$P/tests/gpu/test_decode_gpu" --sanitize 2>&1 |
  while IFS= read -r l; do echo "[$((SECONDS - t0)) s] $l"; done > "$L/racecheck-decode.txt"
echo "racecheck decode ($((SECONDS - t0)) s)"; tail -15 "$L/racecheck-decode.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
