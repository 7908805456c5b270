#!/bin/sh
# Bad input on the command line: every case must exit with a status in
# 1..125 (not 0, not a signal, not a sanitizer abort) and print a message on
# stderr that names the problem.
#
#   sh tests/cli/bad_input.sh PATH/TO/coda WORKDIR
# shellcheck source=tests/cli/setup.sh
. "$(dirname "$0")/setup.sh"
fails=0
cases=0

# expect WORDS -- ARGS...: runs coda ARGS, needs a clean failure whose
# stderr contains WORDS (a fixed string, case-insensitive).
expect() {
  want=$1
  shift 2
  cases=$((cases + 1))
  "$coda" "$@" >out.txt 2>err.txt </dev/null
  rc=$?
  bad=""
  if [ "$rc" -eq 0 ]; then bad="exit status 0"
  elif [ "$rc" -ge 126 ]; then bad="exit status $rc (a signal or abort)"
  elif grep -q -E 'AddressSanitizer|LeakSanitizer|runtime error' err.txt; then bad="sanitizer report"
  elif ! grep -q -i -F -- "$want" err.txt; then bad="message lacks '$want'"
  fi
  if [ -n "$bad" ]; then
    fails=$((fails + 1))
    echo "FAIL: coda $*: $bad"
    sed 's/^/  | /' err.txt | head -20
  else
    echo "ok: coda $* -> $rc: $(head -1 err.txt)"
  fi
}

# A small corpus and a tiny model, so that training cases reach the checks
# past the data preparation quickly.
write_corpus
small="--corpus corpus --dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 0 --quiet"

# --- the tool itself
expect "unknown command 'frobnicate'" -- frobnicate
expect "usage" --

# --- coda train: flags and numbers
# shellcheck disable=SC2086
expect "unknown or incomplete option '--bogus'" -- train --bogus
expect "unknown or incomplete option '--out'" -- train --out
expect "--steps: must be an integer in [1, 1099511627776], got 'abc' (optimizer steps in all" -- train --steps abc
expect "--steps: needs an integer in [1, 1099511627776]" -- train --steps
expect "--steps: must be an integer in [1, 1099511627776], got '12x'" -- train --steps 12x
expect "--steps: must be an integer in [1, 1099511627776], got '99999999999999999999999'" -- train --steps 99999999999999999999999
expect "--steps: must be an integer in [1, 1099511627776], got '0'" -- train --steps 0
expect "--dim: must be an integer in [2, 65536], got '0' (model width" -- train --dim 0
expect "--dim: must be an integer in [2, 65536], got '-5'" -- train --dim -5
expect "--dim: must be an integer in [2, 65536], got '1000000'" -- train --dim 1000000
expect "--dim: must be an integer in [2, 65536], got ' 64'" -- train --dim ' 64'
expect "--lr: must be in (0, inf), got ' 1e-3'" -- train --lr ' 1e-3'
expect "--batch: must be an integer in [1, 1048576], got '-1'" -- train --batch -1
expect "--threads: must be an integer in [0, 4096], got '-1' (CPU threads" -- train --threads -1
expect "--lr: must be in (0, inf), got 'abc' (peak learning rate)" -- train --lr abc
expect "--lr: needs a number in (0, inf)" -- train --lr ""
expect "unknown --config 'huge'" -- train --config huge
# model families (docs/models.md): an unknown one; a Qwen3 head width the
# plan engine's QK-norm statistics cannot tile (what --engine auto picks:
# head_dim and tile_n must divide one another), refused with both numbers;
# a Llama head width that is not dim / heads
expect "--family 'gemma' is not a model family (llama, qwen3, gpt2, gemma3)" -- train --family gemma
# shellcheck disable=SC2086
expect "head_dim 130 and tile_n 64 to divide one another" -- train $small --out oq --family qwen3 --head-dim 130 --device cpu
# shellcheck disable=SC2086
expect "head_dim 24 x heads 2 != dim 32" -- train $small --out oq --head-dim 24 --device cpu --engine reference
# GPT-2: one kv head per head and a tied head, refused naming the family
# shellcheck disable=SC2086
expect "kv-heads 1 != heads 2: the gpt2 family" -- train $small --out og --family gpt2 --tied 1 --device cpu
# shellcheck disable=SC2086
expect "an untied head: the gpt2 family" -- train $small --out og --family gpt2 --kv-heads 2 --tied 0 --device cpu
# Gemma 3: a window needs a layer pattern; llama's window (Mistral's) is
# on every layer, without one; qwen3 and gpt2 take no window
# shellcheck disable=SC2086
expect "sliding_window 6 without a sliding_pattern" -- train $small --out om --family gemma3 --sliding-window 6 --device cpu
# shellcheck disable=SC2086
expect "the llama family windows every layer alike" -- train $small --out om --sliding-window 6 --sliding-pattern 2 --device cpu
# shellcheck disable=SC2086
expect "the qwen3 family has none of these" -- train $small --out om --family qwen3 --sliding-window 6 --device cpu
expect "--engine is auto, reference or plans" -- train --engine gpu
# shellcheck disable=SC2086
expect "--lr: must be in (0, inf), got '-1'" -- train $small --out o1 --lr -1
# shellcheck disable=SC2086
expect "--lr: must be in (0, inf), got 'inf'" -- train $small --out o1 --lr inf
# shellcheck disable=SC2086
expect "--lr: must be in (0, inf), got 'nan'" -- train $small --out o1 --lr nan
# shellcheck disable=SC2086
expect "--clip: must be in [0, inf), got '-1' (global gradient-norm clip; 0 = off)" -- train $small --out o1 --clip -1
# shellcheck disable=SC2086
expect "--beta1: must be in [0, 1), got '1'" -- train $small --out o1 --beta1 1
# shellcheck disable=SC2086
expect "steps 1099511627776" -- train $small --out o1 --steps 1099511627776
# shellcheck disable=SC2086
expect "too many tokens" -- train $small --out o1 --batch 1048576 --accum 1048576
# shellcheck disable=SC2086
expect "beyond the CPU trainer's limit" -- train --corpus corpus --out o1 --quiet --dim 65536 --layers 1024
expect "config" -- train --corpus corpus --out o1 --quiet --config 8b
# shellcheck disable=SC2086
expect "head" -- train $small --out o1 --heads 3
# shellcheck disable=SC2086
expect "nothere: cannot open" -- train $small --out o_nc --corpus nothere
# shellcheck disable=SC2086
expect "missing.safetensors" -- train $small --out o1 --resume missing.safetensors
# shellcheck disable=SC2086
expect "--export-hf needs --resume" -- train --export-hf hfout
# data parallel: rank counts, more ranks than GPUs, a failing rank ends the run
expect "--ranks: must be an integer in [1, 64], got '0' (data-parallel processes)" -- train --ranks 0
expect "--ranks: must be an integer in [1, 64], got '65'" -- train --ranks 65
expect "--ranks: must be an integer in [1, 64], got 'two'" -- train --ranks two
# shellcheck disable=SC2086
expect "needs 64 GPUs" -- train $small --out o1 --ranks 64 --device gpu
# without a usable GPU (CI): the refusal names the option and why
if "$coda" version | grep -q "CUDA backend: not available"; then
  expect "cannot create a CUDA context: coda_context_options.backend is CUDA, and" -- generate --device gpu --checkpoint nope
fi
# shellcheck disable=SC2086
expect "missing.safetensors" -- train $small --out o1 --ranks 2 --resume missing.safetensors
# shellcheck disable=SC2086
expect "nothere: cannot open" -- train $small --out o_nc2 --corpus nothere --ranks 3

# --- coda check
expect "missing.coda: cannot open" -- check missing.coda
printf 'input b : col f32\noutput o : bf16\nstore o = acc + b +\n' >bad.coda
expect "bad.coda:3:" -- check bad.coda
printf 'output o : f32\nstore o = nosuch(acc)\n' >bad2.coda
expect "bad2.coda:2:" -- check bad2.coda
printf 'output o : f32\n\000store o = acc\n' >nul.coda
expect "NUL byte" -- check nul.coda
expect "usage" -- check
expect "usage" -- check --bogus
expect "usage" -- check a.coda b.coda
expect "nosuch" -- check --builtin nosuch

# --- coda compile
expect "--all takes only --unfused, --quiet, --arch and --cc" -- compile --all --f16
expect "--all takes only --unfused, --quiet, --arch and --cc" -- compile --all --builtin llama_swiglu
expect "--arch is sm80 or sm90, not 'sm75'" -- compile --arch sm75 --builtin llama_swiglu
expect "--cc is a compute capability as a number" -- compile --arch sm80 --cc nine --builtin llama_swiglu
expect "compile_cc is 70: it takes 0, or a compute capability from 80 to 129 with arch SM80" -- compile --arch sm80 --cc 70 --builtin llama_swiglu
expect "compile_cc is 90: it takes 0, or a compute capability from 80 to 129 with arch SM80 (arch is 1)" -- compile --arch sm90 --cc 90 --builtin llama_swiglu
expect "--unfused goes with --all" -- compile --unfused --builtin llama_swiglu
expect "unknown option '--frob'" -- compile --frob

# --- coda generate
expect "--checkpoint PATH is required" -- generate
expect "unknown or incomplete option '--bogus'" -- generate --bogus
expect "unknown option '--max-tokens'" -- generate --checkpoint x --max-tokens 0
expect "--tokens: must be an integer in [0, 16777216], got 'abc' (new tokens per prompt" -- generate --checkpoint x --tokens abc
expect "--tokens: must be an integer in [0, 16777216], got '-1'" -- generate --checkpoint x --tokens -1
expect "--tokens: must be an integer in [0, 16777216], got '99999999999'" -- generate --checkpoint x --tokens 99999999999
expect "--temperature: must be in [0, 1000000], got 'hot' (sampling temperature; 0 = greedy)" -- generate --checkpoint x --temperature hot
expect "--temperature: must be in [0, 1000000], got '-2'" -- generate --checkpoint x --temperature -2
expect "bad value 'fast' for --prefill" -- generate --checkpoint x --prefill fast
expect "missing.safetensors: cannot open" -- generate --checkpoint missing.safetensors
expect "--top-p: must be in (0, 1], got '2' (nucleus sampling" -- generate --checkpoint x --top-p 2
expect "--top-p: must be in (0, 1], got '0'" -- generate --checkpoint x --top-p 0
expect "bad value 'tpu' for --device: allowed are cpu or gpu" -- generate --checkpoint x --device tpu
expect "--stop: must be an integer in [0, 16777216], got 'x' (a token id that ends a sequence" -- generate --checkpoint x --stop x
expect "bad value '0,2' for --batches: allowed are batch sizes, comma-separated, at most 16, each in [1, 4096]" -- generate --bench --batches 0,2
expect "unknown --shape 'huge'" -- generate --bench --shape huge
expect "--prompt-ids '1,x' is not a list of token ids" -- generate --checkpoint x --prompt-ids 1,x
expect "--prompt-ids '' is not a list of token ids" -- generate --checkpoint x --prompt-ids ""
expect "--engine is auto, reference or plans" -- eval --checkpoint x --data y --engine fast
expect "--batch: must be an integer in [1, 65536], got '0' (windows per forward)" -- eval --checkpoint x --data y --batch 0
expect "--max-windows: must be an integer in [0, 1099511627776], got '-3'" -- eval --checkpoint x --data y --max-windows -3
expect "--seq: needs an integer in [1, 1048576]" -- eval --checkpoint x --data y --seq
expect "--top-p: must be in (0, 1], got '1.5'" -- generate --checkpoint x --top-p 1.5
expect "--max-memory: must be in (0, 1048576], got '0' (GiB the run's buffers" -- run --builtin llama_swiglu --max-memory 0
expect "--reps: must be an integer in [1, 1000], got '0'" -- run --builtin llama_swiglu --reps 0
expect "--tol: must be in (0, inf), got '0' (max |bwd - fd| / max |fd| allowed)" -- gradcheck --tol 0 a.coda b.coda
expect "--m: must be an integer in [1, 4096], got '5000' (rows of the forward's domain)" -- gradcheck --m 5000 a.coda b.coda
# every numeric flag's range and meaning in --help, from the table the parser checks
for cmd in train eval generate demo run gradcheck; do
  cases=$((cases + 1))
  "$coda" $cmd --help >help.txt 2>&1
  case $cmd in
    train) want="^  --beta2 +real +\[0, 1\) +AdamW's second-moment decay$" ;;
    eval) want="^  --max-windows +integer +\[0, 1099511627776\] +at most this many windows per shard; 0 = all$" ;;
    generate) want="^  --top-p +real +\(0, 1\] +nucleus sampling" ;;
    demo) want="^  --layers +integer +\[1, 64\] +transformer blocks$" ;;
    gradcheck) want="^  --step +real +\(0, inf\) +relative finite-difference step$" ;;
    run) want="^  --max-memory +real +\(0, 1048576\] +GiB the run's buffers may need in all$" ;;
  esac
  if grep -q -E -- "$want" help.txt; then echo "ok: coda $cmd --help names the ranges"
  else echo "FAIL: coda $cmd --help lacks '$want'"; fails=$((fails + 1)); fi
done

# --- a real checkpoint, then damaged copies of it
# shellcheck disable=SC2086
"$coda" train $small --out good --steps 2 >/dev/null 2>err.txt
rc=$?
ck=good/checkpoint.safetensors
if [ $rc -ne 0 ] || [ ! -f $ck ]; then
  echo "FAIL: could not train a small checkpoint (status $rc)"
  cat err.txt
  exit 1
fi
size=$(wc -c <$ck)
# generation from it: the same seed gives the same text, a batch prints
# each sequence, a prompt beyond the cache is refused
"$coda" generate --checkpoint $ck --prompt "ab" --tokens 12 --seed 4 --threads 1 >g1.txt 2>err.txt &&
  "$coda" generate --checkpoint $ck --prompt "ab" --tokens 12 --seed 4 --threads 1 >g2.txt 2>>err.txt
cases=$((cases + 1))
if ! cmp -s g1.txt g2.txt || [ "$(wc -c <g1.txt)" -ne 15 ]; then
  fails=$((fails + 1))
  echo "FAIL: coda generate twice with one seed: different or wrong-sized text"
  cat err.txt
fi
"$coda" generate --checkpoint $ck --prompt "a" --prompt "b" --tokens 3 --threads 1 >g3.txt 2>err.txt
cases=$((cases + 1))
if ! grep -q -- "--- sequence 2" g3.txt; then
  fails=$((fails + 1))
  echo "FAIL: coda generate with two prompts: no second sequence"
  cat err.txt
fi
expect "more than the cache of 2" -- generate --checkpoint $ck --prompt "abc" --max-len 2
expect "outside" -- generate --checkpoint $ck --prompt-ids 1,99999 --tokens 2
head -c $((size - 100)) $ck >trunc.safetensors
head -c 4 $ck >stub.safetensors
: >empty.safetensors
cp $ck flip.safetensors
# flip one byte in the data region (the last bytes are weights / moments)
printf '\377' | dd of=flip.safetensors bs=1 seek=$((size - 10)) conv=notrunc 2>/dev/null
cp $ck header.safetensors
# damage the JSON header: its first byte is '{' at offset 8
printf '[' | dd of=header.safetensors bs=1 seek=8 conv=notrunc 2>/dev/null
cp $ck dim.safetensors
# a header that claims another model (the data checksum still matches; the
# header checksum does not)
sed 's/"model.dim":"32"/"model.dim":"64"/' $ck >dim.safetensors
printf 'not a checkpoint at all, just text\n' >text.safetensors

for f in trunc stub empty flip header dim text; do
  case $f in
  trunc) want="truncated" ;;
  stub) want="truncated" ;;
  empty) want="truncated" ;;
  flip) want="checksum mismatch" ;;
  header) want="bad safetensors header" ;;
  dim) want="header checksum mismatch" ;;
  text) want="bad header length" ;;
  esac
  expect "$want" -- generate --checkpoint $f.safetensors --tokens 5
  # shellcheck disable=SC2086
  expect "$want" -- train $small --out r_$f --steps 4 --resume $f.safetensors
done
# shellcheck disable=SC2086
expect "is at step 2" -- train $small --out r_done --steps 2 --resume $ck
# shellcheck disable=SC2086
expect "nothere: cannot open" -- train $small --out o2 --data nodata --corpus nothere

# --- damaged token shards
mkdir -p shards
cp good/data/train.tok good/data/val.tok shards/
tsize=$(wc -c <shards/train.tok)
head -c $((tsize - 7)) good/data/train.tok >shards/train.tok
# shellcheck disable=SC2086
expect "size mismatch" -- train $small --out o3 --data shards --steps 2
printf 'CODATOKZ' | dd of=shards/train.tok bs=1 seek=0 conv=notrunc 2>/dev/null
# shellcheck disable=SC2086
expect "bad magic" -- train $small --out o3 --data shards --steps 2

# --- --data as a corpus: its flags, too small, shards not written over
tiny_model="--dim 32 --layers 1 --heads 2 --kv-heads 1 --ffn 64 --seq 16 --batch 2 --val-batches 0 --quiet"
expect "need --data" -- train --tokenizer tok.json --out o5
expect "--data-format is auto" -- train --data corpus/text --data-format zz
# shellcheck disable=SC2086
expect "holds token shards" -- train $tiny_model --out o5 --data good/data --tokenizer tok.json
printf 'just a few words\n' >tiny.txt
# shellcheck disable=SC2086
expect "corpus too small" -- train $tiny_model --out o5 --data tiny.txt --steps 2
printf '{"body": "x"}\n' >c.jsonl
# shellcheck disable=SC2086
expect 'c.jsonl:1: no field "text"' -- train $tiny_model --out o5 --data c.jsonl --steps 2
# shellcheck disable=SC2086
expect "nothere.json: cannot open" -- train $tiny_model --out o5 --data corpus/text --tokenizer nothere.json
# Parquet: refused by name (by the extension, or by the PAR1 magic at both
# ends whatever the name), for training and evaluation, nothing prepared
printf 'PAR1 not really a parquet file, but named as one\n' >d.parquet
# shellcheck disable=SC2086
expect "d.parquet: a Parquet file: coda does not read Parquet" -- train $tiny_model --out o7 --data d.parquet
printf 'PAR1\025\004\025\000some column chunk bytes\000\000PAR1' >disguised.txt
# shellcheck disable=SC2086
expect "disguised.txt: a Parquet file" -- train $tiny_model --out o7 --data disguised.txt
mkdir -p pq
cp d.parquet pq/part-0.parquet
# shellcheck disable=SC2086
expect "part-0.parquet: a Parquet file" -- train $tiny_model --out o7 --data pq
expect "convert it to JSON Lines" -- eval --checkpoint good/checkpoint.safetensors --data d.parquet --out o7
if [ -e o7/data/train.tok ]; then
  fails=$((fails + 1))
  echo "FAIL: a Parquet --data left shards in o7/data"
fi
mkdir -p o6/data
cp good/data/train.tok good/data/val.tok o6/data/
# shellcheck disable=SC2086
expect "not written over" -- train $tiny_model --out o6 --data corpus/text --steps 2

# coda run: bad numbers, missing files, malformed programs
expect "--m: must be an integer in [1, 1048576], got 'abc' (GEMM rows" -- run --builtin llama_swiglu --m abc
expect "--k: must be an integer in [1, 1048576], got '0' (GEMM depth)" -- run --builtin llama_swiglu --k 0
expect "unknown option '--zz'" -- run --builtin llama_swiglu --zz
expect "cannot open" -- run no-such-program.coda
expect "no built-in" -- run --builtin no_such_builtin
printf 'input x : tile bf16\noutput y : bf16\nstore y = acc +\n' >bad.coda
expect "line 3" -- run bad.coda

# coda bench: unknown benchmarks, configurations and options; without a
# usable GPU, `coda bench block` says it needs one (on a GPU machine it
# would run, so that case is only checked where there is none)
expect "unknown benchmark 'zz'" -- bench zz
expect "usage: coda bench" -- bench
expect "unknown configuration 'd9999'" -- bench block d9999
expect "unknown option '--nope'" -- bench block --nope
expect "coda bench block: --iters: must be an integer in [1, 100000], got '0' (timed iterations" -- bench block --iters 0
expect "--iters: needs an integer in [1, 100000]" -- bench block --iters
if "$coda" version | grep -q "not available"; then
  expect "needs a CUDA GPU" -- bench block
  expect "needs a CUDA GPU" -- bench block gpt2-1600 --csv
  expect "needs a CUDA GPU" -- bench block llama --keep-saved
fi

echo "$cases cases, $fails failed"
[ $fails -eq 0 ]
