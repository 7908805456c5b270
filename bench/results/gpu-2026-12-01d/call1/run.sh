#!/bin/bash
# Call 1 (d): the decoder with programmatic dependent launch and the
# SwiGLU / RoPE stores in its GEMVs: its GPU test, memcheck and synccheck
# over it (--sanitize), then the bench at 1.1 B and 8B (batch 1, 16, 64)
# at the copy bandwidth measured here, and batch 1 again without
# programmatic dependent launch (CODA_DECODE_PDL=0).
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > "$L/gpu.txt" 2>&1
t0=$SECONDS
timeout -k 5 90 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode_gpu.txt" 2>&1
echo "test_decode_gpu exit $? ($((SECONDS - t0)) s)"; tail -8 "$L/test_decode_gpu.txt"
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
G="$P/coda generate --device gpu --bench --prompt-len 512 --tokens 256 --hbm-gbps $BW"
timeout -k 5 90 $G --shape 1.1b --batches 1,16,64 --profile > "$L/generate-1.1b.txt" 2>&1
echo "generate 1.1b exit $?"; cat "$L/generate-1.1b.txt"
timeout -k 5 150 $G --shape 8b --batches 1,16,64 --profile > "$L/generate-8b.txt" 2>&1
echo "generate 8b exit $?"; cat "$L/generate-8b.txt"
CODA_DECODE_PDL=0 timeout -k 5 60 $G --shape 1.1b --batches 1 > "$L/generate-1.1b-nopdl.txt" 2>&1
echo "generate 1.1b PDL off exit $?"; cat "$L/generate-1.1b-nopdl.txt"
CODA_DECODE_PDL=0 timeout -k 5 90 $G --shape 8b --batches 1 > "$L/generate-8b-nopdl.txt" 2>&1
echo "generate 8b PDL off exit $?"; cat "$L/generate-8b-nopdl.txt"
OUT= SANITIZE_RUNS="memcheck/decode synccheck/decode" timeout -k 5 200 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $?"; tail -8 "$L/sanitize.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
