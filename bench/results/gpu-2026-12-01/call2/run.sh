#!/bin/bash
# Call 2: coda bench block all (fused, tuned, floor) of the build before the
# restructuring (bbc03b0) and after it, interleaved A B A B on the same GPU,
# each with its own precompiled kernel cache and tuning file.
set -u
# the pack links libcoda.so (one copy of the library for all binaries, so it fits one call)
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
mkdir -p PRE && tar -xzf .carry/pre/pre.tgz -C PRE; Q=$PWD/PRE/pre
cat .carry/commit.txt > "$L/commit.txt" 2>/dev/null
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit,memory.total --format=csv > "$L/gpu.txt"
t0=$SECONDS
for r in 1 2; do
  CODA_CACHE_DIR=$Q/cache timeout 150 "$Q/coda" bench block all --fused --tuned --floor --csv > "$L/pre$r.csv" 2> "$L/pre$r.err"; echo "pre$r rc=$? ($((SECONDS-t0)) s)"
  CODA_CACHE_DIR=$P/cache timeout 150 "$P/coda" bench block all --fused --tuned --floor --csv > "$L/post$r.csv" 2> "$L/post$r.err"; echo "post$r rc=$? ($((SECONDS-t0)) s)"
  tar -czf "$O/logs.tgz" -C "$O" logs
done
for f in pre1 post1 pre2 post2; do echo "== $f"; cut -d, -f1-40 "$L/$f.csv" | head -8; done
