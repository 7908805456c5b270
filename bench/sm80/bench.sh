#!/bin/bash
# The sm80 path's benchmarks, forced on a Hopper GPU (CODA_ARCH=sm80),
# each beside its reference in the same call (a call script: run from the
# repository root on the GPU machine with OUT set; recorded runs:
# bench/results/gpu-2026-12-07d.md, calls 2-3):
#   gemm       bench_gemm --sm80 --lt --no-configs: the 27 block shapes, the
#              Hopper default, the sm80 path (a second context made with
#              the option arch SM80), cuBLAS and cuBLASLt (the heuristic's
#              algorithm, as PyTorch's matmul) in the same interleaved
#              rounds; sm80/Hopper per shape, geometric means (all, 1B
#              shapes), and the Hopper default against cuBLASLt; with
#              --cutlass (a bench_gemm built with CODA_CUTLASS_INCLUDE:
#              bench/gemm/fetch_cutlass.sh) CUTLASS's sm_80 GEMM too, the
#              mma.sync kernel the sm80 path is held to (target 0.95x).
#              Then CODA_ARCH=sm80 for the whole process at the 1B shapes
#              (the path taken from the environment, as the library runs it)
#   attention  bench_attention with CODA_ARCH=sm80 (the mma.sync variants
#              swept, the defaults), with the Hopper defaults for
#              reference, and sdpa.py with SDPA forced to FlashAttention-2
#              (sdpa_kernel(SDPBackend.FLASH_ATTENTION)) at the same shapes
#   block      coda bench block d512 d2048 --fused --floor, CODA_ARCH=sm80
#              and unset
#   train      bench/train/run.sh at d512 and 1b: coda with CODA_ARCH=sm80
#              and unset (labels sm80, sm90) and torch.compile bf16
#              (train_torch2.py of PEERS); first a short sm80 run at d512
#              whose NVRTC compiles (any sm80 kernel for sm_90 the pack
#              lacks, see below) stay out of the timed runs
# then table.py merges what ran into sm80.md and sm80.json.
#
#   PARTS=kernels bench/sm80/bench.sh   (gemm attention block)
#   PARTS=train   bench/sm80/bench.sh   (the second call)
#
# Two calls: kernels took 46 s and train 184 s on an H100 with every
# kernel in the pack (gpu-2026-12-07d); kernels missing from the pack
# compile on first use, minutes. PARTS takes any of gemm, attention, block, train
# (or kernels, all). Every part has its own time limit, cut to what is
# left of BUDGET (default 550 s from the start of this script).
#
# Carries PACK (default .carry/p8: tests/gpu/pack_shared.sh of the tree: coda, bench_gemm,
# bench_attention, lib/, and the kernel cache with the sm80 kernels for
# sm_90) and, for the train part, .carry/peers (train_torch2.py). The pack
# precompiles the sm80 kernels it can name for compute capability 9.0 (the
# epilogue test's, bench_gemm's and the built-in plans', `coda compile
# --all --arch sm80 --cc 90`); any other compiles with NVRTC on first
# use. New kernels are kept in
# /tmp/coda-sm80-cache for a later call on the same warm machine and come
# back in $OUT/sm80-cache.tgz (SEED_CACHE for the next pack).
PACK=${PACK:-.carry/p8} source bench/gpu_env.sh
PEERS=${PEERS:-.carry/peers}
BUDGET=${BUDGET:-550}
T0=$(date +%s)
PARTS=${PARTS:-kernels}
PARTS=${PARTS//kernels/gemm attention block}
PARTS=${PARTS//all/gemm attention block train}
KEEP=/tmp/coda-sm80-cache
mkdir -p "$KEEP"
cp -n "$KEEP"/epi-*.cubin "$P/cache/" 2> /dev/null
ls "$P/cache" > "$L/cache-before.txt"
echo "parts: $PARTS; budget $BUDGET s" | tee "$L/parts.txt"

# step NAME CAP CMD...: CMD with a time limit of CAP seconds, or what is
# left of the budget less 10 s; logs rc and wall time into steps.tsv.
step() {
  local name=$1 cap=$2 left t0 rc
  shift 2
  left=$(( BUDGET - ($(date +%s) - T0) - 10 ))
  [ "$left" -lt "$cap" ] && cap=$left
  if [ "$cap" -lt 5 ]; then
    printf '%s\tskipped\t0\n' "$name" | tee -a "$L/steps.tsv"
    return 0
  fi
  t0=$(date +%s)
  timeout -k 10 "$cap" "$@"
  rc=$?
  printf '%s\t%s\t%s\n' "$name" "$rc" "$(( $(date +%s) - t0 ))" | tee -a "$L/steps.tsv"
}
has() { [[ " $PARTS " == *" $1 "* ]]; }

if has gemm; then
  # --cutlass where the pack's bench_gemm was built with CUTLASS's headers
  cut=$("$P/bench_gemm" --cutlass --help > /dev/null 2>&1 && echo --cutlass || true)
  step gemm 200 sh -c "\"$P/bench_gemm\" --no-configs --sm80 --lt $cut --json \"$L/gemm.json\" > \"$L/gemm.md\" 2> \"$L/gemm.err\""
  grep -v "^|---" "$L/gemm.md" | tail -32; tail -3 "$L/gemm.err"
  step gemm_env 60 sh -c "CODA_ARCH=sm80 \"$P/bench_gemm\" --shape '1B ' --json \"$L/gemm-env-sm80.json\" > \"$L/gemm-env-sm80.md\" 2>&1"
  tail -4 "$L/gemm-env-sm80.md"
fi
if has attention; then
  step attn_sm80 150 sh -c "CODA_ARCH=sm80 \"$P/bench_attention\" --json \"$L/attn-sm80.json\" > \"$L/attn-sm80.md\" 2>&1"
  grep -v "^CODA|" "$L/attn-sm80.md" | tail -24
  step attn_sm90 60 sh -c "\"$P/bench_attention\" --defaults --json \"$L/attn-sm90.json\" > \"$L/attn-sm90.md\" 2>&1"
  step sdpa_flash 150 sh -c "python3 bench/attention/sdpa.py --backend flash --json \"$L/sdpa_flash.json\" \"$L/attn-sm80.md\" \"$L/attn-sm90.md\" > \"$L/sdpa_flash.md\" 2>&1"
  cat "$L/sdpa_flash.md"
fi
if has block; then
  step block_sm80 180 sh -c "CODA_ARCH=sm80 \"$P/coda\" bench block d512 d2048 --fused --floor --csv > \"$L/block-sm80.csv\" 2> \"$L/block-sm80.err\""
  cat "$L/block-sm80.csv"; tail -3 "$L/block-sm80.err"
  step block_sm90 60 sh -c "\"$P/coda\" bench block d512 d2048 --fused --floor --csv > \"$L/block-sm90.csv\" 2> \"$L/block-sm90.err\""
  cat "$L/block-sm90.csv"
fi
if has train; then
  # the sm80 kernels of the trainer compiled here, outside the timed runs
  step train_warm 170 env OUT="$L/train-warm" SHAPES=d512 VARIANTS="sm80:CODA_ARCH=sm80" STEPS=5 \
    BUDGET=160 bench/train/run.sh "$P" > "$L/train-warm.txt" 2>&1
  grep -E "^time:|error" "$L"/train-warm/coda-*.txt | head -5
  left=$(( BUDGET - ($(date +%s) - T0) - 20 ))
  pe=""; [ -f "$PEERS/train_torch2.py" ] && pe=$PEERS
  [ -z "$pe" ] && echo "no $PEERS/train_torch2.py: no torch.compile rows"
  # shellcheck disable=SC2086
  step train "$left" env OUT="$L/train" SHAPES="d512 1b" VARIANTS="sm80:CODA_ARCH=sm80|sm90:" \
    TORCH_MODES=compile LIGER_MODES= TORCH_MODES_8K= BUDGET="$left" \
    bench/train/run.sh "$P" $pe > "$L/train.txt" 2>&1
  tail -12 "$L/train.txt"
fi
python3 bench/sm80/table.py "$L" > "$L/sm80.md" 2> "$L/table.err"
cat "$L/sm80.md"; tail -3 "$L/table.err"
# the kernels compiled in this call: kept for the next call and sent back
# shellcheck disable=SC2010 # cache names are hex
ls "$P/cache" | grep -vxF -f "$L/cache-before.txt" | grep '^epi-.*\.cubin$' > "$L/cache-new.txt"
echo "kernels compiled in this call: $(wc -l < "$L/cache-new.txt")"
if [ -s "$L/cache-new.txt" ]; then
  (cd "$P/cache" && xargs cp -n -t "$KEEP" < "$L/cache-new.txt" && tar -czf "$O/sm80-cache.tgz" -T "$L/cache-new.txt")
fi
finish
