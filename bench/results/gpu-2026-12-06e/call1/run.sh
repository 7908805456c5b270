#!/bin/bash
# 2026-12-06 (e), call 1: the merged tree's GPU paths, the AdamW pass that
# walks its segment table once per thread, and the block before/after the
# signature and plan-step-kind changes.
#  1. every GPU test and the training smoke test on the tree with the new
#     AdamW kernels (tests/gpu/run_all.sh tests train): the one-file
#     operators run by coda run --gpu, the signature checks, the Qwen3 plan
#     (smoke stage h), test_optim_gpu bit for bit against the host;
#  2. `coda bench block all --fused --tuned --floor` of the tree before the
#     signature and plan-step-kind changes (fd5217e: its coda and libcoda,
#     .carry/c5lib) and after (this pack), one kernel cache (this pack's
#     holds the other's kernels);
#  3. bench/optim/adamw_variants at the 1b layout: every variant's bits
#     against the kernel as it was and a sample against the CPU update;
#  4. bench/train/run.sh at 1b, the library before the AdamW change (this
#     tree built with 47c63ff's train_kernels.cu, .carry/c8lib, through
#     LD_LIBRARY_PATH) against after,
#     interleaved, with the step profile, the bf16 optimizer state after,
#     HF + Liger in the same call.
# LIMIT (default 580 s) is the call's time: later parts shrink or drop.
# Carries .carry/c8 (tests/gpu/pack_shared.sh of the tree), .carry/c8lib
# (its libcoda.so.0 with the AdamW kernels as they were), .carry/c5lib,
# .carry/optim, .carry/peers, .whl/liger.
PACK=.carry/c8 source bench/gpu_env.sh
T0=$SECONDS
LIMIT=${LIMIT:-580} # seconds for the whole call: the later parts shrink or drop
mkdir -p PK/before && python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" .carry/c8lib/libcoda.so.0.xz PK/before/libcoda.so.0
mkdir -p PK/c5 && python3 -c "import tarfile,sys; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" .carry/c5lib/before.txz PK/c5; Q=$PWD/PK/c5/gpu
md5sum PK/before/libcoda.so.0 "$P/lib/libcoda.so.0" | sed "s|$PWD/||" | tee "$L/libs.txt"
cp .carry/c8lib/commit.txt "$L/commit-before-adamw.txt"; cp .carry/c5lib/commit.txt "$L/commit-before-block.txt"
copy_bw
OUT=$L/tests timeout -k 5 $((LIMIT < 400 ? 200 : 290)) tests/gpu/run_all.sh "$P" tests train > "$L/run_all.txt" 2>&1
echo "run_all rc=$? ($((SECONDS - T0)) s)"; grep -E "== .*exit|run_all:" "$L/run_all.txt" | tail -25
tail -12 "$L/tests/train-smoke.out"
blk() { # LABEL DIR DEADLINE
  [ $((SECONDS - T0)) -gt "$3" ] && { echo "$1 skipped (time)"; return 1; }
  LD_LIBRARY_PATH=$2/lib:$LD_LIBRARY_PATH timeout -k 5 90 "$2/coda" bench block all \
    --fused --tuned --floor --csv > "$L/block-$1.csv" 2> "$L/block-$1.err"
  echo "block $1 exit $? ($((SECONDS - T0)) s)"
}
blk before "$Q" $((LIMIT - 170)) && blk after "$P" $((LIMIT - 85))
for f in before after; do [ -f "$L/block-$f.csv" ] && { echo "== $f"; cut -d, -f1-12 "$L/block-$f.csv" | head -8; }; done
if [ $((LIMIT - (SECONDS - T0))) -gt 100 ]; then
  left=$((LIMIT - (SECONDS - T0) - 20)); [ $left -gt 120 ] && left=120
  timeout -k 5 $left .carry/optim/adamw_variants 1b > "$L/adamw_variants.md" 2>&1
  echo "adamw_variants rc=$? ($((SECONDS - T0)) s)"; cat "$L/adamw_variants.md"
fi
B="LD_LIBRARY_PATH=$PWD/PK/before:$LD_LIBRARY_PATH"
OUT=$L/train SHAPES="1b" ROUNDS=2 PROFILE=1 TORCH_MODES= TORCH_MODES_8K= \
  VARIANTS="before:$B|after:|after-bf16:--optimizer-state bf16" \
  BUDGET=$((LIMIT - (SECONDS - T0))) COMMIT="$COMMIT" bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/train.txt" 2>&1
echo "train rc=$? ($((SECONDS - T0)) s)"; tail -40 "$L/train/train.md"
cp "$L/train/train.json" "$O/train.json" 2>/dev/null
finish
