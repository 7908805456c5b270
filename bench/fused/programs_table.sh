#!/bin/bash
# The fused-vs-plain table of every program: each built-in GEMM epilogue
# (programs/*.coda that reads acc), each example (programs/examples/*.coda)
# and each program of docs/tutorial.md, timed by bench_fused --program
# against the plain GEMM of the same shape, at M x N x K = 8192 x 4096 x
# 4096 and at the 1B block GEMM(s) it is used with (bench_fused's "1B"
# shape: M 16384, D 2048, F 8192, 32/8 heads of 64, V 32768). Backward
# programs are flagged: their target is <= 1.10x the plain GEMM.
#
#   bash bench/fused/programs_table.sh list [CODA]     the rows (no GPU)
#   bash bench/fused/programs_table.sh stage DIR [CODA]
#        writes DIR/programs/ (the example and tutorial files) and
#        DIR/programs.tsv (the rows); build.sh --programs calls it
#   bash bench/fused/programs_table.sh precompile DIR BENCH_FUSED
#        compiles the staged programs' kernels into $CODA_CACHE_DIR
#   bash bench/fused/programs_table.sh run [PACK_DIR]
#        on an sm_90 GPU: unpacks PACK_DIR/fused.tgz (build.sh --programs;
#        default .carry/fused), times every row, writes $OUT/programs_table.md
#        and $OUT/programs_table.json (and bench_fused's own logs)
#
# CODA: a coda binary of this tree (default build-cpu/coda, else build/coda),
# used to tell GEMM epilogues (programs that read acc) from maps.
set -u
HERE=$PWD
abs() { case "$1" in /*) echo "$1" ;; *) echo "$HERE/$1" ;; esac; }
cd "$(dirname "$0")/../.."

SQUARE=8192,4096,4096
# name  kind  the 1B GEMMs it is used with (label:M,N,K ...; none: the square
# shape only). Every built-in that reads acc, every example and every
# tutorial program needs a row: `list` refuses a tree that has one without.
ROWS='
gemma3_ce_bwd          backward -
gemma3_geglu           forward  -
gemma3_geglu_bwd       backward -
gemma3_lm_head         forward  -
gemma3_post_stats      forward  -
gpt2_bias_residual     forward  -
gpt2_ce_bwd            backward -
gpt2_fold_bias         forward  -
gpt2_gelu_bwd          backward -
gpt2_ln_bwd            backward -
gpt2_ln_linear         forward  -
gpt2_ln_linear_gelu    forward  -
gpt2_lm_head           forward  -
gpt2_residual_ln       forward  -
llama_ce_bwd           backward lm_head:16384,32768,2048
llama_head_norm_bwd    backward lm_head_dgrad:16384,2048,32768
llama_lm_head          forward  lm_head:16384,32768,2048
llama_norm_bwd         backward gate_up_dgrad:16384,2048,16384 qkv_dgrad:16384,2048,3072
llama_qkv_rope         forward  qkv:16384,3072,2048
llama_residual         forward  down:16384,2048,8192
llama_residual_norm    forward  out_proj:16384,2048,2048 down:16384,2048,8192
llama_swiglu           forward  gate_up:16384,16384,2048
llama_swiglu_bwd       backward down_dgrad:16384,8192,2048
qwen3_qkv              forward  qkv:16384,3072,2048
dyt                    forward  out_proj:16384,2048,2048
dyt_bwd                backward gate_up_dgrad:16384,2048,16384
dyt_bwd_total          backward gate_up_dgrad:16384,2048,16384
qknorm_applied         forward  -
qknorm_applied_bwd     backward -
zloss                  forward  lm_head:16384,32768,2048
geglu_scaled           forward  gate_up:16384,16384,2048
gelu_bwd_explicit      backward down_dgrad:16384,8192,2048
rope_half_split        forward  qkv:16384,3072,2048
sqrelu                 forward  ffn_up:16384,8192,2048
sqrelu_bwd             backward down_dgrad:16384,8192,2048
swiglu_clamp           forward  gate_up:16384,16384,2048
swiglu_clamp_bwd       backward -
swiglu_clamp_bwd_draft backward -
dtanh                  forward  -
'

find_coda() {
  local c=${1:-${CODA:-}}
  [ -z "$c" ] && for c in build-cpu/coda build/coda; do [ -x "$c" ] && break; done
  [ -x "$c" ] || { echo "programs_table.sh: no coda binary (give one, or set CODA)" >&2; return 1; }
  echo "$c"
}

# the tutorial's programs: blocks whose first line is `# NAME.coda`, into DIR
tutorial_programs() {
  awk -v d="$1" '
    /^```/ { if (inb) { inb = 0; if (f) close(f); f = ""; next } inb = 1; first = 1; next }
    inb && first { first = 0; if (match($0, /^# [A-Za-z0-9_]+\.coda/)) { f = d "/" substr($0, 3, RLENGTH - 2); printf "" > f } }
    inb && f { print > f }' docs/tutorial.md
}

reads_acc() { # CODA check-args...: 0 when the program reads acc
  "$@" 2>/dev/null | grep -Eq '^ +[0-9]+ +r[0-9]+(\([A-Za-z0-9_]*\))? = acc'
}

# name source spec kind map label M N K, one line per (program, shape);
# spec is builtin:NAME or programs/NAME.coda relative to the staged folder
list_rows() {
  local coda tut name kind shapes src spec map s label mnk n=0 bad=0
  coda=$(find_coda "${1:-}") || return 1
  tut=$(mktemp -d)
  tutorial_programs "$tut"
  declare -A seen=()
  while read -r name kind shapes; do
    [ -z "$name" ] && continue
    seen[$name]=1
    if [ -f "programs/$name.coda" ]; then
      src=builtin spec=builtin:$name
      reads_acc "$coda" check --builtin "$name" || { echo "row $name: a built-in map (it does not read acc)" >&2; bad=1; continue; }
      map=no
    elif [ -f "programs/examples/$name.coda" ] || [ -f "$tut/$name.coda" ]; then
      [ -f "programs/examples/$name.coda" ] && src=example || src=tutorial
      f=programs/examples/$name.coda
      [ "$src" = tutorial ] && f=$tut/$name.coda
      "$coda" check "$f" >/dev/null 2>&1 || { echo "row $name: $f does not pass coda check" >&2; bad=1; continue; }
      spec=programs/$name.coda
      reads_acc "$coda" check "$f" && map=no || map=yes
    else
      echo "row $name: no such built-in, example or tutorial program" >&2
      bad=1
      continue
    fi
    case "$kind" in forward | backward) ;; *) echo "row $name: kind $kind" >&2; bad=1; continue ;; esac
    for s in square:$SQUARE $([ "$shapes" = - ] || echo "$shapes"); do
      label=${s%%:*} mnk=${s#*:}
      [ "$label" = square ] || label="1B $label"
      echo -e "$name\t$src\t$spec\t$kind\t$map\t$label\t${mnk//,/$'\t'}"
      n=$((n + 1))
    done
  done <<< "$ROWS"
  # coverage: a program without a row is an error, not a silent gap
  for f in programs/*.coda; do
    name=$(basename "$f" .coda)
    [ -n "${seen[$name]:-}" ] && continue
    reads_acc "$coda" check --builtin "$name" && { echo "built-in $name reads acc but has no row" >&2; bad=1; }
  done
  for f in programs/examples/*.coda "$tut"/*.coda; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .coda)
    [ -n "${seen[$name]:-}" ] || { echo "$f has no row" >&2; bad=1; }
  done
  rm -rf "$tut"
  [ "$n" -gt 0 ] && [ "$bad" -eq 0 ]
}

stage() { # DIR [CODA]
  local d=$1 tut
  mkdir -p "$d/programs"
  list_rows "${2:-}" > "$d/programs.tsv" || return 1
  tut=$(mktemp -d)
  tutorial_programs "$tut"
  cp programs/examples/*.coda "$d/programs/"
  for f in "$tut"/*.coda; do # a tutorial copy of an example is the example
    [ -e "$f" ] && [ ! -e "programs/examples/$(basename "$f")" ] && cp "$f" "$d/programs/"
  done
  rm -rf "$tut"
  echo "staged $(cut -f1 "$d/programs.tsv" | sort -u | wc -l) programs, $(wc -l < "$d/programs.tsv") rows in $d"
}

precompile() { # DIR BENCH_FUSED: bench_fused takes 32 programs a call
  local d=$1 bf=$2 rc=0
  mapfile -t specs < <(cut -f3 "$d/programs.tsv" | sort -u)
  for ((i = 0; i < ${#specs[@]}; i += 32)); do
    args=()
    for s in "${specs[@]:i:32}"; do args+=(--program "$s"); done
    (cd "$d" && "$bf" --precompile "${args[@]}") || rc=1
  done
  return $rc
}

# bench_fused rows (| spec | M | N | K | plain | fused | kernel | ratio | TFLOP/s |)
# joined with the table's rows into markdown and JSON
report() { # TSV RESULTS MD JSON GPU
  awk -F'\t' -v md="$3" -v js="$4" -v gpu="$5" '
    FNR == NR { split($0, c, "|"); for (i in c) gsub(/^ +| +$/, "", c[i])
                if (c[2] ~ /^(builtin:|programs\/)/ && c[3] ~ /^[0-9]+$/)
                  r[c[2] " " c[3] "," c[4] "," c[5]] = c[6] " " c[7] " " c[8] " " c[9] " " c[10]
                next }
    { key = $3 " " $7 "," $8 "," $9
      printf "%s", (n++ ? ",\n" : "[\n") > js
      note = ($5 == "yes" ? "map: reads no acc, timed as the epilogue of the GEMM" : "")
      if (!(key in r)) {
        printf "| %s | %s | %s | %s | %s x %s x %s | failed | | | | | | %s |\n", $1, $2, $4, $6, $7, $8, $9, note > md
        printf "  {\"program\": \"%s\", \"source\": \"%s\", \"kind\": \"%s\", \"map\": %s, \"shape\": \"%s\", \"M\": %s, \"N\": %s, \"K\": %s, \"failed\": true}", \
          $1, $2, $4, ($5 == "yes" ? "true" : "false"), $6, $7, $8, $9 > js
        next }
      split(r[key], v, " ")  # plain fused kernel ratio tflops
      flag = ($4 == "backward" ? (v[4] <= 1.10 ? "yes" : "**no**") : "")
      printf "| %s | %s | %s | %s | %s x %s x %s | %s | %s | %s | %s | %s | %s | %s |\n", \
        $1, $2, $4, $6, $7, $8, $9, v[2], v[1], v[3], v[4], v[5], flag, note > md
      printf "  {\"program\": \"%s\", \"source\": \"%s\", \"kind\": \"%s\", \"map\": %s, \"shape\": \"%s\", \"M\": %s, \"N\": %s, \"K\": %s, \"fused_ms\": %s, \"plain_ms\": %s, \"fused_kernel_ms\": %s, \"ratio\": %s, \"tflops\": %s, \"within_1_10\": %s}", \
        $1, $2, $4, ($5 == "yes" ? "true" : "false"), $6, $7, $8, $9, v[2], v[1], v[3], v[4], v[5], \
        ($4 == "backward" ? (v[4] <= 1.10 ? "true" : "false") : "null") > js }
    BEGIN { print "Fused against plain, every program (bench/fused/programs_table.sh); " gpu > md
            print "" > md
            print "ratio = fused / plain; TFLOP/s of the fused call (2MNK); backward programs: target <= 1.10x (column \"<= 1.10\")." > md
            print "" > md
            print "| program | source | kind | shape | M x N x K | fused ms | plain ms | fused kernel ms | ratio | TFLOP/s | <= 1.10 | note |" > md
            print "|---|---|---|---|---|---|---|---|---|---|---|---|" > md }
    END { print (n ? "\n]" : "[]") > js }' "$2" "$1"
}

run() { # PACK_DIR
  local p=$1 o=${OUT:-/tmp/fused-out} w mnk rc
  mkdir -p "$o"
  w=$(mktemp -d)
  tar -xzf "$p/fused.tgz" -C "$w" || { echo "no $p/fused.tgz (bash bench/fused/build.sh --programs)"; return 1; }
  [ -s "$w/programs.tsv" ] || { echo "$p/fused.tgz has no programs (build.sh --programs)"; return 1; }
  export CODA_CACHE_DIR=$w/cache
  gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>&1 | head -1)
  echo "$gpu" > "$o/gpu.txt"
  : > "$o/programs_bench.md"
  # one bench_fused call per shape, at most 32 programs a call
  for mnk in $(cut -f7-9 "$w/programs.tsv" | tr '\t' , | awk '!s[$0]++'); do
    mapfile -t specs < <(awk -F'\t' -v k="$mnk" '$7 "," $8 "," $9 == k { print $3 }' "$w/programs.tsv" | awk '!s[$0]++')
    for ((i = 0; i < ${#specs[@]}; i += 32)); do
      args=()
      for s in "${specs[@]:i:32}"; do args+=(--program "$s"); done
      echo "== $mnk: ${specs[*]:i:32}"
      (cd "$w" && timeout "${SHAPE_S:-240}" ./bench_fused --mnk "$mnk" "${args[@]}") \
        >> "$o/programs_bench.md" 2>> "$o/programs_bench.err"
      rc=$?
      echo "bench_fused rc=$rc"
      [ "$rc" = 77 ] && { tail -1 "$o/programs_bench.md"; rm -rf "$w"; return 77; } # no GPU
    done
  done
  grep -i "compil" "$o/programs_bench.err" | head -5  # a kernel missing from the cache shows here
  report "$w/programs.tsv" "$o/programs_bench.md" "$o/programs_table.md" "$o/programs_table.json" "$gpu"
  cat "$o/programs_table.md"
  rm -rf "$w"
}

# paths given are taken from where the script was called
case "${1:-}" in
list) list_rows "${2:+$(abs "$2")}" ;;
stage) [ $# -ge 2 ] || { echo "usage: programs_table.sh stage DIR [CODA]" >&2; exit 2; }
  stage "$(abs "$2")" "${3:+$(abs "$3")}" ;;
precompile) [ $# -eq 3 ] || { echo "usage: programs_table.sh precompile DIR BENCH_FUSED" >&2; exit 2; }
  precompile "$(abs "$2")" "$(abs "$3")" ;;
run) run "$(abs "${2:-.carry/fused}")" ;;
report) [ $# -eq 5 ] || { echo "usage: programs_table.sh report TSV RESULTS MD JSON" >&2; exit 2; }
  report "$(abs "$2")" "$(abs "$3")" "$(abs "$4")" "$(abs "$5")" "" ;;
*) sed -n '2,21p' "$0" >&2; exit 2 ;;
esac
