#!/bin/bash
# Call 1 (c): racecheck of the attention backward after the per-thread
# release of the dK/dV ring (full hazard records), the GPU tests (attention,
# decoder with step graphs), the decoder bench at 1.1 B and 8B with and
# without step graphs at the measured copy bandwidth, and the fused-vs-plain
# table of the example programs and built-ins.
set -u
export LD_LIBRARY_PATH=$PWD/PK/gpu/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}
O=${OUT:?}; L=$O/logs; mkdir -p "$L"
mkdir -p PK && tar -xzf .carry/post/gpu-all.tgz -C PK; P=$PWD/PK/gpu
export CODA_CACHE_DIR=$P/cache
cat .carry/commit.txt > "$L/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$L/gpu.txt"
# 1. racecheck, full records (both accesses of each hazard)
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
"$CS" --version | tail -1 > "$L/racecheck.txt"
t0=$SECONDS
timeout -k 5 240 "$CS" --tool racecheck --racecheck-report all --print-limit 200 \
  "$P/tests/gpu/test_attention_gpu" --small >> "$L/racecheck.txt" 2>&1
echo "racecheck exit $? ($((SECONDS - t0)) s)" | tee -a "$L/racecheck.txt"
tail -5 "$L/racecheck.txt"
# 2. tests: attention (the changed kernel), decoder (graphs vs direct)
for t in test_attention_gpu test_decode_gpu; do
  t0=$SECONDS
  timeout -k 5 150 "$P/tests/gpu/$t" > "$L/$t.txt" 2>&1
  echo "$t exit $? ($((SECONDS - t0)) s)"; tail -6 "$L/$t.txt"
done
# 3. copy bandwidth (bytes read + written), then the decoder bench
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
BW=$(awk '/GB\/s/ {print $(NF-1)}' "$L/copy_bw.txt"); BW=${BW:-4300}
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
# 4. fused vs plain, example programs and built-ins, 8192 x 4096 x 4096
timeout -k 5 150 "$P/bench_fused" $(tests/gpu/fused_programs.sh) > "$L/bench_fused_programs.md" 2>&1
echo "bench_fused programs exit $?"; cat "$L/bench_fused_programs.md"
