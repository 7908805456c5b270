#!/bin/bash
# Call 6 (c): the decoder's prefill of whole fresh prompts through the
# training attention: its GPU test (prefill logits against the CPU decoder),
# memcheck over that test (the decode kernels, the tensor-core GEMV, the
# recorded step graphs), and the bench at 1.1 B (batch 1, 16, 64) and 8B
# (batch 1, 16) at the copy bandwidth measured here.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
t0=$SECONDS
timeout -k 5 60 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode_gpu.txt" 2>&1
echo "test_decode_gpu exit $? ($((SECONDS - t0)) s)"; tail -12 "$L/test_decode_gpu.txt"
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
timeout -k 5 80 "$P/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
  --hbm-gbps "$BW" --shape 1.1b --batches 1,16,64 --profile > "$L/generate-1.1b.txt" 2>&1
echo "generate 1.1b exit $?"; cat "$L/generate-1.1b.txt"
timeout -k 5 90 "$P/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
  --hbm-gbps "$BW" --shape 8b --batches 1,16 > "$L/generate-8b.txt" 2>&1
echo "generate 8b exit $?"; cat "$L/generate-8b.txt"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$SECONDS
timeout -k 5 100 "$CS" --tool memcheck --print-limit 50 "$P/tests/gpu/test_decode_gpu" > "$L/memcheck-decode.txt" 2>&1
echo "memcheck test_decode_gpu exit $? ($((SECONDS - t0)) s)"; grep -E "ERROR SUMMARY|checks," "$L/memcheck-decode.txt" | tail -3
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
