#!/bin/bash
# Call 3 (d): the decoder after call 2 (one warp per column in the one-row
# GEMV again; decode attention over splits of 16 or 32 cache positions at
# small batches, cache rows in vector loads): its GPU test, the bench at
# 1.1 B and 8B (batch 1, 16, 64), then memcheck, synccheck and racecheck
# over test_decode_gpu --sanitize (fewer sampler draws there).
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
rm -rf PK; mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
t0=$SECONDS
timeout -k 5 90 "$P/tests/gpu/test_decode_gpu" > "$L/test_decode_gpu.txt" 2>&1
echo "test_decode_gpu exit $? ($((SECONDS - t0)) s)"; tail -3 "$L/test_decode_gpu.txt"
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
b() { # NAME TIMEOUT ARGS...: one bench, its log and its table rows
  local n=$1 t=$2; shift 2
  timeout -k 5 "$t" "$@" > "$L/$n.txt" 2>&1
  echo "== $n exit $?"; grep -E "^ +[0-9]|phase" "$L/$n.txt"
}
b generate-1.1b 90 $G --shape 1.1b --batches 1,16,64 --profile
b generate-8b 150 $G --shape 8b --batches 1,16,64 --profile
OUT= SANITIZE_RUNS="memcheck/decode synccheck/decode racecheck/decode" timeout -k 5 330 tests/gpu/sanitize.sh "$P" > "$L/sanitize.txt" 2>&1
echo "sanitize exit $?"; tail -7 "$L/sanitize.txt"
tar -czf "$O/logs.tgz" -C "$O" logs && rm -rf "$L"
