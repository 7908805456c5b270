#!/bin/sh
# coda run with files and the fp64 check:
#  - --out-dir writes every input, output, partial and finished vector and
#    the operands; running again on those files (--input, another seed)
#    gives the same bits; --input acc with an identity B works;
#  - tanh' written as 1 - t*t is within the rule for |x| < 1 and outside it
#    for x in [4, 6] (--range): reported, exit status 1 with --strict;
#  - a NaN output (log of a negative range) is reported, exit status 1;
#  - malformed or mis-shaped .npy inputs and unknown names fail with a message;
#  - the size guard sums every buffer of a run (many inputs at a large n).
#   sh tests/cli/run_files.sh PATH/TO/coda PROGRAMS_DIR WORKDIR
set -u
coda=$1
progs=$2
work=$3
rm -rf "$work"
mkdir -p "$work/a" "$work/b" "$work/c"
fails=0
fail() { fails=$((fails + 1)); echo "FAIL: $*"; sed 's/^/  | /' "$work/out.txt" "$work/err.txt" | head -20; }
run() { # run WANT_RC ARGS...
  want=$1
  shift
  "$coda" run "$@" >"$work/out.txt" 2>"$work/err.txt"
  rc=$?
  if [ "$rc" -ne "$want" ]; then fail "coda run $* -> $rc, expected $want"
  else echo "ok: coda run $* -> $rc"; fi
}
ex="$progs/examples/geglu_scaled.coda"
run 0 "$ex" --m 40 --n 136 --k 24 --reps 1 --out-dir "$work/a"
for f in A B s y mx gmax y.f64 mx.f64 gmax.f64; do
  [ -s "$work/a/$f.npy" ] || fail "no $f.npy written"
done
run 0 "$ex" --reps 1 --seed 7 --input A="$work/a/A.npy" --input B="$work/a/B.npy" \
  --input s="$work/a/s.npy" --out-dir "$work/b"
for f in y mx gmax; do
  cmp -s "$work/a/$f.npy" "$work/b/$f.npy" || fail "$f.npy differs when run again on the files"
done
# an accumulator from a file: acc = y of the first run reshaped is not needed,
# any M x N array will do; the rowsum partials of the program fit its N
run 0 --builtin llama_swiglu --input acc="$work/a/y.f64.npy" --reps 1 --out-dir "$work/c"
[ -s "$work/c/z.npy" ] || fail "no z.npy for --input acc"
grep -q "GEMM 40 x 68 x 68" "$work/out.txt" || fail "--input acc did not set M, N, K"
# precision: 1 - tanh(x)^2 in fp32
printf 'input x : tile f32\noutput y : f32\nt = tanh(x)\nstore y = 1 - t * t\n' >"$work/dtanh.coda"
run 0 "$work/dtanh.coda" --m 16 --n 64 --k 8 --reps 1 --range x=-1:1
run 0 "$work/dtanh.coda" --m 16 --n 64 --k 8 --reps 1 --range x=4:6
grep -q "outside the rule" "$work/out.txt" || fail "precision loss not reported"
run 1 "$work/dtanh.coda" --m 16 --n 64 --k 8 --reps 1 --range x=4:6 --strict
grep -q "outside the rule" "$work/out.txt" || fail "precision loss not reported with --strict"
run 0 "$work/dtanh.coda" --m 16 --n 64 --k 8 --reps 1 --range x=-1:1 --strict
# NaN
printf 'input x : tile f32\noutput y : bf16\nstore y = log(x) * acc\n' >"$work/nan.coda"
run 1 "$work/nan.coda" --m 8 --n 16 --k 8 --reps 1 --range x=-1:-0.5
grep -q "non-finite" "$work/out.txt" || fail "NaN not reported"
# bad files and names
printf 'not a npy file at all' >"$work/junk.npy"
run 1 "$ex" --reps 1 --input s="$work/junk.npy"
grep -q "not a .npy file" "$work/err.txt" || fail "junk file not reported"
run 1 "$ex" --reps 1 --input s="$work/a/y.npy"
grep -q "expected 1 x 1" "$work/err.txt" || fail "shape mismatch not reported"
run 1 "$ex" --reps 1 --input nosuch="$work/a/s.npy"
grep -q "no argument of that name" "$work/err.txt" || fail "unknown --input name not reported"
run 1 "$ex" --reps 1 --range y=0:1
grep -q "not an input" "$work/err.txt" || fail "--range on an output not reported"
run 2 "$ex" --range s=1:0
run 1 "$ex" --input s="$work/nosuch.npy"
grep -q "cannot open" "$work/err.txt" || fail "missing file not reported"
# the reason a shape is invalid reaches the message
run 1 --builtin llama_swiglu --n 63
grep -q "pair mode needs an even N, found 63" "$work/err.txt" || fail "odd N reason missing"
# a segment that tile_n 128 does not divide: coda check says so, coda run says why
printf 'input x : tile bf16\noutput y : bf16\nreduce p = rowsum(acc) per 96\nstore y = x\n' >"$work/seg.coda"
"$coda" check "$work/seg.coda" >"$work/out.txt" 2>"$work/err.txt" || fail "coda check rejected a valid program"
grep -q "segment 96 and tile_n 128" "$work/err.txt" || fail "coda check gives no note on the segment"
run 1 "$work/seg.coda" --m 8 --n 192 --k 16
grep -q "segment 96 and tile_n 128 do not divide" "$work/err.txt" || fail "coda run gives no reason for the segment"
# the size guard sums every buffer of the run: 24 tile inputs and 16 outputs
# at 22000 x 22000 need at least 28 bytes per element of each argument (bf16
# host copy and CPU buffer, f64 reference buffer, two results as double),
# far more than 16 GiB, though no single buffer is large; refused with the
# total, the limit and the flag that raises it, before anything is allocated
awk 'BEGIN { for (i = 0; i < 24; i++) print "input x" i " : tile bf16"
             for (i = 0; i < 16; i++) print "output y" i " : bf16"
             for (i = 0; i < 16; i++) print "store y" i " = acc + x" i " + x" (i + 8) }' >"$work/many.coda"
printf 'input x0 : tile bf16\noutput y0 : bf16\nstore y0 = acc + x0\n' >"$work/one.coda"
run 2 "$work/many.coda" --m 22000 --n 22000 --k 64
grep -q "more than the limit of 16 GiB (--max-memory GIB raises it)" "$work/err.txt" ||
  fail "the size guard does not name the limit and the flag"
need=$(sed -n 's/.*would need \([0-9.e+]*\) GiB in all.*/\1/p' "$work/err.txt")
awk -v g="${need:-0}" 'BEGIN { exit !(g * 2^30 >= 40 * 22000 * 22000 * 28) }' ||
  fail "the size guard's total ${need:-?} GiB is below the 40 arguments' lower bound"
# summed, not per buffer: at 1024 x 1024 one input fits in 0.5 GiB, 24 do not
run 2 "$work/many.coda" --m 1024 --n 1024 --k 64 --max-memory 0.5
grep -q "more than the limit of 0.5 GiB" "$work/err.txt" || fail "24 inputs at 1024^2 pass a 0.5 GiB limit"
run 0 "$work/one.coda" --m 1024 --n 1024 --k 64 --max-memory 0.5 --reps 1
run 2 "$work/one.coda" --max-memory 0
# the total is not a guess: the peak resident memory of a run stays below it
# (not under AddressSanitizer, whose shadow memory counts as resident)
if [ -x /usr/bin/time ] && ! grep -q -a -m1 __asan_init "$coda"; then
  "$coda" run "$work/many.coda" --m 1024 --n 1024 --k 64 --max-memory 0.01 >"$work/out.txt" 2>"$work/err.txt"
  need=$(sed -n 's/.*would need \([0-9.e+]*\) GiB in all.*/\1/p' "$work/err.txt")
  /usr/bin/time -f "%M" -o "$work/rss.txt" "$coda" run "$work/many.coda" --m 1024 --n 1024 --k 64 \
    --reps 1 >"$work/out.txt" 2>"$work/err.txt" || fail "the 24-input run at 1024^2 failed"
  awk -v g="${need:-0}" -v kb="$(tail -1 "$work/rss.txt")" 'BEGIN { exit !(kb * 1024 <= g * 2^30 * 1.05) }' ||
    fail "peak RSS $(tail -1 "$work/rss.txt") KB exceeds the guard's total ${need:-?} GiB"
fi
# parameters: --param binds the built-in's eps (its finished rstd changes,
# same seed), an unknown name and a parameter without a value are refused
mkdir -p "$work/p1" "$work/p2"
run 0 --builtin llama_rmsnorm --m 16 --n 64 --k 8 --reps 1 --out-dir "$work/p1"
run 0 --builtin llama_rmsnorm --m 16 --n 64 --k 8 --reps 1 --param eps=0.5 --out-dir "$work/p2"
cmp -s "$work/p1/h.f64.npy" "$work/p2/h.f64.npy" || fail "eps changed h"
cmp -s "$work/p1/r.f64.npy" "$work/p2/r.f64.npy" && fail "--param eps=0.5 did not change r"
run 1 --builtin llama_rmsnorm --m 16 --n 64 --k 8 --reps 1 --param epz=0.5
grep -q "unknown parameter 'epz' (it declares eps)" "$work/err.txt" || fail "unknown parameter not named"
printf 'param c\noutput y : f32\nstore y = c * acc\n' >"$work/param_c.coda"
run 1 "$work/param_c.coda" --m 16 --n 64 --k 8 --reps 1
grep -q "parameter 'c' has no value" "$work/err.txt" || fail "parameter without a value not reported"
run 0 "$work/param_c.coda" --m 16 --n 64 --k 8 --reps 1 --param c=-2
run 2 "$work/param_c.coda" --param c=x
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
