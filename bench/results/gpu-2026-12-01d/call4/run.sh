#!/bin/bash
# Call 4 (d): the decoder as committed (splits of 16 cache positions up to
# 64 (row, KV head) pairs, 64 above) at 1.1 B (batch 1, 16, 64) and 8B
# (batch 1), beside Hugging Face generate with the static cache (which
# compiles the forward itself) at 1.1 B batch 1 and 64 and 8B batch 1, in
# the same call.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
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
timeout -k 5 60 $G --shape 1.1b --batches 1,16,64 > "$L/generate-1.1b.txt" 2>&1
echo "generate 1.1b exit $?"; cat "$L/generate-1.1b.txt"
timeout -k 5 60 $G --shape 8b --batches 1 > "$L/generate-8b.txt" 2>&1
echo "generate 8b exit $?"; cat "$L/generate-8b.txt"
t0=$SECONDS
timeout -k 5 230 python3 bench/generate/hf_generate.py --shape 1.1b --batches 1,64 --modes static \
  --out "$L/hf-1.1b.json" > "$L/hf-1.1b.txt" 2>&1
echo "hf 1.1b exit $? ($((SECONDS - t0)) s)"; tail -5 "$L/hf-1.1b.txt"
t0=$SECONDS
timeout -k 5 140 python3 bench/generate/hf_generate.py --shape 8b --batches 1 --modes static \
  --out "$L/hf-8b.json" > "$L/hf-8b.txt" 2>&1
echo "hf 8b exit $? ($((SECONDS - t0)) s)"; tail -4 "$L/hf-8b.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
