#!/bin/bash
# Smoke test of `coda train --device gpu` (run from the repository root on a
# machine with an sm_90 GPU, with the binaries of a CUDA build):
#
#   tests/gpu/train_gpu_smoke.sh BUILD_DIR [CACHE_DIR]
#
# CACHE_DIR (default .carry/gtrain/cache) holds the precompiled kernels
# (tests/gpu/train_gpu_prepare.sh); it is exported as CODA_CACHE_DIR. With
# $OUT set, everything printed also goes to $OUT/train-gpu.log.
#
#  (a) 100 steps of a small model (2 layers, d 256, 4/2 heads, ffn 512,
#      seq 128, byte vocab, batch 8) on a corpus made from the repository's
#      Markdown files: the mean loss of the last 5 steps must be below 0.75x
#      that of the first 5.
#  (b) the same 20 steps twice: loss.csv files (loss, lr, grad norm per
#      step) must be byte-identical.
#  (c) 5 steps on the GPU and on the CPU plan engine (the same bf16-weight
#      scheme): per-step losses must agree within 2 % relative. The GPU
#      attention rounds its probabilities to bf16 where the CPU keeps fp32
#      (about 1 % of rms in the block outputs); the loss, a mean over 1024
#      tokens, moves far less, and warm-up keeps the first steps' learning
#      rate small, so the runs do not drift apart. Then the GPU checkpoint
#      resumes for one step on the CPU and on the GPU: those losses agree
#      within 2 % as well (the checkpoint format is shared).
#  (f) the same 20 steps (validation every 7, a checkpoint at 10) with
#      AdamW layer by layer beside the next forward (CODA_OPTIM_OVERLAP=1)
#      and after the backward (the default): loss.csv and the checkpoints
#      byte-identical.
#  (g) the bf16 optimizer state (--optimizer-state bf16): a checkpoint
#      save at step 10 leaves the 20-step run's final checkpoint
#      byte-identical; the loss falls.
#  (h) Qwen3 (the QK-norm block, head_dim 128 over d 256 and 4 heads: q
#      width 512), 5 steps on the GPU, on the CPU reference engine (fp32)
#      and on the CPU plan engine: per-step losses within 2 % relative of
#      both, as in (c).
#  (i) GPT-2 (LayerNorm with biases, learned positions, the tied head; 4/4
#      heads), 5 steps on the GPU twice (byte-identical loss logs), on the
#      CPU reference engine and on the CPU plan engine: per-step losses
#      within 2 % relative of both, as in (c).
#  (j) Gemma 3 (layer 0 local with a 40-token window over the 128-token
#      sequence, layer 1 global; (1 + w) norms, post-norms, GeGLU, the
#      embedding scale, the tied head; 4/2 heads of 64), 5 steps on the GPU
#      twice (byte-identical loss logs), on the CPU reference engine and on
#      the CPU plan engine: per-step losses within 2 % relative of both, as
#      in (c).
#  (e) when BUILD_DIR/tests/test_train_device exists: that test (device
#      step vs the CPU plan engine, bit-identical repeats, upload/download).
#  (d) throughput of 6 layers, d 512, ffn 2048, 8/8 heads, vocab 32768,
#      batch 16 x seq 1024 (batch 8 if 16 fails): 3 warm-up + 10 timed steps.
set -u
cd "$(dirname "$0")/../.."
BUILD=${1:?usage: $0 BUILD_DIR [CACHE_DIR]}
CODA=$BUILD/coda
CACHE=${2:-.carry/gtrain/cache}
mkdir -p "$CACHE"
export CODA_CACHE_DIR=$(cd "$CACHE" && pwd)
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT"
  exec > >(tee "$OUT/train-gpu.log") 2>&1
fi
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
FAIL=0
T0=$(date +%s)
fail() { echo "FAIL: $*"; FAIL=1; }
[ -x "$CODA" ] || { echo "no $CODA"; exit 2; }

# Corpus: paragraphs of the repository's Markdown as fortune-style documents.
mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' \
  > "$W/corpus/docs"
timeout 60 "$CODA" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" || { echo "corpus failed"; exit 1; }

SMALL="--layers 2 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --seq 128 --vocab 256 --batch 8 \
  --data $W/data --val-every 0 --val-batches 0"
losses() { awk -F, 'NR > 1 { print $2 }' "$1/loss.csv"; }

echo "== (a) loss falls over 100 GPU steps"
if timeout 60 "$CODA" train --device gpu $SMALL --steps 100 --warmup 10 --lr 3e-3 --out "$W/a" --quiet; then
  losses "$W/a" | awk '{ l[NR] = $1 } END {
    f = (l[1] + l[2] + l[3] + l[4] + l[5]) / 5; e = 0; for (i = NR - 4; i <= NR; i++) e += l[i] / 5;
    printf "first 5 steps %.4f, last 5 steps %.4f (%d steps)\n", f, e, NR; exit !(NR == 100 && e < 0.75 * f) }' \
    || fail "(a) the loss did not fall enough"
else
  fail "(a) coda train --device gpu failed"
fi

echo "== (b) two identical 20-step runs"
for r in 1 2; do
  timeout 60 "$CODA" train --device gpu $SMALL --steps 20 --warmup 5 --seed 7 --out "$W/b$r" --quiet \
    || fail "(b) run $r failed"
done
if cmp -s "$W/b1/loss.csv" "$W/b2/loss.csv"; then echo "bit-identical loss logs (20 steps)"
else fail "(b) the loss logs differ"; diff "$W/b1/loss.csv" "$W/b2/loss.csv" | head; fi

echo "== (c) GPU vs CPU, 5 steps (tolerance 2 % relative per step)"
ok=1
timeout 60 "$CODA" train --device gpu $SMALL --steps 5 --warmup 20 --seed 3 --out "$W/cg" --quiet || ok=0
timeout 90 "$CODA" train --device cpu --engine plans $SMALL --steps 5 --warmup 20 --seed 3 --out "$W/cc" --quiet || ok=0
if [ $ok = 1 ]; then
  paste -d' ' <(losses "$W/cg") <(losses "$W/cc") | awk '{
    d = $1 - $2; if (d < 0) d = -d; r = d / $2; if (r > m) m = r;
    printf "step %d  gpu %.6f  cpu %.6f  rel %.2e\n", NR, $1, $2, r } END { exit !(NR == 5 && m <= 0.02) }' \
    || fail "(c) GPU and CPU losses differ by more than 2 %"
  # a GPU checkpoint continues on either device
  cp -r "$W/cg" "$W/rg"; cp -r "$W/cg" "$W/rc"
  timeout 60 "$CODA" train --device gpu $SMALL --steps 6 --warmup 20 --resume "$W/rg/checkpoint.safetensors" --out "$W/rg" --quiet || ok=0
  timeout 60 "$CODA" train --device cpu --engine plans $SMALL --steps 6 --warmup 20 --resume "$W/rc/checkpoint.safetensors" --out "$W/rc" --quiet || ok=0
  if [ $ok = 1 ]; then
    paste -d' ' <(losses "$W/rg" | tail -1) <(losses "$W/rc" | tail -1) | awk '{
      d = $1 - $2; if (d < 0) d = -d; printf "resumed step 6: gpu %.6f  cpu %.6f\n", $1, $2; exit !(d <= 0.02 * $2) }' \
      || fail "(c) resumed losses differ by more than 2 %"
  else
    fail "(c) resuming the GPU checkpoint failed"
  fi
else
  fail "(c) a 5-step run failed"
fi

echo "== (f) AdamW beside the next forward (CODA_OPTIM_OVERLAP=1) and after the backward (the default)"
# validation and a checkpoint between steps read the weights while updates
# may be pending; both runs must end in the same bits
for v in 1 0; do
  CODA_OPTIM_OVERLAP=$v timeout 60 "$CODA" train --device gpu $SMALL --steps 20 --warmup 5 --seed 11 \
    --val-every 7 --val-batches 2 --save-every 10 --out "$W/f$v" --quiet || fail "(f) run with overlap $v failed"
done
if cmp -s "$W/f1/loss.csv" "$W/f0/loss.csv" && cmp -s "$W/f1/checkpoint.safetensors" "$W/f0/checkpoint.safetensors"
then echo "bit-identical loss logs and checkpoints (weights and moments), 20 steps"
else fail "(f) overlapped and serial AdamW differ"; diff "$W/f1/loss.csv" "$W/f0/loss.csv" | head; fi

echo "== (g) bf16 optimizer state: straight = stopped at a checkpoint + resumed, the loss falls"
# the stop is a run of 10 steps of the 20-step schedule (--steps 20 with a
# stop after step 10 is what --resume continues)
timeout 60 "$CODA" train --device gpu $SMALL --steps 20 --warmup 5 --seed 13 --optimizer-state bf16 \
  --val-every 0 --val-batches 0 --out "$W/g1" --quiet || fail "(g) straight bf16 run failed"
timeout 60 "$CODA" train --device gpu $SMALL --steps 20 --warmup 5 --seed 13 --optimizer-state bf16 \
  --val-every 0 --val-batches 0 --save-every 10 --out "$W/g2" --quiet || fail "(g) bf16 run with saves failed"
if cmp -s "$W/g1/checkpoint.safetensors" "$W/g2/checkpoint.safetensors"
then echo "bit-identical bf16-state checkpoints with and without a save at step 10"
else fail "(g) a save changed the bf16 run"; fi
awk -F, 'NR > 1 { n++; l[n] = $2 } END { a = (l[1] + l[2] + l[3]) / 3; b = (l[n] + l[n-1] + l[n-2]) / 3;
  printf "bf16 state: mean loss of steps 1-3 %.4f, of the last 3 %.4f\n", a, b; exit !(b < 0.9 * a) }' \
  "$W/g1/loss.csv" || fail "(g) the bf16-state loss did not fall"

# engines_agree STAGE NAME RUNS ARGS...: 5 steps of ARGS (seed 3, warm-up 20)
# on the GPU RUNS times (1 or 2; twice: byte-identical loss logs), on the CPU
# reference engine and on the CPU plan engine; every step's GPU loss within
# 2 % relative of both CPU ones, as in (c)
engines_agree() {
  local stage=$1 name=$2 runs=$3 o=$W/$1 r ok=1
  shift 3
  for r in $(seq "$runs"); do
    timeout 60 "$CODA" train --device gpu "$@" --steps 5 --warmup 20 --seed 3 --out "${o}g$r" --quiet || ok=0
  done
  timeout 120 "$CODA" train --device cpu --engine reference "$@" --steps 5 --warmup 20 --seed 3 --out "${o}r" --quiet || ok=0
  timeout 120 "$CODA" train --device cpu --engine plans "$@" --steps 5 --warmup 20 --seed 3 --out "${o}c" --quiet || ok=0
  if [ $ok = 0 ]; then fail "($stage) a $name 5-step run failed"; return; fi
  if [ "$runs" = 2 ]; then cmp -s "${o}g1/loss.csv" "${o}g2/loss.csv" || fail "($stage) two $name GPU runs differ"; fi
  paste -d' ' <(losses "${o}g1") <(losses "${o}r") <(losses "${o}c") | awk '{
    r1 = ($1 - $2) / $2; if (r1 < 0) r1 = -r1; r2 = ($1 - $3) / $3; if (r2 < 0) r2 = -r2
    if (r1 > m) m = r1; if (r2 > m) m = r2
    printf "step %d  gpu %.6f  cpu reference %.6f (rel %.2e)  cpu plans %.6f (rel %.2e)\n", NR, $1, $2, r1, $3, r2 }
    END { exit !(NR == 5 && m <= 0.02) }' || fail "($stage) $name GPU and CPU losses differ by more than 2 %"
}

echo "== (h) Qwen3: GPU vs the CPU reference and plan engines, 5 steps (2 % relative per step)"
engines_agree h Qwen3 1 --family qwen3 --head-dim 128 --tied 0 $SMALL

echo "== (i) GPT-2: GPU (twice) vs the CPU reference and plan engines, 5 steps (2 % relative per step)"
GPT2="--family gpt2 --tied 1 --layers 2 --dim 256 --heads 4 --kv-heads 4 --ffn 512 --seq 128 \
  --vocab 256 --batch 8 --data $W/data --val-every 0 --val-batches 0"
engines_agree i GPT-2 2 $GPT2

echo "== (j) Gemma 3: GPU (twice) vs the CPU reference and plan engines, 5 steps (2 % relative per step)"
engines_agree j "Gemma 3" 2 --family gemma3 --tied 1 --head-dim 64 --sliding-window 40 \
  --sliding-pattern 2 $SMALL

if [ -x "$BUILD/tests/test_train_device" ]; then
  echo "== (e) test_train_device"
  timeout 60 "$BUILD/tests/test_train_device" 2>&1 | tail -12
  [ "${PIPESTATUS[0]}" = 0 ] || fail "(e) test_train_device"
fi

echo "== (d) throughput: 6 layers, d 512, ffn 2048, 8/8 heads, vocab 32768, seq 1024"
BIG="--layers 6 --dim 512 --heads 8 --kv-heads 8 --ffn 2048 --vocab 32768 --seq 1024 --data $W/data \
  --val-every 0 --val-batches 0 --steps 13 --warmup 3"
done_d=0
for b in 16 8; do
  if timeout 120 "$CODA" train --device gpu $BIG --batch $b --out "$W/d$b" > "$W/d$b.txt" 2>&1; then
    grep -E '^(model|step +(1|13) |gpu:)' "$W/d$b.txt"
    awk -v b=$b '/^step/ && $3 != "val_loss" && $2 > 3 {
        for (i = 1; i <= NF; i++) { if ($i == "ms/step") ms += $(i + 1); if ($i == "mfu") { s = $(i + 1); sub("%", "", s); mfu += s } }
        n++ }
      END { if (n) printf "batch %d x 1024: %d timed steps, %.1f ms/step, %.0f tokens/s, mean MFU %.1f%%\n",
            b, n, ms / n, n * b * 1024 / (ms / 1000), mfu / n }' "$W/d$b.txt"
    grep dev_mem "$W/d$b.txt" | tail -1 | sed 's/.*\(dev_mem [0-9]* MiB\).*/last step: \1/'
    done_d=1
    break
  else
    echo "batch $b failed:"; tail -3 "$W/d$b.txt"
  fi
done
[ $done_d = 1 ] || fail "(d) the throughput run failed"

echo "total $(($(date +%s) - T0)) s"
if [ $FAIL = 0 ]; then echo "train_gpu_smoke: PASS"; else echo "train_gpu_smoke: FAIL"; fi
exit $FAIL
