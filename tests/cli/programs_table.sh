#!/bin/bash
# bench/fused/programs_table.sh without a GPU: its rows cover every
# built-in epilogue, example and tutorial program (a new example without a
# row is refused), bwd programs are the backward ones, and the report joins
# bench_fused's rows with the 1.10x flag of backward programs.
#   bash tests/cli/programs_table.sh PATH/TO/coda SOURCE_DIR WORKDIR
set -u
coda=$1
src=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; }
pt=$src/bench/fused/programs_table.sh
bash "$pt" list "$coda" >"$work/rows.tsv" 2>"$work/err.txt" || { fail "list: $(cat "$work/err.txt")"; }
for f in "$src"/programs/examples/*.coda; do
  n=$(basename "$f" .coda)
  grep -q "^$n	example	programs/$n.coda	" "$work/rows.tsv" || fail "example $n has no row"
done
for n in swiglu_clamp_bwd_draft dtanh; do # the tutorial's own programs
  grep -q "^$n	tutorial	" "$work/rows.tsv" || fail "tutorial program $n has no row"
done
grep -q "^llama_swiglu	builtin	builtin:llama_swiglu	forward	no	1B gate_up	16384	16384	2048$" "$work/rows.tsv" ||
  fail "llama_swiglu at the 1B gate_up GEMM"
grep -q "^llama_rmsnorm	" "$work/rows.tsv" && fail "llama_rmsnorm is a map, not an epilogue"
# every program at the square shape; backward exactly the _bwd ones
awk -F'\t' '$6 == "square"' "$work/rows.tsv" | cut -f1 | sort >"$work/square.txt"
cut -f1 "$work/rows.tsv" | sort -u | cmp -s - "$work/square.txt" || fail "a program without the square shape"
awk -F'\t' '($1 ~ /_bwd/) != ($4 == "backward") { print $1 }' "$work/rows.tsv" | grep . && fail "kind"
# an example without a row is refused
mkdir -p "$work/tree"
cp -r "$src/programs" "$src/docs" "$work/tree/"
mkdir -p "$work/tree/bench/fused"
cp "$pt" "$work/tree/bench/fused/"
cp "$src/programs/examples/sqrelu.coda" "$work/tree/programs/examples/new_op.coda"
bash "$work/tree/bench/fused/programs_table.sh" list "$coda" >/dev/null 2>"$work/err.txt" && fail "a program without a row passed"
grep -q "new_op.coda has no row" "$work/err.txt" || fail "the missing row is not named: $(cat "$work/err.txt")"
# the report
printf '| builtin:llama_swiglu_bwd | 8192 | 4096 | 4096 | 0.400 | 0.480 | 0.470 | 1.200 | 573 |\n| programs/sqrelu_bwd.coda | 8192 | 4096 | 4096 | 0.400 | 0.430 | 0.420 | 1.075 | 639 |\n' >"$work/bench.md"
bash "$pt" report "$work/rows.tsv" "$work/bench.md" "$work/t.md" "$work/t.json" || fail "report"
grep -q '^| llama_swiglu_bwd | builtin | backward | square | 8192 x 4096 x 4096 | 0.480 | 0.400 | 0.470 | 1.200 | 573 | \*\*no\*\* |' "$work/t.md" || fail "llama_swiglu_bwd row"
grep -q '"program": "sqrelu_bwd".*"ratio": 1.075, "tflops": 639, "within_1_10": true}' "$work/t.json" || fail "sqrelu_bwd JSON"
[ "$(grep -c '"program"' "$work/t.json")" -eq "$(wc -l <"$work/rows.tsv")" ] || fail "one JSON object a row"
[ "$(grep -c '"failed": true' "$work/t.json")" -eq "$(($(wc -l <"$work/rows.tsv") - 2))" ] || fail "rows without a result are failed"
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
