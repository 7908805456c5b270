#!/bin/bash
# The training benchmark: `coda train --device gpu` and the peers at the
# same shapes, in one GPU call, printed as one table (tokens/s, ms/step,
# MFU at 989 TFLOP/s, peak device memory, time to the first step) and
# written as train.json beside it.
#
#   bench/train/run.sh PACK_DIR [PEERS_DIR] [WHEELS_DIR]
#
# PACK_DIR holds `coda` and its kernel cache (tests/gpu/pack_shared.sh or
# pack_all.sh). PEERS_DIR, when given, holds the PyTorch scripts of the
# benchmark environment (train_torch2.py: eager, torch.compile bf16,
# torch.compile with fp32 master weights + autocast; peers_train.py: Hugging
# Face LlamaForCausalLM with Liger kernels); WHEELS_DIR the liger-kernel
# wheel. Shapes (random-order text tokens for coda, random tokens for the
# peers; coda: STEPS steps, the first 3 untimed, median step; peers: 20
# timed steps after 3 warm-up):
#   d512:  6 layers, d 512, ffn 2048, 8/8 heads, vocab 32768, 16 x 1024
#   1b:    16 layers, d 2048, ffn 8192, 32/8 heads, vocab 32768, 4 x 2048
#   1b-8k: the 1b model at 4 x 8192 (the CODA paper's benchmark shape)
# and the other families at about 1B (their peers: bench/train/hf_family.py,
# Hugging Face's model class of the family, eager, compiled and with Liger's
# patch where Liger has one):
#   qwen3-1.7b: 28 layers, d 2048, ffn 6144, 16/8 heads of 128, vocab
#               151936, tied, 4 x 2048 (Qwen3-1.7B's shape)
#   gpt2-774m:  36 layers, d 1280, ffn 5120, 20 heads, vocab 50304, tied,
#               8 x 1024 (GPT-2 774M, the vocabulary padded as llm.c pads it)
#   gemma3-1b:  26 layers, d 1152, ffn 6912, 8/2 heads of 128, vocab 262144,
#               tied, windows of 512 on five layers of six, 4 x 2048 (Gemma 3
#               1B's shape but for its 4/1 heads of 256: the training
#               attention takes heads up to 128)
# Environment:
#   SHAPES="d512 1b 1b-8k"  the shapes to run, in this order
#   VARIANTS="base:|keep:--keep-logits 1|off:CODA_SOME_KNOB=0"
#            label:words pairs separated by '|' (leading NAME=VALUE words
#            set the environment, the rest are coda train flags): coda runs
#            once per variant per shape, the variants of a shape one after
#            the other (A/B interleaved), each logging to
#            coda-SHAPE-LABEL.txt; unset: one run, coda-SHAPE.txt
#   ROUNDS=1     repeat the coda runs (variant order reversed on even rounds;
#                rounds after the first log to coda-SHAPE[-LABEL].rN.txt)
#   EXTRA="..."  words added to every coda run (e.g. "--keep-logits 1")
#   PROFILE=1    adds `--profile --profile-warmup 3` (the per-phase table,
#                over the same steps as the timing; table.py collects it)
#   STEPS=23     coda's steps per run
#   TORCH_MODES=eager,compile,compile_amp  train_torch2.py at d512 and 1b
#   TORCH_MODES_8K=compile   train_torch2.py at 1b-8k (every mode compiles
#                anew at 8192 tokens a sequence: one keeps the call short;
#                empty: none)
#   LIGER_MODES=liger        peers_train.py at every shape
#   FAMILY_MODES=eager,compile,liger  hf_family.py at the family shapes
#   BUDGET=540   seconds for the whole call (a 600 s device command less
#                its unpacking): every run's time limit is cut to what is
#                left (15 s kept for the table); a run with no time left is
#                skipped, and the table says so
#   COMMIT       the commit to record (default: `git rev-parse HEAD`, where
#                the copy has its .git)
# Writes $OUT (default ./train-logs): coda-*.txt, torch*.log, peers.log,
# runs.tsv (every run: rc, wall time, command), meta.tsv (GPU, date,
# commit, command), train.md and train.json (bench/train/table.py). coda's
# time to the first step and time per checkpoint save are the trainer's own
# counts (the summary's `time:` line).
#
# The whole table:  bench/train/run.sh PACK_DIR PEERS_DIR WHEELS_DIR
# A/B of two coda variants with the profile, no peers:
#   SHAPES="1b 1b-8k" VARIANTS="base:|new:--some-flag 1" PROFILE=1 \
#     bench/train/run.sh PACK_DIR
# (ROUNDS=2 for differences of a few percent: base new new base.)
set -u
P=${1:?usage: bench/train/run.sh PACK_DIR [PEERS_DIR] [WHEELS_DIR]}
PEERS=${2:-}
WHL=${3:-}
L=${OUT:-train-logs}
T0=$(date +%s)
BUDGET=${BUDGET:-540}
SHAPES=${SHAPES:-d512 1b 1b-8k}
ROUNDS=${ROUNDS:-1}
STEPS=${STEPS:-23}
mkdir -p "$L"
declare -A SHAPE=(
  [d512]="--layers 6 --dim 512 --heads 8 --kv-heads 8 --ffn 2048 --vocab 32768 --tied 0 --seq 1024 --batch 16"
  [1b]="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32768 --tied 0 --seq 2048 --batch 4"
  [1b-8k]="--layers 16 --dim 2048 --heads 32 --kv-heads 8 --ffn 8192 --vocab 32768 --tied 0 --seq 8192 --batch 4"
  [qwen3-1.7b]="--family qwen3 --layers 28 --dim 2048 --heads 16 --kv-heads 8 --head-dim 128 --ffn 6144 --vocab 151936 --tied 1 --seq 2048 --batch 4"
  [gpt2-774m]="--family gpt2 --layers 36 --dim 1280 --heads 20 --kv-heads 20 --ffn 5120 --vocab 50304 --tied 1 --seq 1024 --batch 8"
  [gemma3-1b]="--family gemma3 --layers 26 --dim 1152 --heads 8 --kv-heads 2 --head-dim 128 --ffn 6912 --vocab 262144 --tied 1 --seq 2048 --batch 4 --sliding-window 512 --sliding-pattern 6"
)
# Each run's own limit (about twice its expected time on an H100), then cut
# to the budget left.
declare -A CAP=([d512]=60 [1b]=120 [1b-8k]=180 [qwen3-1.7b]=150 [gpt2-774m]=150 [gemma3-1b]=150)
for s in $SHAPES; do
  [ -n "${SHAPE[$s]:-}" ] || { echo "bench/train/run.sh: unknown shape '$s' (${!SHAPE[*]})" >&2; exit 2; }
done
# The variants: label:args pairs; labels name log files.
labels=() vargs=()
if [ -n "${VARIANTS:-}" ]; then
  IFS='|' read -r -a vlist <<< "$VARIANTS"
  for v in "${vlist[@]}"; do
    lab=${v%%:*}; a=""
    [ "$lab" != "$v" ] && a=${v#*:}
    lab=$(echo "$lab" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
    if ! [[ $lab =~ ^[A-Za-z0-9_.+]+$ ]]; then
      echo "bench/train/run.sh: variant label '$lab' (letters, digits, _ . + only)" >&2; exit 2
    fi
    labels+=("$lab"); vargs+=("$a")
  done
else
  labels=(""); vargs=("")
fi

# Seconds a run may take: its own limit, or what is left of the budget.
limit() {
  local left=$(( BUDGET - ($(date +%s) - T0) - 15 ))
  [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
}
# runs.tsv: kind shape label round rc wall_s log command
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >> "$L/runs.tsv"; }
since() { awk -v a="$1" -v b="$(date +%s%N)" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'; }

# What the table names: the GPU, the date, the commit, the call.
: > "$L/runs.tsv"
{
  printf 'gpu\t%s\n' "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)"
  printf 'date\t%s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  c=${COMMIT:-}
  if [ -z "$c" ] && c=$(git rev-parse HEAD 2>/dev/null); then
    git diff --quiet HEAD 2>/dev/null || c="$c (uncommitted changes)"
  fi
  printf 'commit\t%s\n' "$c"
  printf 'variants\t%s\n' "${VARIANTS:-}"
  printf 'command\t%s\n' "$(printf '%s="%s" ' SHAPES "$SHAPES" VARIANTS "${VARIANTS:-}" ROUNDS "$ROUNDS" \
    PROFILE "${PROFILE:-0}" EXTRA "${EXTRA:-}" STEPS "$STEPS")bench/train/run.sh $*"
} > "$L/meta.tsv"

export CODA_CACHE_DIR=$P/cache
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' \
  > "$W/corpus/docs"
"$P/coda" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" > /dev/null || exit 1
prof=""
[ "${PROFILE:-0}" = 1 ] && prof="--profile --profile-warmup 3"
nv=${#labels[@]}
for (( r = 1; r <= ROUNDS; r++ )); do
  for s in $SHAPES; do
    for (( j = 0; j < nv; j++ )); do
      i=$j
      [ $(( r % 2 )) = 0 ] && i=$(( nv - 1 - j ))  # ABBA: neither variant always runs first
      lab=${labels[$i]}
      log=coda-$s${lab:+-$lab}.txt
      [ "$r" -gt 1 ] && log=${log%.txt}.r$r.txt
      # a variant's leading NAME=VALUE words are its environment
      envs=() words=()
      for w in ${vargs[$i]}; do
        if [ ${#words[@]} = 0 ] && [[ $w =~ ^[A-Za-z_][A-Za-z0-9_]*= ]]; then envs+=("$w"); else words+=("$w"); fi
      done
      # shellcheck disable=SC2206
      cmd=("$P/coda" train --device gpu ${SHAPE[$s]} --data "$W/data" --val-every 0
           --val-batches 0 --steps "$STEPS" --warmup 3 --out "$W/run" $prof ${EXTRA:-} "${words[@]}")
      lim=$(limit "${CAP[$s]}")
      if [ "$lim" -lt 5 ]; then
        record coda "$s" "$lab" "$r" skipped 0 "$log" "${envs[*]} ${cmd[*]}"
        continue
      fi
      t0=$(date +%s%N)
      env "${envs[@]}" timeout -k 10 "$lim" "${cmd[@]}" > "$L/$log" 2>&1
      rc=$?
      record coda "$s" "$lab" "$r" "$rc" "$(since "$t0")" "$log" "${envs[*]} ${cmd[*]}"
      rm -rf "$W/run"  # a 1b checkpoint is 13 GB
    done
  done
done

# The peers: one process per script and mode list (each imports torch and
# compiles anew); name d512/1b and 1b-8k separately where their modes differ.
peer() { # kind cap log script shapes modes
  local lim t0 rc
  [ -n "$5" ] && [ -n "$6" ] || return 0
  lim=$(limit "$2")
  if [ "$lim" -lt 5 ]; then
    record "$1" "$5" "$6" 1 skipped 0 "$3" "python3 $4 $5 $6"
    return 0
  fi
  t0=$(date +%s%N)
  OUT=$L PYTHONUNBUFFERED=1 timeout -k 10 "$lim" python3 "$PEERS/$4" "$5" "$6" > "$L/$3" 2>&1
  rc=$?
  record "$1" "$5" "$6" 1 "$rc" "$(since "$t0")" "$3" "python3 $4 $5 $6"
  # each script writes one JSON file named by itself: keep one per process
  for j in train_torch peers_train hf_family; do
    [ -f "$L/$j.json" ] && mv -f "$L/$j.json" "$L/${3%.log}.json"
  done
  return 0
}
if [ -n "$PEERS" ]; then
  if [ -n "$WHL" ] && ls "$WHL"/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/peer-site \
      "$WHL"/*.whl > "$L/pip.log" 2>&1 && export PYTHONPATH=/tmp/peer-site:${PYTHONPATH:-}
  fi
  small="" big="" all=""
  for s in $SHAPES; do
    case $s in qwen3-*|gpt2-*|gemma3-*) continue ;; esac  # hf_family.py's, below
    all=${all:+$all,}$s
    if [ "$s" = 1b-8k ]; then big=$s; else small=${small:+$small,}$s; fi
  done
  peer torch 330 torch.log train_torch2.py "$small" "${TORCH_MODES-eager,compile,compile_amp}"
  peer peers 150 peers.log peers_train.py "$all" "${LIGER_MODES-liger}"
  peer torch 180 torch-1b-8k.log train_torch2.py "$big" "${TORCH_MODES_8K-compile}"
fi
# The family shapes' peers: the project's own script (Hugging Face's model
# class of each family), with Liger from WHEELS_DIR when carried.
fam=""
for s in $SHAPES; do
  case $s in qwen3-*|gpt2-*|gemma3-*) fam=${fam:+$fam,}$s ;; esac
done
if [ -n "$fam" ] && [ "${FAMILY_MODES-x}" != "" ]; then
  if [ -n "$WHL" ] && [ -z "$PEERS" ] && ls "$WHL"/*.whl > /dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/peer-site \
      "$WHL"/*.whl > "$L/pip.log" 2>&1 && export PYTHONPATH=/tmp/peer-site:${PYTHONPATH:-}
  fi
  PEERS=$PWD/bench/train peer peers 300 peers-family.log hf_family.py "$fam" \
    "${FAMILY_MODES:-eager,compile,liger}"
fi
python3 bench/train/table.py "$L" | tee "$L/train.md"
