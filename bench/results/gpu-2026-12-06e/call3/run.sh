#!/bin/bash
# 2026-12-06 (e), call 3: the training step at 1b, the AdamW kernels of
# the tree (after) against the same tree built with 47c63ff's
# train_kernels.cu (before, .carry/c8lib, through LD_LIBRARY_PATH),
# interleaved over two rounds with the step profile, HF + Liger in the same
# call. (Call 1's step A/B did not run: its third variant's label,
# after-bf16, is refused by bench/train/run.sh.) Carries .carry/c8,
# .carry/c8lib, .carry/peers, .whl/liger.
PACK=.carry/c8 source bench/gpu_env.sh >/dev/null 2>&1
mkdir -p PK/before && python3 -c "import lzma,sys; open(sys.argv[2],'wb').write(lzma.open(sys.argv[1]).read())" .carry/c8lib/libcoda.so.0.xz PK/before/libcoda.so.0
B="LD_LIBRARY_PATH=$PWD/PK/before:$LD_LIBRARY_PATH"
OUT=$L/train SHAPES="1b" ROUNDS=2 PROFILE=1 TORCH_MODES= TORCH_MODES_8K= VARIANTS="before:$B|after:" BUDGET=200 COMMIT="$COMMIT" bash bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/train.txt" 2>&1
echo "train rc=$? ($SECONDS s)"; tail -5 "$L/train.txt"; cat "$L/train/train.md" 2>/dev/null | head -60
cp "$L/train/train.json" "$OUT/" 2>/dev/null
finish
