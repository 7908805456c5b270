#!/bin/bash
# 2026-12-06 (c), call 1, on the merged tree (the bf16 optimizer state, the
# Qwen3 family on the host, the house's splits):
#  1. GPU tests touched by the merge: test_optim_gpu (the device bf16
#     AdamW bit for bit against the host's), test_gemm_gpu (GEMM host side
#     cut into pieces), test_plan_gpu (the Llama and GPT-2 block plans in
#     named phases), test_epilogue_gpu (the kinds table read by the CUDA
#     emitters), test_attention_gpu with cuDNN (its graph builder split);
#  2. the bf16 state's checkpoint path: a save at step 10 leaves a 20-step
#     run's final checkpoint byte-identical;
#  3. loss curves, fp32 against bf16 state: 2000 steps of a 6-layer d 512
#     byte-level model on Python's standard library as text (16 x 512
#     tokens a step, validation every 100 steps);
#  4. bench/train/run.sh, fp32 against bf16 state with the step profile,
#     interleaved over two rounds at 1b and d512, with HF + Liger (bf16
#     weights and bf16 AdamW state) in the same call.
# Carries .carry/c2 (tests/gpu/pack_shared.sh), .carry/peers, .whl/liger.
source bench/results/gpu-2026-12-06c/common.sh
for t in test_optim_gpu:40 test_gemm_gpu:60 test_plan_gpu:80 test_epilogue_gpu:80; do
  n=${t%%:*}; timeout ${t##*:} "$P/tests/gpu/$n" > "$L/$n.log" 2>&1; echo "$n rc=$?"; tail -2 "$L/$n.log"
done
CODA_ATTENTION=cudnn timeout 90 "$P/tests/gpu/test_attention_gpu" > "$L/test_attention_gpu.log" 2>&1
echo "test_attention_gpu (CODA_ATTENTION=cudnn) rc=$?"; tail -2 "$L/test_attention_gpu.log"
W=$(mktemp -d); mkdir -p "$W/docs"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' > "$W/docs/docs"
timeout 60 "$P/coda" train --prepare --corpus "$W/docs" --data "$W/ddata" --out "$W/prep0" > /dev/null 2>&1
SMALL="--layers 2 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --seq 128 --vocab 256 --batch 8 --data $W/ddata --val-every 0 --val-batches 0"
timeout 60 "$P/coda" train --device gpu $SMALL --steps 20 --warmup 5 --seed 13 --optimizer-state bf16 --out "$W/g1" --quiet > "$L/g1.txt" 2>&1
echo "g1 rc=$?"
timeout 60 "$P/coda" train --device gpu $SMALL --steps 20 --warmup 5 --seed 13 --optimizer-state bf16 --save-every 10 --out "$W/g2" --quiet > "$L/g2.txt" 2>&1
echo "g2 rc=$?"
cmp "$W/g1/checkpoint.safetensors" "$W/g2/checkpoint.safetensors" && echo "bit-identical bf16-state checkpoints with and without a save at step 10"
cp "$W/g1/loss.csv" "$L/g1-loss.csv"
mkdir -p "$W/corpus"
SL=$(python3 -c "import sysconfig; print(sysconfig.get_paths()['stdlib'])")
find "$SL" -name '*.py' -size -300k | sort | xargs cat > "$W/corpus/stdlib.txt"
ls -la "$W/corpus" | tee "$L/lc-corpus.txt"
timeout 120 "$P/coda" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" > "$L/lc-prep.txt" 2>&1
for s in fp32 bf16; do
  timeout 100 "$P/coda" train --device gpu --layers 6 --dim 512 --heads 8 --kv-heads 8 --ffn 2048 --vocab 256 \
    --seq 512 --batch 16 --steps 2000 --warmup 100 --lr 1e-3 --val-every 100 --val-batches 8 --seed 3 \
    --data "$W/data" --optimizer-state $s --out "$W/lc-$s" --quiet > "$L/lc-$s.txt" 2>&1
  echo "loss curve $s rc=$?"; tail -2 "$L/lc-$s.txt"; cp "$W/lc-$s/loss.csv" "$L/lc-$s.csv"
done
SHAPES="1b d512" ROUNDS=2 PROFILE=1 BUDGET=190 VARIANTS="fp32:|bf16:--optimizer-state bf16" \
  TORCH_MODES= OUT=$L/ab bench/train/run.sh "$P" .carry/peers .whl/liger > "$L/ab.log" 2>&1
echo "ab rc=$?"; cat "$L/ab/train.md"
finish
