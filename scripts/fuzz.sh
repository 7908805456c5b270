#!/bin/sh
# Fuzzes the epilogue-language parser/printer, the safetensors reader, the
# token-shard reader, the JSON reader, the tokenizer (tokenizer.json
# loading, encode and decode of arbitrary bytes), the Hugging Face
# config.json reader, the checkpoint metadata -> model config check and
# corpus preparation (JSON Lines, llm.c shards, plain text, a directory of
# such files, and the default corpus's directory walk of coda train
# --corpus) with libFuzzer.
#
#   scripts/fuzz.sh [SECONDS]     (default 60; each harness runs this long)
#
# FUZZ_ONLY=program|safetensors|shard|json|tokenizer|hf_config|
# checkpoint_config|checkpoint_tokenizer|eval_shard|jsonl|llmc|text|dir|
# corpusdir|jsonl_bpe|text_bpe|dir_bpe runs one
# harness only, or those of a space-separated list (the last eight are one
# binary, fuzz/fuzz_corpus.c with fuzz/fuzz_corpus_reference.c and
# fuzz/fuzz_corpus_dir.c, run under eight names that pick the reader and
# whether a tokenizer is used; a crash input reproduces with
# build-fuzz/fuzz_jsonl FILE). hf_config fuzzes the Hugging Face
# config.json reader through coda_hf_config and coda_hf_import,
# checkpoint_config the checkpoint metadata -> model config check,
# checkpoint_tokenizer the checkpoint's tokenizer record (the file it names
# beside the checkpoint), eval_shard coda_evaluate's checks of a shard
# against the checkpoint (not a shard, another tokenizer, byte shards on a
# BPE model); these four link the whole library.
# Builds fuzz/fuzz_program.c with clang (-fsanitize=fuzzer,address,undefined)
# directly from the sources it needs: base, api and the CPU backend (OpenMP),
# src/lang/*.c, and the built-in programs embedded from programs/
# (or an empty table if cmake is not available). Runs it for the given time
# on a copy of the seed corpus fuzz/corpus/program/ and prints libFuzzer's
# final statistics. Crash inputs are written to $FUZZ_OUT (default
# build-fuzz/) as crash-* (safetensors-crash-*, shard-crash-* for the readers);
# the exit status is nonzero if one was found.
set -eu
secs=${1:-60}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${FUZZ_OUT:-$root/build-fuzz}
cc=${CC:-clang}
# src/io/json.c reads through jansson (scripts/install-deps.sh)
jansson=$(pkg-config --libs jansson 2>/dev/null || echo -ljansson)
mkdir -p "$out/corpus"

embed="$out/programs_embedded.c"
if command -v cmake >/dev/null 2>&1; then
  cmake -DOUT="$embed" -DDIR="$root/programs" -P "$root/cmake/embed_programs.cmake"
else
  cat >"$embed" <<'STUB'
#include <stddef.h>
struct coda_builtin_program { const char *name; const char *text; };
const struct coda_builtin_program coda_builtin_programs[] = {{NULL, NULL}};
const int coda_builtin_program_count = 0;
STUB
fi

# base, api and the CPU backend behind the backend table (the context
# reaches its backend through src/backends/registry.c; CUDA code is built
# only under CODA_HAVE_CUDA), OpenMP for the CPU backend
core="$(ls "$root"/src/base/*.c "$root"/src/api/*.c) $root/src/backends/registry.c $(ls "$root"/src/backends/cpu/*.c)"

# shellcheck disable=SC2086
"$cc" -std=c11 -g -O1 -Wno-comment -fopenmp -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$root/include" -I"$root/src" \
  $core "$root"/src/lang/*.c "$embed" "$root/fuzz/fuzz_program.c" -lm -o "$out/fuzz_program"

only=${FUZZ_ONLY:-}
# skip h: FUZZ_ONLY is set and does not name it
skip() { [ -n "$only" ] && case " $only " in *" $1 "*) false ;; *) true ;; esac; }
status=0
if ! skip program; then
cp "$root"/fuzz/corpus/program/* "$out/corpus/"
(cd "$out"
echo "fuzzing for $secs s ($(ls corpus | wc -l) corpus inputs)"
./fuzz_program -max_total_time="$secs" -print_final_stats=1 -max_len=4096 \
  -dict="$root/fuzz/program.dict" -artifact_prefix="$out/" corpus 2>&1 | tee "$out/fuzz.log" |
  grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY|Test unit written|fuzz_program:' || true)
grep -q -E 'ERROR: libFuzzer|ERROR: AddressSanitizer|runtime error|fuzz_program:' "$out/fuzz.log" && status=1
fi

# fuzz_run H SEEDS MAX_LEN [FLAG...]: fuzz_H for $secs s from a fresh copy of
# fuzz/corpus/SEEDS/, TMPDIR memory-backed where it can be (the harnesses
# that write each input to a file run ~50x faster), its log in
# $out/fuzz-H.log; a finding sets status=1.
fuzz_run() {
  local h=$1 seeds=$2 maxlen=$3 tmpd="$out/tmp"
  shift 3
  mkdir -p "$out/corpus-$h" "$out/tmp"
  if [ -d /dev/shm ] && [ -w /dev/shm ]; then tmpd=/dev/shm; fi
  cp "$root"/fuzz/corpus/"$seeds"/* "$out/corpus-$h/"
  echo "fuzzing the $h reader for $secs s ($(ls "$out/corpus-$h" | wc -l) corpus inputs)"
  (cd "$out" && TMPDIR="$tmpd" ./fuzz_"$h" -max_total_time="$secs" -print_final_stats=1 \
    -max_len="$maxlen" "$@" -artifact_prefix="$out/$h-" "corpus-$h" 2>&1 | tee "$out/fuzz-$h.log" |
    grep -E '^#[0-9]+[[:space:]]+(INITED|DONE)|^stat::|ERROR|SUMMARY|Test unit written|fuzz_[a-z_]+:' || true)
  if grep -q -E 'ERROR: libFuzzer|ERROR: AddressSanitizer|runtime error|fuzz_[a-z_]+:' "$out/fuzz-$h.log"; then
    status=1
  fi
}

# The file readers: src/io/safetensors.c and src/data/shards.c need only the
# core files above and src/io/files.c (CRC-32, bounded reads, atomic writes).
for h in safetensors shard; do
  if skip "$h"; then continue; fi
  # shellcheck disable=SC2086
  "$cc" -std=c11 -g -O1 -Wno-comment -fopenmp -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root/src" $core "$root"/src/lang/*.c "$embed" "$root/src/io/safetensors.c" \
    "$root/src/data/shards.c" "$root/src/io/files.c" "$root/fuzz/fuzz_$h.c" -lz -lm -o "$out/fuzz_$h"
  fuzz_run "$h" "$h" 8192
done
# The JSON reader alone (src/io/json.c needs only jansson), and the
# tokenizer: json.c, src/data's bpe*.c files and utf8proc over the core files.
for h in json tokenizer; do
  if skip "$h"; then continue; fi
  if [ "$h" = json ]; then
    srcs="$root/src/io/json.c"
  else
    srcs="$core $root/src/lang/*.c $embed $root/src/io/json.c $root/src/data/bpe.c \
      $root/src/data/bpe_load.c $root/src/data/bpe_split.c $root/src/io/files.c -lutf8proc -lz"
  fi
  # shellcheck disable=SC2086
  "$cc" -std=c11 -g -O1 -Wno-comment -fopenmp -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root/src" "$root/fuzz/fuzz_$h.c" $srcs $jansson -lm -o "$out/fuzz_$h"
  fuzz_run "$h" "$h" 16384
done
# The model-configuration readers: the HF config.json reader (src/store/
# hf.c, with a tiny model.safetensors the harness exports), the
# checkpoint metadata check and the checkpoint's tokenizer record
# (src/store/checkpoint.c), and coda_evaluate's shard checks (src/train/
# eval.c, a tiny model scoring one window); they reach the model, the
# safetensors reader and the RoPE check, so the whole library is linked.
lib_built=0
for h in hf_config checkpoint_config checkpoint_tokenizer eval_shard; do
  if skip "$h"; then continue; fi
  if [ $lib_built = 0 ]; then # compiled once for all four (objects named by path: two attention.c)
    rm -rf "$out/libobj"
    mkdir -p "$out/libobj"
    for f in $core "$root"/src/lang/*.c "$embed" "$root"/src/nn/*.c "$root"/src/io/*.c \
             "$root"/src/data/*.c "$root"/src/model/*.c "$root"/src/store/*.c "$root"/src/infer/*.c \
             "$root"/src/train/*.c \
             $(ls "$root"/src/dist/*.c | grep -v '/nccl\.c$'); do
      o="$out/libobj/$(echo "${f#"$root"/}" | tr / _).o"
      "$cc" -std=c11 -g -O1 -Wno-comment -fopenmp -fsanitize=fuzzer-no-link,address,undefined \
        -fno-sanitize-recover=undefined -I"$root/include" -I"$root/src" -c "$f" -o "$o"
    done
    lib_built=1
  fi
  "$cc" -std=c11 -g -O1 -Wno-comment -fopenmp -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$root/include" -I"$root/src" "$root/fuzz/fuzz_$h.c" "$out"/libobj/*.o $jansson -lutf8proc -lz -lm -ldl \
    -lpthread -o "$out/fuzz_$h"
  fuzz_run "$h" "$h" 8192 -dict="$root/fuzz/$h.dict"
done
# Corpus preparation (src/data/corpus.c through coda_prepare_data, and
# coda_prepare_corpus's directory walk as fuzz_corpusdir): one binary,
# linked under eight names that pick the reader (fuzz_dir, fuzz_corpusdir:
# the input becomes a directory of several files). Its chunk, block and line
# sizes are made small so that inputs of a few KB cross them. The
# directory runs have a dictionary (fuzz/dir.dict) and a 10 s limit per
# input, so a FIFO waited on shows as a hang.
corpus_built=0
for h in jsonl llmc text dir corpusdir jsonl_bpe text_bpe dir_bpe; do
  if skip "$h"; then continue; fi
  if [ $corpus_built = 0 ]; then
    # shellcheck disable=SC2086
    "$cc" -std=c11 -g -O1 -Wno-comment -fopenmp -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
      -DCORPUS_CHUNK=61 -DCORPUS_BLOCK=8 -DCORPUS_LINE_MAX=700 \
      -DCODA_FUZZ_TOKENIZER="\"$root/fuzz/corpus/tokenizer/gpt2.json\"" \
      -I"$root/include" -I"$root/src" "$root/fuzz/fuzz_corpus.c" "$root/fuzz/fuzz_corpus_reference.c" \
      "$root/fuzz/fuzz_corpus_dir.c" $core "$root"/src/lang/*.c "$embed" \
      "$root"/src/data/*.c "$root/src/io/files.c" "$root/src/io/json.c" $jansson -lutf8proc -lz -lm -o "$out/fuzz_corpus"
    corpus_built=1
  fi
  ln -f "$out/fuzz_corpus" "$out/fuzz_$h"
  # the _bpe runs share the seeds; the directory runs have a dictionary and a
  # 10 s limit per input
  case $h in
  corpusdir) fuzz_run "$h" dir 8192 -dict="$root/fuzz/dir.dict" -timeout=10 ;;
  dir*) fuzz_run "$h" "${h%_bpe}" 8192 -dict="$root/fuzz/dir.dict" -timeout=10 ;;
  *) fuzz_run "$h" "${h%_bpe}" 8192 ;;
  esac
done
exit $status
