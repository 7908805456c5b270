#!/bin/bash
# Call 2 (c): the decoder bench of call 1 again (its bandwidth was misread
# from the copy line): 1.1 B and 8B, batch 1, 16, 64, with and without step
# graphs, at the copy bandwidth measured in this call.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
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
gen() { # NAME ARGS...
  local n=$1; shift
  timeout -k 5 240 "$P/coda" generate --device gpu --bench --prompt-len 512 --tokens 256 \
    --hbm-gbps "$BW" "$@" > "$L/generate-$n.txt" 2>&1
  echo "generate $n exit $?"; cat "$L/generate-$n.txt"
}
gen 1.1b --shape 1.1b --batches 1,16,64
gen 1.1b-nographs --shape 1.1b --batches 1,16,64 --no-graphs
gen 8b --shape 8b --batches 1,16,64
gen 8b-nographs --shape 8b --batches 1 --no-graphs
