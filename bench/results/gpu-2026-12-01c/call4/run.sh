#!/bin/bash
# Call 4 (c): transformers' recorded numbers for the CI reference test; the
# decoder after the one-row GEMV dispatch, the batched cache loads of decode
# attention and the RoPE step over several blocks: its GPU test (with the
# llama3-scaled RoPE case), the bench at 1.1 B and 8B (batch 1, 16, 64;
# step graphs; a profiled step by phase) at the copy bandwidth measured
# here, and Hugging Face generate (eager and static cache) on the same
# shapes in the same call.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
# transformers' numbers for the CI reference test (fp32, CPU)
t0=$SECONDS
python3 tests/hf_reference/build_fixtures.py "$O/fx" > "$L/hf_reference.txt" 2>&1 &&
  CUDA_VISIBLE_DEVICES= timeout -k 5 200 python3 tests/hf_reference/record_transformers.py "$O/fx" "$L/recorded.json" >> "$L/hf_reference.txt" 2>&1
echo "hf_reference record exit $? ($((SECONDS - t0)) s)"; tail -12 "$L/hf_reference.txt"; rm -rf "$O/fx"
t0=$SECONDS
timeout -k 5 150 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode_gpu.txt" 2>&1
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
for sh in 1.1b 8b; do
  timeout -k 5 240 "$P/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" --shape $sh --batches 1,16,64 --profile > "$L/generate-$sh.txt" 2>&1
  echo "generate $sh exit $?"; cat "$L/generate-$sh.txt"
done
t0=$SECONDS
timeout -k 5 200 python3 bench/generate/hf_generate.py --shape 1.1b --batches 1,16 --modes eager,static \
  --out "$L/hf-1.1b.json" > "$L/hf-1.1b.txt" 2>&1
echo "hf 1.1b exit $? ($((SECONDS - t0)) s)"; tail -8 "$L/hf-1.1b.txt"
t0=$SECONDS
timeout -k 5 150 python3 bench/generate/hf_generate.py --shape 8b --batches 1 --modes eager,static \
  --out "$L/hf-8b.json" > "$L/hf-8b.txt" 2>&1
echo "hf 8b exit $? ($((SECONDS - t0)) s)"; tail -6 "$L/hf-8b.txt"
