#!/bin/bash
# Sourced by the call scripts of gpu-2026-12-06c: the packed GPU build
# (tests/gpu/pack_shared.sh) of PACK (default .carry/c2) unpacked into PK/,
# its kernel cache, cuDNN from PyTorch's wheel, the commit recorded, the
# copy bandwidth (copy_bw sets BW, GB/s) and finish (logs into logs.tgz).
set -u
PACK=${PACK:-.carry/c2}
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf "$PACK/gpu-all.tgz" -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache COMMIT=$(cat "$PACK/commit.txt" 2>/dev/null || cat .carry/commit.txt)
echo "$COMMIT" > "$L/commit.txt"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm --format=csv,noheader | tee "$L/gpu.txt"
CL=$(python3 -c "import torch,os,glob;r=os.path.dirname(os.path.dirname(torch.__file__));c=glob.glob(r+'/nvidia/**/libcudnn.so.9',recursive=True);print(c[0] if c else '')" 2>/dev/null)
[ -n "$CL" ] && export CODA_CUDNN_LIB=$CL LD_LIBRARY_PATH=$(dirname "$CL"):$LD_LIBRARY_PATH
echo "cuDNN: ${CL:-none}" | tee -a "$L/gpu.txt"
copy_bw() {
  python3 - > "$L/copy_bw.txt" 2>&1 <<'PY'
import torch
n = 4 << 30
x = torch.empty(n, dtype=torch.uint8, device="cuda"); y = torch.empty_like(x)
for _ in range(3): y.copy_(x)
a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
ts = []
for _ in range(10):
    a.record(); y.copy_(x); b.record(); torch.cuda.synchronize(); ts.append(a.elapsed_time(b))
t = sorted(ts)[5] / 1e3
print("copy %d bytes: %.3f ms, %.0f GB/s read+write" % (n, t * 1e3, 2 * n / t / 1e9))
PY
  cat "$L/copy_bw.txt"
  BW=$(awk '/GB\/s/ {print $(NF-2)}' "$L/copy_bw.txt"); BW=${BW:-4300}
}
finish() { tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"; }
