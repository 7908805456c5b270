#!/bin/bash
# 2026-12-06 (e), call 1: the merged tree's GPU paths, and the AdamW pass
# that walks its segment table once per thread.
#  1. every GPU test and the training smoke test on the tree with the new
#     AdamW kernels (tests/gpu/run_all.sh tests train): the one-file
#     operators run by coda run --gpu, the signature checks, the Qwen3 plan
#     (smoke stage h), test_optim_gpu bit for bit against the host;
#  2. bench/optim/adamw_variants at the 1b layout: every variant's bits
#     against the kernel as it was and a sample against the CPU update;
#  3. bench/train/run.sh at 1b and d512, the library before the change
#     (the HEAD build's libcoda, through LD_LIBRARY_PATH) against after,
#     fp32 and bf16 optimizer state, two interleaved rounds with the step
#     profile, HF + Liger in the same call.
# Carries .carry/c7 (the pack with the change), .carry/c6lib (the HEAD
# build's libcoda.so.0), .carry/optim, .carry/peers, .whl/liger.
PACK=.carry/c7 source bench/gpu_env.sh
T0=$SECONDS
mkdir -p PK/before && gunzip -c .carry/c6lib/libcoda.so.0.gz > PK/before/libcoda.so.0
md5sum PK/before/libcoda.so.0 "$P/lib/libcoda.so.0" | sed "s|$PWD/||" | tee "$L/libs.txt"
cp .carry/c6lib/commit.txt "$L/commit-before.txt"
copy_bw
OUT=$L/tests timeout -k 5 290 tests/gpu/run_all.sh "$P" tests train > "$L/run_all.txt" 2>&1
echo "run_all rc=$? ($((SECONDS - T0)) s)"; grep -E "== .*exit|run_all:" "$L/run_all.txt" | tail -25
tail -12 "$L/tests/train-smoke.out"
timeout -k 5 150 .carry/optim/adamw_variants 1b > "$L/adamw_variants.md" 2>&1
echo "adamw_variants rc=$? ($((SECONDS - T0)) s)"; cat "$L/adamw_variants.md"
B="LD_LIBRARY_PATH=$PWD/PK/before:$LD_LIBRARY_PATH"
OUT=$L/train SHAPES="1b d512" ROUNDS=2 PROFILE=1 TORCH_MODES= TORCH_MODES_8K= \
  VARIANTS="before:$B|after:|before-bf16:$B --optimizer-state bf16|after-bf16:--optimizer-state bf16" \
  BUDGET=$((575 - (SECONDS - T0))) COMMIT="$COMMIT" bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/train.txt" 2>&1
echo "train rc=$? ($((SECONDS - T0)) s)"; tail -40 "$L/train/train.md"
cp "$L/train/train.json" "$O/train.json" 2>/dev/null
finish
