#!/bin/bash
# kill -9 of `coda train --device gpu` at random moments, checkpoint saves
# included; every resume must end in the checkpoint of an uninterrupted run,
# byte for byte. From the repository root, on a machine with an sm_90 GPU:
#
#   tests/gpu/train_kill_gpu.sh PACK_DIR [KILLS [BUDGET_S]]
#
# PACK_DIR holds the coda binary of a CUDA build (PACK_DIR/coda; the gpu/
# folder of tests/gpu/pack_all.sh's archive, or a build directory) and, if
# present, the kernel cache PACK_DIR/cache (exported as CODA_CACHE_DIR
# unless already set). KILLS (default 20) is how many runs are killed;
# BUDGET_S (default $BUDGET, else 480) the seconds for everything.
#
#  1. The corpus: the repository's Markdown, prepared once into byte-token
#     shards.
#  2. The reference: the run uninterrupted, STEPS steps saving every
#     SAVE_EVERY steps, timed; the script watches its checkpoint's temporary
#     file, so the time to the first save (the start-up and SAVE_EVERY
#     steps) and a save's length are measured in the same run (a 1-step run
#     measures the start-up instead where no save was seen: a save shorter
#     than the 2 ms the script polls at).
#  3. The kills: the same run is started (resumed from its last checkpoint
#     once there is one, as `--resume OUT/checkpoint.safetensors`) and
#     killed with SIGKILL, KILLS times, in turn: (a) at a random moment of
#     the start-up; (b) at a random moment of the steps and saves that
#     follow it (up to 2 x SAVE_EVERY steps and a save); (c) once a save has
#     begun (a new temporary file of the checkpoint appeared: one a killed
#     save left behind does not count), at a random moment of a save's
#     length. A kill counts as inside a save when such a new temporary file
#     is there after it (the summary gives the count). Then the run is
#     resumed to its end without a kill.
#  4. The final checkpoint must equal the reference's (cmp), every run
#     that was not killed must have exited 0, and no temporary file of the
#     checkpoint may be left (each save removes those a killed save left).
#
# Environment:
#   DEVICE      gpu (default) | cpu: the same logic on the CPU backend, to
#               check the script itself on a machine without a GPU
#   SHAPE       small (default: 2 layers, d 256, 4/2 heads, ffn 512, seq
#               128, batch 8) | d512 (--config d512, batch 8) | 1b
#               (--config 1b, batch 1, seq 2048: saves of 13 GB, 15-19 s
#               each; STEPS 6, SAVE_EVERY 3 and RUN_TIMEOUT 300 unless given;
#               use a few kills, e.g. SHAPE=1b ... PACK_DIR 3 300)
#   TRAIN_ARGS  model and batch flags instead of SHAPE's
#   RANKS       data-parallel ranks (default 1): --ranks RANKS, one GPU each
#               (with DEVICE=cpu, CPU processes). Each run starts in a
#               process group of its own and the kill hits the launcher
#               alone: its ranks must end with it (within 20 s) before the
#               next run starts, else FAIL
#   STEPS       steps of the run (default 300); SAVE_EVERY (default 11)
#   BUDGET      seconds for everything (default 480): when it runs out, the
#               kills stop early and the run is resumed to its end (the
#               summary says how many kills there were)
#   RUN_TIMEOUT seconds for one uninterrupted run (default 240)
#   KILL_SEED   seed of the random delays (default: from the clock; printed)
#   OUT         where the log goes ($OUT/train-kill.log) and the runs are
#               kept ($OUT/train-kill/: each run's log; the checkpoints and
#               shards too after a FAIL); default: a temporary directory,
#               removed at the end
# Prints one line per kill and a final "train_kill: PASS ..." or
# "train_kill: FAIL ..."; exit status 0 on PASS, 1 on FAIL, 2 on a usage
# or set-up error.
set -u
cd "$(dirname "$0")/../.." || exit 2
P=${1:?usage: tests/gpu/train_kill_gpu.sh PACK_DIR [KILLS [BUDGET_S]]}
KILLS=${2:-20}
BUDGET=${3:-${BUDGET:-480}}
DEVICE=${DEVICE:-gpu}
SHAPE=${SHAPE:-small}
# the 1.1 B shape saves 13 GB (15-19 s a save): two saves a run
if [ "$SHAPE" = 1b ]; then
  STEPS=${STEPS:-6} SAVE_EVERY=${SAVE_EVERY:-3} RUN_TIMEOUT=${RUN_TIMEOUT:-300}
fi
STEPS=${STEPS:-300}
SAVE_EVERY=${SAVE_EVERY:-11}
RUN_TIMEOUT=${RUN_TIMEOUT:-240}
KILL_SEED=${KILL_SEED:-$(($(date +%s) % 32768))}
CODA=$P/coda
RANKS=${RANKS:-1}
case $KILLS$STEPS$SAVE_EVERY$BUDGET$RUN_TIMEOUT$KILL_SEED$RANKS in
*[!0-9]*) echo "train_kill: KILLS, STEPS, SAVE_EVERY, BUDGET, RUN_TIMEOUT, KILL_SEED and RANKS are integers"; exit 2 ;;
esac
[ "$RANKS" -ge 1 ] || { echo "train_kill: RANKS >= 1"; exit 2; }
if [ "$STEPS" -lt 2 ] || [ "$SAVE_EVERY" -lt 1 ]; then echo "train_kill: STEPS >= 2 and SAVE_EVERY >= 1"; exit 2; fi
[ -x "$CODA" ] || { echo "train_kill: no executable $CODA"; exit 2; }
case $DEVICE in gpu | cpu) ;; *) echo "train_kill: DEVICE is gpu or cpu, not '$DEVICE'"; exit 2 ;; esac
if [ -z "${CODA_CACHE_DIR:-}" ] && [ -d "$P/cache" ]; then
  CODA_CACHE_DIR=$(cd "$P/cache" && pwd)
  export CODA_CACHE_DIR
fi
SHAPE_NAME=$SHAPE
if [ -n "${TRAIN_ARGS:-}" ]; then
  SHAPE_NAME="TRAIN_ARGS"
else
  case $SHAPE in
  small) TRAIN_ARGS="--layers 2 --dim 256 --heads 4 --kv-heads 2 --ffn 512 --seq 128 --vocab 256 --batch 8" ;;
  d512) TRAIN_ARGS="--config d512 --batch 8" ;;
  1b) TRAIN_ARGS="--config 1b --vocab 256 --batch 1 --seq 2048" ;;
  *) echo "train_kill: SHAPE is small, d512 or 1b, not '$SHAPE'"; exit 2 ;;
  esac
fi
if [ -n "${OUT:-}" ]; then
  mkdir -p "$OUT" || exit 2
  W=$OUT/train-kill
  rm -rf "$W"
  mkdir -p "$W" || exit 2
  exec > >(tee "$OUT/train-kill.log") 2>&1
else
  W=$(mktemp -d) || exit 2
  trap 'rm -rf "$W"' EXIT
fi
T0=$SECONDS
RANDOM=$KILL_SEED
now_ms() { echo $((${EPOCHREALTIME/./} / 1000)); } # bash 5: no process
sleep_ms() { sleep "$(printf '%d.%03d' $(($1 / 1000)) $(($1 % 1000)))"; }
# a random integer in [0, n) for n up to 2^30
rand() { echo $(((RANDOM << 15 | RANDOM) % $1)); }
summary() { # PASS|FAIL TEXT
  echo "train_kill: $1 $2 (device $DEVICE, shape $SHAPE_NAME, ranks $RANKS, $STEPS steps saving every $SAVE_EVERY," \
    "seed $KILL_SEED, $((SECONDS - T0)) s)"
  if [ "$1" = PASS ]; then
    # the checkpoints and shards are kept under $OUT only on failure
    [ -z "${OUT:-}" ] || rm -rf "$W/ref" "$W/kill" "$W/startup" "$W/prep" "$W/data" "$W/corpus"
    # a ref and a kill checkpoint of 13 GB each at SHAPE=1b: freed before the next stage
    exit 0
  fi
  exit 1
}
# the step a checkpoint holds, from its header's "train.step" entry ("-" if none)
ck_step() {
  local s
  s=$(head -c 65536 "$1" 2>/dev/null | tr -c '[:print:]' '\n' | grep -o '"train.step":"[0-9]*"' | head -1 |
    tr -dc '0-9')
  echo "${s:--}"
}

echo "train_kill: $CODA train --device $DEVICE $TRAIN_ARGS --ranks $RANKS, $STEPS steps, --save-every $SAVE_EVERY," \
  "$KILLS kills, budget $BUDGET s, seed $KILL_SEED"

# 1. the corpus
mkdir -p "$W/corpus"
cat README.md docs/*.md | awk 'NF == 0 { if (!blank) print "%"; blank = 1; next } { blank = 0; print }' \
  > "$W/corpus/docs"
timeout -k 5 120 "$CODA" train --prepare --corpus "$W/corpus" --data "$W/data" --out "$W/prep" \
  > "$W/prepare.log" 2>&1 || { tail -5 "$W/prepare.log"; summary FAIL "the corpus could not be prepared"; }
# shellcheck disable=SC2206 # the flags split at spaces on purpose
ARGS=(train --device "$DEVICE" $TRAIN_ARGS --data "$W/data" --val-every 0 --val-batches 0
  --warmup 10 --lr 1e-3 --seed 3 --save-every "$SAVE_EVERY" --quiet)
[ "$RANKS" -eq 1 ] || ARGS+=(--ranks "$RANKS")

# the checkpoint's temporary files now (a save's: CK.tmp.XXXXXX), one a line
temps() { compgen -G "$1.tmp.*" || true; }
# new_temp CK STALE: a temporary file of CK that is not in STALE (the ones
# a killed save left before this run began) is there. Builtins only, so
# that polling every 2 ms takes no processes from the run it watches.
new_temp() {
  local f nl=$'\n'
  for f in "$1".tmp.*; do
    [ -e "$f" ] || continue
    [[ "$nl$2$nl" == *"$nl$f$nl"* ]] || return 0
  done
  return 1
}
# group_alive SID: a process of the session SID (a run started by setsid)
# is alive; zombies, which wait for whoever reaps orphans, do not count
group_alive() { ps -o stat= --sid "$1" 2> /dev/null | grep -q -v '^Z'; }
# a 2 ms pause without a process (read's timeout on a pipe nothing writes)
exec {poll_fd}<> <(:)
poll_pause() { read -r -t 0.002 -u "$poll_fd" _ || true; }

# 2. the reference, timed, its first save watched: when a temporary file
# of the checkpoint appears (start-up + SAVE_EVERY steps) and how long it
# stays (a save)
REF=$W/ref/checkpoint.safetensors
mkdir -p "$W/ref"
t=$(now_ms)
timeout -k 5 "$RUN_TIMEOUT" "$CODA" "${ARGS[@]}" --steps "$STEPS" --out "$W/ref" > "$W/ref.log" 2>&1 &
pid=$!
first=-1 save_ms=-1
while kill -0 "$pid" 2> /dev/null; do
  if [ "$first" -lt 0 ]; then
    if new_temp "$REF" ""; then first=$(($(now_ms) - t)); fi
  elif ! new_temp "$REF" ""; then
    save_ms=$(($(now_ms) - t - first))
    break
  fi
  poll_pause
done
wait "$pid" || { tail -5 "$W/ref.log"; summary FAIL "the uninterrupted run failed"; }
total=$(($(now_ms) - t))
[ -f "$REF" ] || summary FAIL "the uninterrupted run wrote no checkpoint"
[ "$(ck_step "$REF")" = "$STEPS" ] || summary FAIL "the uninterrupted run's checkpoint is at step $(ck_step "$REF"), not $STEPS"
[ -z "$(temps "$REF")" ] || summary FAIL "the uninterrupted run left a temporary file: $(temps "$REF" | head -1)"
saves=$(((STEPS + SAVE_EVERY - 1) / SAVE_EVERY))
if [ "$first" -ge 0 ] && [ "$save_ms" -ge 0 ] && [ "$STEPS" -gt "$SAVE_EVERY" ]; then
  # total = start-up + STEPS steps + saves x save; first = start-up + SAVE_EVERY steps
  step_ms=$(((total - first - saves * save_ms) / (STEPS - SAVE_EVERY)))
  [ "$step_ms" -ge 1 ] || step_ms=1
  startup=$((first - SAVE_EVERY * step_ms))
  [ "$startup" -ge 1 ] || startup=1
  how_measured="the first save began after $first ms and took $save_ms ms"
else # no save seen: a 1-step run measures the start-up
  t=$(now_ms)
  timeout -k 5 "$RUN_TIMEOUT" "$CODA" "${ARGS[@]}" --steps 1 --out "$W/startup" > "$W/startup.log" 2>&1 ||
    { tail -5 "$W/startup.log"; summary FAIL "the 1-step run failed"; }
  startup=$(($(now_ms) - t))
  step_ms=$(((total - startup) / (STEPS - 1)))
  [ "$step_ms" -ge 1 ] || step_ms=1
  save_ms=2
  how_measured="no save seen (a 1-step run for the start-up)"
fi
[ "$save_ms" -ge 2 ] || save_ms=2
span=$((2 * SAVE_EVERY * step_ms + save_ms))
echo "uninterrupted: $total ms ($how_measured; start-up about $startup ms, $step_ms ms a step);" \
  "kills in the start-up, within $span ms after it, or inside a save"

# 3. the kills
K=$W/kill
CK=$K/checkpoint.safetensors
mkdir -p "$K"
kills=0 mid_save=0 runs=0 done=0
while [ $kills -lt "$KILLS" ]; do
  if [ "$(ck_step "$CK")" = "$STEPS" ]; then # a kill landed after the last save
    echo "the checkpoint is at step $STEPS: no run left to kill"
    done=1
    break
  fi
  # room left for the last run (at most an uninterrupted run's time) and a margin
  if [ $((SECONDS - T0 + 2 * total / 1000 + 10)) -ge "$BUDGET" ]; then
    echo "the budget of $BUDGET s is nearly spent: no more kills"
    break
  fi
  resume=()
  [ -f "$CK" ] && resume=(--resume "$CK")
  before=$(ck_step "$CK")
  stale=$(temps "$CK") # what killed saves left: not this run's saves
  runs=$((runs + 1))
  # a process group of its own (setsid execs in place: $! is coda's pid)
  setsid "$CODA" "${ARGS[@]}" --steps "$STEPS" --out "$K" "${resume[@]}" > "$W/run$runs.log" 2>&1 &
  pid=$!
  case $((kills % 3)) in
  0)
    d=$(rand "$startup")
    how="in the start-up, after $d ms"
    ;;
  1)
    d=$((startup + $(rand "$span")))
    how="after the start-up, $d ms"
    ;;
  *) # wait for a save of this run to begin, then a random moment of a save's length
    waited=0
    while kill -0 "$pid" 2> /dev/null && ! new_temp "$CK" "$stale"; do
      poll_pause
      waited=$((waited + 1))
      [ $waited -lt 150000 ] || break
    done
    d=$(rand "$save_ms")
    how="$d ms after a save began"
    ;;
  esac
  sleep_ms "$d"
  if kill -KILL "$pid" 2> /dev/null; then
    wait "$pid" 2> /dev/null
    kills=$((kills + 1))
    # the ranks end with their launcher: none of its group may stay
    left=0 t_kill=$(now_ms)
    while group_alive "$pid" && [ $left -lt 10000 ]; do
      poll_pause
      left=$((left + 1))
    done
    gone=""
    [ "$RANKS" -eq 1 ] || gone=", its ranks gone $(($(now_ms) - t_kill)) ms after"
    if group_alive "$pid"; then
      ps -o pid=,stat=,args= --sid "$pid" | head -4
      kill -KILL -- "-$pid" 2> /dev/null
      summary FAIL "run $runs: processes of the killed launcher still ran 20 s after the kill"
    fi
    tmp=""
    if new_temp "$CK" "$stale"; then
      mid_save=$((mid_save + 1))
      tmp=", inside a save (its temporary file left)"
    fi
    echo "kill $kills (run $runs) $how: checkpoint step $before -> $(ck_step "$CK")$tmp$gone"
  else
    wait "$pid"
    rc=$?
    if [ $rc -ne 0 ]; then
      tail -5 "$W/run$runs.log"
      summary FAIL "run $runs (from checkpoint step $before) exited $rc by itself before its kill"
    fi
    echo "run $runs ended by itself before its kill ($how): checkpoint step $(ck_step "$CK")"
    done=1
    break
  fi
done
if [ $done = 0 ] && [ "$(ck_step "$CK")" = "$STEPS" ]; then
  # the last kill landed after its run had saved the final step (a run at
  # its end is refused: nothing to do); the checkpoint is compared as it is
  echo "the last killed run had saved the final step: checkpoint step $STEPS"
elif [ $done = 0 ]; then # to the end without a kill
  resume=()
  [ -f "$CK" ] && resume=(--resume "$CK")
  runs=$((runs + 1))
  before=$(ck_step "$CK")
  if ! timeout -k 5 "$RUN_TIMEOUT" "$CODA" "${ARGS[@]}" --steps "$STEPS" --out "$K" "${resume[@]}" > "$W/run$runs.log" 2>&1; then
    tail -5 "$W/run$runs.log"
    summary FAIL "the last run (from checkpoint step $before) failed"
  fi
  echo "run $runs from checkpoint step $before to the end: checkpoint step $(ck_step "$CK")"
fi

# 4. the final checkpoint against the reference
[ -f "$CK" ] || summary FAIL "no final checkpoint"
[ -z "$(temps "$CK")" ] || summary FAIL "a temporary file of the checkpoint is left after the last run: $(temps "$CK" | head -1)"
if cmp -s "$REF" "$CK"; then
  summary PASS "$kills kills ($mid_save inside a save), $runs runs: the final checkpoint (step $STEPS) is bit-identical to the uninterrupted run's"
fi
cmp "$REF" "$CK" | head -1
summary FAIL "$kills kills ($mid_save inside a save), $runs runs: the final checkpoint (step $(ck_step "$CK")) differs from the uninterrupted run's"
