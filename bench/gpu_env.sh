#!/bin/bash
# Sourced by the call scripts under bench/results/ (one GPU call each):
# unpacks the GPU build packed by tests/gpu/pack_shared.sh from PACK
# (PACK/gpu-all.tgz, with PACK/commit.txt) into PK/ (P=PK/gpu), points
# the kernel cache and the loader at it, loads cuDNN from PyTorch's wheel
# when present, records the GPU and commit into $OUT/logs, and defines
#   copy_bw   the device-to-device copy bandwidth (sets BW, GB/s), logged
#   finish    packs $OUT/logs into $OUT/logs.tgz (one file comes back)
# Without PACK (PACK=) only the logs folder, the GPU line and the helpers.
set -u
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,driver_version --format=csv,noheader | tee "$L/gpu.txt"
if [ -n "${PACK:-}" ]; then
  rm -rf PK; mkdir -p PK && tar -xzf "$PACK/gpu-all.tgz" -C PK; P=$PWD/PK/gpu
  export LD_LIBRARY_PATH=$P/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  export CODA_CACHE_DIR=$P/cache
  COMMIT=$(cat "$PACK/commit.txt"); export COMMIT
  echo "$COMMIT" > "$L/commit.txt"
fi
CL=$(python3 -c "import torch,os,glob;r=os.path.dirname(os.path.dirname(torch.__file__));c=glob.glob(r+'/nvidia/**/libcudnn.so.9',recursive=True);print(c[0] if c else '')" 2>/dev/null)
[ -n "$CL" ] && export CODA_CUDNN_LIB=$CL LD_LIBRARY_PATH=$(dirname "$CL"):${LD_LIBRARY_PATH:-}
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
  BW=$(awk '/GB\/s/ {print $(NF-2)}' "$L/copy_bw.txt"); BW=${BW:-3000}
}
finish() { tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"; }
