#!/bin/bash
# Every GPU check and measurement of the project, on a machine with an sm_90
# GPU, from the repository root:
#
#   tests/gpu/run_all.sh PACK_DIR [STAGE ...]
#
# PACK_DIR is the gpu/ folder of tests/gpu/pack_all.sh's archive: the
# binaries of a CUDA build (tests/gpu/test_*_gpu, tests/test_train_device,
# coda, the benchmarks) and the kernel cache (cache/) compiled on the build
# machine, so nothing compiles here. Logs go to $OUT (or ./gpu-logs).
# Stages, in this order (default: tests train block, about 7
# minutes; each stage has its own time limit):
#   tests     every GPU test (GEMM, epilogue programs, attention, block
#             plans, plan runs captured into CUDA graphs, debug mode, the
#             KV-cache decoder, the coda run examples)
#   sm80      the sm80 path (mma.sync + cp.async) forced on this GPU
#             (CODA_ARCH=sm80): every epilogue program in all four operand
#             layouts, bf16 and f16, ragged shapes, against the CPU and fp64
#             references (test_epilogue_gpu --layouts), the plain GEMM
#             through the same kernel, a map, a copy and the attention
#             forward; then the attention test (the mma.sync variants, the
#             others refused by name), the block plans, graphs, the decoder
#             (no one-kernel step, no programmatic launch), the
#             optimizer, the trainer's device test and the training smoke
#             test on that path. The kernels of the runs after the
#             first are not all in the pack: NVRTC compiles the missing
#             ones for this GPU (sm_90 without wgmma), minutes the first
#             time
#   train     tests/gpu/train_gpu_smoke.sh (loss falls, determinism, GPU vs
#             CPU, resume, throughput)
#   block     coda bench block, all configurations (fused, unfused, floor,
#             peak memory); with bench/block/baseline_torch.py present also
#             PyTorch on the same blocks, and torch_peak.py
#   fold      coda bench block all --fused --steps with and without --fold
#             (row finishers folded into the consumer GEMMs vs separate
#             launches): fold.csv / nofold.csv, per-step times in *.err
#   grad      coda bench block all --fused --grad-bf16 (the GEMM weights'
#             gradients in bf16, as PyTorch's bf16 block keeps them):
#             block-grad-bf16.csv; after the block stage, block.md gains
#             the column "peak MiB (bf16 weight grads)"
#   fused     bench_fused (fused GEMMs vs plain and cuBLAS + separate
#             kernels), then the example programs and built-ins against
#             the plain GEMM at 8192 x 4096 x 4096 (tests/gpu/fused_programs.sh);
#             with wheels in .whl/ also quack_fused.py
#   attention bench_attention and PyTorch SDPA at the same shapes
#   gemm      bench_gemm (our GEMM vs cuBLAS, 27 shapes)
#   generate  coda generate --device gpu --bench: the KV-cache decoder's
#             prefill and decode rates at the 1.1 B shape, batch 1 and 16
#             (generate.txt)
#   dp        tests/gpu/train_dp_gpu.sh (needs two GPUs)
#   sanitize  compute-sanitizer (memcheck, racecheck, synccheck, initcheck)
#             over every kernel variant of the GEMM, epilogue, attention
#             and decode tests at minimal shapes, the plan, graph and bf16
#             AdamW tests and the trainer's device test with both heads,
#             keep-logits included
#             (tests/gpu/sanitize.sh: 38 runs, each with its budget;
#             SANITIZE_RUNS selects a part that fits a call of 10 minutes,
#             e.g. SANITIZE_RUNS="memcheck/*")
#   kill      tests/gpu/train_kill_gpu.sh: kill -9 of coda train --device
#             gpu at random moments, saves included, each resumed; the
#             final checkpoint must equal an uninterrupted run's
#             (KILL_COUNT kills, default 20; SHAPE small | d512 | 1b)
#   fault     tests/gpu/fault_gpu.sh: the kills at the small shape (60)
#             and at the 1.1 B shape (3) while the sanitize stage's runs go
#             on beside them, about 8 minutes (fault.log)
#   python    python/tests with the pack's lib/libcoda.so.0 (pack_shared.sh):
#             numpy and torch on the CPU backend, and the CUDA tests of the
#             torch ops and of apply_to_llama (needs torch with CUDA and
#             transformers)
#   hfbench   bench/hf_llama/bench_hf_llama.py at the 1.1 B shape: HF Llama
#             training step eager, torch.compile, Liger (when importable),
#             coda-patched, coda-patched + torch.compile
# SKIP_STEPS="NAME ..." skips those steps (the names the log prints after
# "=="), e.g. for a call that goes on where one cut short stopped.
# Order: correctness first, so the most important results come first.
set -u
P=${1:?usage: tests/gpu/run_all.sh PACK_DIR [STAGE ...]}
shift
STAGES=${*:-tests train block}
has() { case " $STAGES " in *" $1 "*) return 0 ;; esac; return 1; }
L=${OUT:-gpu-logs}
mkdir -p "$L"
export CODA_CACHE_DIR=$P/cache
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$L/gpu-tests.log"
status=0
step() { # NAME TIMEOUT CMD...: runs a check, records its exit status
  local name=$1 t=$2; shift 2
  case " ${SKIP_STEPS:-} " in *" $name "*) echo "== $name: skipped (SKIP_STEPS)"; return 0 ;; esac
  echo "== $name: $*" | tee -a "$L/gpu-tests.log"
  local t0=$SECONDS
  timeout -k 5 "$t" "$@" >> "$L/gpu-tests.log" 2>&1
  local rc=$?
  echo "== $name: exit $rc ($((SECONDS - t0)) s)" | tee -a "$L/gpu-tests.log"
  tail -2 "$L/gpu-tests.log" | head -1
  [ $rc -eq 0 ] || status=1
}
if has tests; then
  step gemm 60 "$P/tests/gpu/test_gemm_gpu"
  step epilogue 60 "$P/tests/gpu/test_epilogue_gpu"
  step attention 100 "$P/tests/gpu/test_attention_gpu"
  step plan 90 "$P/tests/gpu/test_plan_gpu"
  step graph 60 "$P/tests/gpu/test_graph_gpu"
  step debug_sync 30 "$P/tests/gpu/test_debug_sync_gpu"
  step decode 120 "$P/tests/gpu/test_decode_gpu"
  step optim 30 "$P/tests/gpu/test_optim_gpu"
  step run_user_program 30 "$P/coda" run programs/examples/geglu_scaled.coda --gpu --m 4096 --n 4096 --k 2048
  step run_builtin 30 "$P/coda" run --builtin llama_swiglu_bwd --gpu --m 4096 --n 2048 --k 2048
  # whole operators in one file: each pass its own kernel (docs/language.md)
  step run_zloss 60 "$P/coda" run programs/examples/zloss.coda --gpu --m 2048 --n 4096 --k 1024 \
    --range tgt=-1:4095 --strict
  step run_qknorm_applied 30 "$P/coda" run programs/examples/qknorm_applied.coda --gpu --m 8192 --n 64 --k 2048
  step run_dyt_total 30 "$P/coda" run programs/examples/dyt_bwd_total.coda --gpu --m 4096 --n 2048 --k 2048
fi
if has sm80; then
  step sm80_epilogue 400 env CODA_ARCH=sm80 "$P/tests/gpu/test_epilogue_gpu" --layouts
  step sm80_attention 200 env CODA_ARCH=sm80 "$P/tests/gpu/test_attention_gpu"
  step sm80_plan 300 env CODA_ARCH=sm80 "$P/tests/gpu/test_plan_gpu"
  step sm80_graph 200 env CODA_ARCH=sm80 "$P/tests/gpu/test_graph_gpu"
  step sm80_decode 300 env CODA_ARCH=sm80 "$P/tests/gpu/test_decode_gpu"
  step sm80_optim 60 env CODA_ARCH=sm80 "$P/tests/gpu/test_optim_gpu"
  # the trainer on that path: every family's step against the CPU plan
  # engine, then the training smoke test (loss falls, determinism, GPU vs CPU)
  step sm80_train_device 200 env CODA_ARCH=sm80 "$P/tests/test_train_device"
  step sm80_train_smoke 200 env CODA_ARCH=sm80 OUT="$L/sm80-smoke" tests/gpu/train_gpu_smoke.sh \
    "$P" "$P/cache"
fi
if has train; then
  echo "== train smoke" | tee -a "$L/gpu-tests.log"
  timeout -k 5 170 tests/gpu/train_gpu_smoke.sh "$P" "$P/cache" > "$L/train-smoke.out" 2>&1 || status=1
  tail -15 "$L/train-smoke.out"
fi
if has block; then
  step block 150 sh -c "\"$P/coda\" bench block all --csv > \"$L/block.csv\""
  cat "$L/block.csv"
  if [ -f bench/block/baseline_torch.py ]; then
    BASELINE_OUT=$L timeout -k 5 300 python3 bench/block/baseline_torch.py seed-6L-512 gpt2s-768 \
      llama1b-2048 llama8b-4096 > "$L/torch.log" 2>&1 || status=1
    OUT=$L timeout -k 5 240 python3 bench/block/torch_peak.py > "$L/torch_peak.log" 2>&1 || status=1
    python3 bench/block/plot_block.py --csv "$L/block.csv" --baseline "$L/baseline.json" \
      --peak "$L/torch_peak.json" --md "$L/block.md" --png "$L/block.png" > /dev/null 2>&1 &&
      cat "$L/block.md"
  fi
fi
if has fold; then
  step nofold 150 sh -c "\"$P/coda\" bench block all --fused --steps --csv > \"$L/nofold.csv\" 2> \"$L/nofold.err\""
  step fold 150 sh -c "\"$P/coda\" bench block all --fused --steps --fold --csv > \"$L/fold.csv\" 2> \"$L/fold.err\""
  cut -d, -f1,10-12 "$L/nofold.csv"
  cut -d, -f1,10-12 "$L/fold.csv"
fi
if has grad; then
  step grad_bf16 150 sh -c "\"$P/coda\" bench block all --fused --grad-bf16 --csv > \"$L/block-grad-bf16.csv\""
  cut -d, -f1,12,21,32 "$L/block-grad-bf16.csv"
  if [ -f "$L/block.csv" ]; then # one table: the default rows, the bf16-gradient peak beside them
    cat "$L/block.csv" "$L/block-grad-bf16.csv" > "$L/block-both.csv"
    python3 bench/block/plot_block.py --csv "$L/block-both.csv" --baseline "$L/baseline.json" \
      --peak "$L/torch_peak.json" --md "$L/block.md" --png "$L/block.png" > /dev/null 2>&1 &&
      cat "$L/block.md"
  fi
fi
if has fused; then
  step fused 150 sh -c "\"$P/bench_fused\" > \"$L/bench_fused.md\""
  cat "$L/bench_fused.md"
  step fused_programs 120 sh -c "\"$P/bench_fused\" $(tests/gpu/fused_programs.sh) > \"$L/bench_fused_programs.md\""
  cat "$L/bench_fused_programs.md"
  if ls .whl/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/coda-site .whl/*.whl > "$L/pip.log" 2>&1
    PYTHONPATH=/tmp/coda-site:/tmp/coda-site/nvidia_cutlass_dsl/python_packages PYTHONUNBUFFERED=1 \
      timeout -k 5 200 python3 bench/fused/quack_fused.py --budget-s 140 > "$L/quack_fused.md" \
      2> "$L/quack_fused.err" || status=1
    cat "$L/quack_fused.md"
  fi
fi
if has attention; then
  step attention_bench 100 sh -c "\"$P/bench_attention\" > \"$L/attention.md\""
  timeout -k 5 100 python3 bench/attention/sdpa.py "$L/attention.md" > "$L/sdpa.md" 2>&1 || status=1
  cat "$L/sdpa.md"
fi
if has gemm; then
  step gemm_bench 300 sh -c "\"$P/bench_gemm\" > \"$L/gemm.md\""
  tail -32 "$L/gemm.md"
fi
if has generate; then
  step generate 300 sh -c "\"$P/coda\" generate --device gpu --bench --shape 1.1b --batches 1,16 > \"$L/generate.txt\""
  cat "$L/generate.txt"
fi
if has python; then
  step python 400 env CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" \
    PYTHONUNBUFFERED=1 python3 -m pytest -q -p no:cacheprovider -rs python/tests
fi
if has hfbench; then
  CODA_LIBRARY="$P/lib/libcoda.so.0" PYTHONPATH="$PWD/python:${PYTHONPATH:-}" PYTHONUNBUFFERED=1 \
    timeout -k 5 590 python3 bench/hf_llama/bench_hf_llama.py --shape 1b --out "$L" > "$L/hf_llama.md" 2>&1 ||
    status=1
  cat "$L/hf_llama.md"
fi
if has dp; then
  OUT=$L timeout -k 5 300 tests/gpu/train_dp_gpu.sh "$P" > /dev/null 2>&1 || status=1
  tail -12 "$L/train-dp.log"
fi
if has kill; then
  # its own budget (BUDGET, default 480 s) stops the kills early and
  # finishes the run; the outer limit is above it
  OUT=$L timeout -k 5 590 tests/gpu/train_kill_gpu.sh "$P" "${KILL_COUNT:-20}" > /dev/null 2>&1 || status=1
  tail -8 "$L/train-kill.log"
fi
if has fault; then
  # its own limits: the kills within 400 s, the sanitizers within 450 s
  OUT=$L timeout -k 5 590 tests/gpu/fault_gpu.sh "$P" > /dev/null 2>&1 || status=1
  cat "$L/fault.log"
fi
if has sanitize; then
  # SANITIZE_RUNS picks the runs (tests/gpu/sanitize.sh: the budgets of
  # all sum to about 53 minutes; each of its seven suggested parts fits one
  # call); a run that hits its own budget is reported there as not clean
  SANITIZE_BUDGET_SCALE=${SANITIZE_BUDGET_SCALE:-1} timeout -k 5 590 tests/gpu/sanitize.sh "$P" "$P/cache" > "$L/sanitize.out" 2>&1 || status=1
  tail -20 "$L/sanitize.out"
fi
echo "run_all: exit $status"
exit $status
