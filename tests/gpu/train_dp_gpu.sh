#!/bin/bash
# Data-parallel training on two GPUs (run from the repository root on a
# machine with at least two sm_90 GPUs, after tests/gpu/train_dp_prepare.sh):
#
#   tests/gpu/train_dp_gpu.sh PACK_DIR        (default .carry/gdp)
#
# PACK_DIR holds build/coda and cache/ (the precompiled kernels, exported as
# CODA_CACHE_DIR). NCCL is found through CODA_NCCL_LIB, else the
# nvidia-nccl Python package, else the loader (see find_nccl below). With
# $OUT set, everything printed also goes to $OUT/train-dp.log.
#
#  (a) d512 (8 layers, d 512, 8/4 heads, ffn 1536, seq 512, bytes), 40 steps
#      at the same global batch: one GPU with batch 32 and two GPUs (--ranks
#      2) with batch 16 each see the same sequences. Both must exit 0, and the
#      loss curves agree within bf16 noise: every step within 2 % relative
#      and the mean of the last 10 steps within 0.5 %. (The GEMMs see
#      8192 instead of 16384 rows per GPU, so the weight-gradient sums and
#      bf16 roundings differ; the differences stay at the level of the
#      GPU-vs-CPU check of train_gpu_smoke.sh.)
#  (b) two identical 2-GPU runs of 10 steps: byte-identical loss logs.
#  (c) the 2-GPU checkpoint of (b) continues for one step on one GPU with
#      batch 32 and on two GPUs with batch 16: both exit 0 and their step-11
#      losses agree within 2 %.
#  (d) throughput: tokens/s of one GPU at batch 16 and at batch 32 against
#      two GPUs at batch 16 each (steps 4-40; the goal is >= 1.8x).
#  (e) --ranks 3 on a machine with two GPUs fails with a message.
set -u
cd "$(dirname "$0")/../.."
P=${1:-.carry/gdp}
CODA=$P/build/coda
export CODA_CACHE_DIR=$(cd "$P/cache" && pwd)
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/train-dp.log") 2>&1
fi
[ -x "$CODA" ] || { echo "no $CODA (run tests/gpu/train_dp_prepare.sh first)"; exit 2; }

# NCCL: CODA_NCCL_LIB if set, else the nvidia-nccl wheel, else the loader's.
find_nccl() {
  [ -n "${CODA_NCCL_LIB:-}" ] && { echo "$CODA_NCCL_LIB"; return; }
  local d
  d=$(python3 -c 'import nvidia.nccl, os; print(list(nvidia.nccl.__path__)[0])' 2>/dev/null) &&
    [ -f "$d/lib/libnccl.so.2" ] && { echo "$d/lib/libnccl.so.2"; return; }
  # other layouts of the NVIDIA wheels (e.g. nvidia/cu13/lib)
  d=$(python3 -c 'import glob, os, nvidia
for p in nvidia.__path__:
    for f in sorted(glob.glob(os.path.join(p, "**", "libnccl.so.2"), recursive=True)):
        print(f); raise SystemExit' 2>/dev/null) && [ -n "$d" ] && { echo "$d"; return; }
  d=$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 / { print $NF; exit }')
  [ -n "$d" ] && { echo "$d"; return; }
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/lib/x86_64-linux-gnu; do
    [ -f "$d/libnccl.so.2" ] && { echo "$d/libnccl.so.2"; return; }
  done
  echo libnccl.so.2
}
export CODA_NCCL_LIB=$(find_nccl)
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
echo "NCCL: $CODA_NCCL_LIB"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
echo "GPUs: $NGPU"
[ "$NGPU" -ge 2 ] || { echo "need two GPUs"; exit 2; }

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
FAIL=0
T0=$(date +%s)
fail() { echo "FAIL: $*"; FAIL=1; }

mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' \
  > "$W/corpus/docs"
timeout 60 "$CODA" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" || { echo "corpus failed"; exit 1; }

D512="--config d512 --data $W/data --val-every 0 --val-batches 0 --warmup 10 --lr 2e-3 --seed 11"
losses() { awk -F, 'NR > 1 { print $2 }' "$1/loss.csv"; }
# mean tokens/s of the step lines after the first 3
toks() { awk '/^step/ && $3 != "val_loss" && $2 > 3 { for (i = 1; i <= NF; i++) if ($i == "tok/s") { s += $(i + 1); n++ } }
  END { if (n) printf "%.0f", s / n; else print 0 }' "$1"; }

echo "== (a) d512, 40 steps: 1 GPU x batch 32 vs 2 GPUs x batch 16"
ok=1
timeout 300 "$CODA" train --device gpu $D512 --steps 40 --batch 32 --out "$W/g1" > "$W/g1.txt" 2>&1 || { ok=0; fail "(a) 1-GPU run (status $?)"; tail -5 "$W/g1.txt"; }
timeout 300 "$CODA" train --device gpu $D512 --steps 40 --batch 16 --ranks 2 --out "$W/g2" > "$W/g2.txt" 2>&1 || { ok=0; fail "(a) 2-GPU run (status $?)"; tail -5 "$W/g2.txt"; }
grep -E '^(model|data)' "$W/g2.txt"
if [ $ok = 1 ]; then
  paste -d' ' <(losses "$W/g1") <(losses "$W/g2") | awk '{
      d = $1 - $2; if (d < 0) d = -d; r = d / $1; if (r > m) m = r;
      printf "step %2d  1 GPU %.5f  2 GPUs %.5f  rel %.2e\n", NR, $1, $2, r;
      a[NR] = $1; b[NR] = $2 }
    END { for (i = NR - 9; i <= NR; i++) { sa += a[i] / 10; sb += b[i] / 10 }
      r = (sa - sb) / sa; if (r < 0) r = -r;
      printf "max per-step rel %.2e (limit 2e-2); last-10 mean %.5f vs %.5f, rel %.2e (limit 5e-3)\n", m, sa, sb, r;
      exit !(NR == 40 && m <= 0.02 && r <= 0.005) }' || fail "(a) the loss curves differ beyond bf16 noise"
fi

echo "== (b) two identical 2-GPU runs, 10 steps"
for r in 1 2; do
  timeout 120 "$CODA" train --device gpu $D512 --steps 10 --batch 16 --ranks 2 --out "$W/b$r" --quiet > "$W/b$r.txt" 2>&1 \
    || { fail "(b) run $r"; tail -5 "$W/b$r.txt"; }
done
if cmp -s "$W/b1/loss.csv" "$W/b2/loss.csv"; then echo "bit-identical loss logs"
else fail "(b) the loss logs differ"; diff "$W/b1/loss.csv" "$W/b2/loss.csv" | head; fi

echo "== (c) the 2-GPU checkpoint continues on 1 GPU (batch 32) and on 2 GPUs"
cp -r "$W/b1" "$W/c1"; cp -r "$W/b1" "$W/c2"
timeout 120 "$CODA" train --device gpu $D512 --steps 11 --batch 32 --resume "$W/c1/checkpoint.safetensors" --out "$W/c1" --quiet > "$W/c1.txt" 2>&1 \
  || { fail "(c) resume on 1 GPU"; tail -5 "$W/c1.txt"; }
timeout 120 "$CODA" train --device gpu $D512 --steps 11 --batch 16 --ranks 2 --resume "$W/c2/checkpoint.safetensors" --out "$W/c2" --quiet > "$W/c2.txt" 2>&1 \
  || { fail "(c) resume on 2 GPUs"; tail -5 "$W/c2.txt"; }
paste -d' ' <(losses "$W/c1" | tail -1) <(losses "$W/c2" | tail -1) | awk '{
  d = $1 - $2; if (d < 0) d = -d; printf "step 11 after resuming: 1 GPU %.5f, 2 GPUs %.5f\n", $1, $2; exit !(d <= 0.02 * $1) }' \
  || fail "(c) resumed losses differ by more than 2 %"

echo "== (d) throughput (tokens/s, steps 4-40)"
timeout 300 "$CODA" train --device gpu $D512 --steps 40 --batch 16 --out "$W/t1" > "$W/t1.txt" 2>&1 || fail "(d) 1 GPU batch 16"
T1=$(toks "$W/t1.txt"); T1B=$(toks "$W/g1.txt"); T2=$(toks "$W/g2.txt")
grep -E '^step +40 ' "$W/t1.txt" "$W/g1.txt" "$W/g2.txt" | sed 's/^[^:]*\///'
awk -v a="$T1" -v b="$T1B" -v c="$T2" 'BEGIN {
  printf "1 GPU batch 16: %d tok/s; 1 GPU batch 32: %d tok/s; 2 GPUs x batch 16: %d tok/s\n", a, b, c;
  if (a > 0 && b > 0) printf "speed-up of 2 GPUs: %.2fx over 1 GPU at the same per-GPU batch, %.2fx at the same global batch (goal >= 1.8x)\n", c / a, c / b }'

echo "== (e) more ranks than GPUs"
if timeout 60 "$CODA" train --device gpu $D512 --steps 2 --batch 2 --ranks $((NGPU + 1)) --out "$W/e" > "$W/e.txt" 2>&1; then
  fail "(e) --ranks $((NGPU + 1)) succeeded"
else
  echo "exit $?: $(tail -1 "$W/e.txt")"
fi

echo "total $(($(date +%s) - T0)) s"
if [ $FAIL = 0 ]; then echo "train_dp_gpu: PASS"; else echo "train_dp_gpu: FAIL"; fi
exit $FAIL
