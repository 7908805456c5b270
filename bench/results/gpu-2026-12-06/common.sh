#!/bin/bash
# Sourced by the call scripts of 2026-12-06 (calls 2 and 3): unpacks the
# packed GPU build (tests/gpu/pack_shared.sh) into PK/, points the binaries
# at its kernel cache and cuDNN at PyTorch's wheel, records the commit.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache COMMIT=$(cat .carry/commit.txt)
echo "$COMMIT" > "$L/commit.txt"
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$L/gpu.txt"
CL=$(python3 -c "import torch,os,glob;r=os.path.dirname(os.path.dirname(torch.__file__));c=glob.glob(r+'/nvidia/**/libcudnn.so.9',recursive=True);print(c[0] if c else '')" 2>/dev/null)
[ -n "$CL" ] && export CODA_CUDNN_LIB=$CL LD_LIBRARY_PATH=$(dirname "$CL"):$LD_LIBRARY_PATH
echo "cuDNN: ${CL:-none}" | tee -a "$L/gpu.txt"
finish() { tar -czf "$O/logs.tgz" -C "$O" logs; }
