# The steps the model-family CLI tests share (train_qwen3.sh, train_gpt2.sh,
# train_gemma3.sh, train_mistral.sh), sourced by them with their arguments
# (PATH/TO/coda WORKDIR) before anything else:
#
#   # shellcheck source=tests/cli/family_lib.sh
#   . "$(dirname "$0")/family_lib.sh"
#
# The CLI tests' start (setup.sh: coda, work, WORKDIR made afresh), fail,
# and the corpus; each step below runs one command over the family's
# $model and fails the test by name.
# shellcheck disable=SC2154 # model: the family's options, set by the test
# shellcheck source=tests/cli/setup.sh
. "$(dirname "$0")/setup.sh"
fail() { echo "FAIL: $*"; exit 1; }
write_corpus

# train_from_scratch WHAT [OPTION...]: 40 steps of $model into run/, whose
# training loss must fall by 1 nat; sets first and last (its losses).
train_from_scratch() {
  what=$1
  shift
  # shellcheck disable=SC2086
  "$coda" train --corpus corpus $model --batch 4 --steps 40 --warmup 5 --lr 3e-3 --val-batches 0 \
    --device cpu "$@" --out run --quiet >train.txt 2>&1 || { cat train.txt; fail "train"; }
  first=$(sed -n 2p run/loss.csv | cut -d, -f2)
  last=$(tail -1 run/loss.csv | cut -d, -f2)
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1.0) }' ||
    fail "the training loss did not fall by 1 nat: $first -> $last"
  echo "ok: $what, loss $first -> $last"
}

# resume_to_45 [OPTION...]: --resume continues run/ to step 45.
resume_to_45() {
  "$coda" train --resume run/checkpoint.safetensors --steps 45 --out run --val-batches 0 \
    --device cpu "$@" --quiet >resume.txt 2>&1 || { cat resume.txt; fail "resume"; }
  [ "$(tail -1 run/loss.csv | cut -d, -f1)" = 45 ] || fail "resume did not reach step 45"
  echo "ok: resumed to step 45"
}

# resume_other_window_refused: --resume of run/ (trained with
# --sliding-window 6) asking for window 8 is refused by name.
resume_other_window_refused() {
  "$coda" train --resume run/checkpoint.safetensors --sliding-window 8 --steps 46 --out run \
    --val-batches 0 --device cpu --quiet >window.txt 2>&1 && fail "--resume with another window"
  grep -q "has sliding-window 6, but sliding-window 8 was asked for" window.txt ||
    fail "another window: $(cat window.txt)"
  echo "ok: --resume with another --sliding-window refused by name"
}

# export_round_trip ARCHITECTURE [PATTERN...]: run/'s checkpoint exported
# into hf/ (config.json names ARCHITECTURE, a tied head and every grep
# PATTERN), imported into back/ and exported again into hf2/: the same files.
export_round_trip() {
  arch=$1
  shift
  "$coda" train --resume run/checkpoint.safetensors --export-hf hf >export.txt 2>&1 ||
    { cat export.txt; fail "export"; }
  for pattern in "\"$arch\"" "$@" '"tie_word_embeddings": true'; do
    grep -q "$pattern" hf/config.json || fail "export's config.json: $(cat hf/config.json)"
  done
  "$coda" train --import-hf hf --out back >import.txt 2>&1 || { cat import.txt; fail "import"; }
  "$coda" train --resume back/checkpoint.safetensors --export-hf hf2 >export2.txt 2>&1 ||
    { cat export2.txt; fail "second export"; }
  cmp -s hf/model.safetensors hf2/model.safetensors && cmp -s hf/config.json hf2/config.json ||
    fail "export -> import -> export changed the files"
  echo "ok: exported as $arch, imported back bit for bit"
}

# generate_greedy N IDS [FOLDER]: N greedy ids after the prompt IDS from
# run/'s checkpoint into out; with FOLDER, the same ids from that exported
# folder too.
generate_greedy() {
  out=$("$coda" generate --checkpoint run/checkpoint.safetensors --device cpu --temperature 0 \
    --tokens "$1" --prompt-ids "$2" --print-ids 2>&1) || fail "generate: $out"
  [ "$(echo "$out" | wc -w)" -eq "$1" ] || fail "generate printed '$out', not $1 ids"
  if [ $# -lt 3 ]; then
    echo "ok: generate: $out"
    return
  fi
  out_hf=$("$coda" generate --checkpoint "$3" --device cpu --temperature 0 \
    --tokens "$1" --prompt-ids "$2" --print-ids 2>&1) || fail "generate $3: $out_hf"
  [ "$out" = "$out_hf" ] || fail "generate: checkpoint '$out', exported folder '$out_hf'"
  echo "ok: generate (host decoder): $out, the same from the exported folder"
}

# eval_run [OPTION...]: coda eval of run/'s checkpoint on its data prints a
# loss (eval.txt).
eval_run() {
  "$coda" eval --checkpoint run/checkpoint.safetensors --data run/data --device cpu "$@" \
    >eval.txt 2>&1 || { cat eval.txt; fail "eval"; }
  grep -q "loss" eval.txt || fail "eval printed no loss: $(cat eval.txt)"
  echo "ok: eval: $(grep loss eval.txt | head -1)"
}

# init_from_hf: fine-tuning from the exported folder hf/ starts where the
# run ended (its first loss, ft, well below a fresh model's first).
init_from_hf() {
  "$coda" train --init-from hf --corpus corpus --batch 4 --steps 2 --val-batches 0 --device cpu \
    --out ft --quiet >ft.txt 2>&1 || { cat ft.txt; fail "--init-from"; }
  ft=$(sed -n 2p ft/loss.csv | cut -d, -f2)
  awk -v a="$first" -v b="$ft" 'BEGIN { exit !(b < a - 1.0) }' ||
    fail "--init-from: first loss $ft, a fresh model's $first"
}

# zero3_is_zero1 STEPS: data parallel over two CPU processes, weights
# sharded too (ZeRO-3) gives ZeRO-1's bits over STEPS steps.
zero3_is_zero1() {
  for z in 1 3; do
    # shellcheck disable=SC2086
    "$coda" train --data run/data $model --batch 2 --steps "$1" --val-batches 0 --device cpu \
      --ranks 2 --zero $z --out "zero$z" --quiet >"zero$z.txt" 2>&1 ||
      { cat "zero$z.txt"; fail "--zero $z"; }
  done
  cmp -s zero1/loss.csv zero3/loss.csv || fail "--zero 3 differs from --zero 1"
  echo "ok: 2 ranks, --zero 3 = --zero 1 bit for bit"
}

# plans_vs_reference: the plan engine (bf16 weights and activations)
# against the reference engine (fp32): coda eval of run/'s checkpoint
# within 1 % of eval.txt's loss (eval_run's, on the reference engine), and
# six training steps of $model from the same seed and data, each step's
# loss within 1 % (bf16 rounding).
plans_vs_reference() {
  "$coda" eval --checkpoint run/checkpoint.safetensors --data run/data --device cpu \
    --engine plans >eval_plans.txt 2>&1 || { cat eval_plans.txt; fail "eval --engine plans"; }
  lr=$(grep -o 'loss [0-9.]*' eval.txt | head -1 | cut -d' ' -f2)
  lp=$(grep -o 'loss [0-9.]*' eval_plans.txt | head -1 | cut -d' ' -f2)
  awk -v a="$lr" -v b="$lp" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d < 0.01 * a) }' ||
    fail "eval: plan engine loss $lp vs reference $lr"
  echo "ok: eval on the plan engine: loss $lp (reference $lr)"
  for e in reference plans; do
    # shellcheck disable=SC2086
    "$coda" train --corpus corpus $model --batch 4 --steps 6 --warmup 2 --lr 3e-3 --val-batches 0 \
      --device cpu --engine $e --out "eng_$e" --quiet >"eng_$e.txt" 2>&1 ||
      { cat "eng_$e.txt"; fail "train --engine $e"; }
  done
  paste -d, eng_reference/loss.csv eng_plans/loss.csv | awk -F, -v n="$(awk -F, 'NR == 1 { print NF }' eng_reference/loss.csv)" '
    NR > 1 { a = $2; b = $(n + 2); d = a - b; if (d < 0) d = -d; steps++
             if (!(a > 0) || d >= 0.01 * a) { print "step " $1 ": reference " a ", plans " b; bad = 1 } }
    END { exit bad || steps != 6 }' || fail "plan engine vs reference: losses differ (above)"
  echo "ok: 6 steps on the plan engine within 1% of the reference: $(tail -1 eng_plans/loss.csv | cut -d, -f2) vs $(tail -1 eng_reference/loss.csv | cut -d, -f2)"
}
