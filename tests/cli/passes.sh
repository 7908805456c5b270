#!/bin/sh
# Whole operators in one file (issue 39): z-loss, applied QK-norm (and its
# backward) and DyT's backward with its total dalpha are each one file that one
# `coda run --strict` runs (every output, partial and finished value
# within the fp64 rule) and `coda check` lists as passes; gradcheck takes
# them as one unit: DyT's scalar alpha against the total, z-loss's logits
# gradient against its total loss, QK-norm's backward against its forward,
# and a wrong factor in each fails.
#   sh tests/cli/passes.sh PATH/TO/coda PROGRAMS_DIR WORKDIR
set -u
coda=$1
progs=$2/examples
work=$3
rm -rf "$work"
mkdir -p "$work"
fails=0
expect() { # expect WANT_RC WHAT CMD...
  want=$1
  what=$2
  shift 2
  "$@" >"$work/out.txt" 2>"$work/err.txt"
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    fails=$((fails + 1))
    echo "FAIL: $what -> $rc, expected $want"
    sed 's/^/  | /' "$work/out.txt" "$work/err.txt" | head -20
  else
    echo "ok: $what -> $rc"
  fi
}
need() { # need PATTERN WHAT
  grep -q -- "$1" "$work/out.txt" || { fails=$((fails + 1)); echo "FAIL: $2"; sed 's/^/  | /' "$work/out.txt" | head -8; }
}
expect 0 "check zloss" "$coda" check "$progs/zloss.coda"
need "^passes (3):" "zloss: three passes"
need "^pass 1: the GEMM's epilogue, M x N; then finishes lse" "zloss: lse finished after pass 1"
need "^pass 3: a map over M x 1" "zloss: the total's map"
expect 0 "run zloss" "$coda" run "$progs/zloss.coda" --m 70 --n 300 --k 32 --range tgt=-1:299 --strict --reps 1
need "loss       finish  1 x 1" "zloss: the total loss is printed"
expect 0 "run qknorm_applied" "$coda" run "$progs/qknorm_applied.coda" --m 96 --n 64 --k 32 --strict --reps 1
need "^  r          finish  96 x 1" "qknorm: r is printed"
expect 0 "run dyt_bwd_total" "$coda" run "$progs/dyt_bwd_total.coda" --m 130 --n 72 --k 32 --strict --reps 1
need "^  dalpha     finish  1 x 1" "dyt: dalpha is one value"
need "^  dap        partial 3 x 1" "dyt: the total's partials, one per row tile"
# out-dir: the finished statistic and the total come back as files
mkdir -p "$work/d"
expect 0 "run zloss --out-dir" "$coda" run "$progs/zloss.coda" --m 8 --n 40 --k 16 --reps 1 --out-dir "$work/d"
for f in dl lse loss lossp; do
  [ -s "$work/d/$f.npy" ] || { fails=$((fails + 1)); echo "FAIL: $f.npy not written"; }
done
# gradcheck: the scalar's gradient as a total
expect 0 "gradcheck dyt total" "$coda" gradcheck "$progs/dyt.coda" "$progs/dyt_bwd_total.coda" \
  --wrt acc=dx,alpha=dalpha,w=dw,b=db --grad y=acc
sed 's/reduce dap = total(dt \* x)/reduce dap = total(dt * x * 1.001)/' "$progs/dyt_bwd_total.coda" >"$work/dyt_bad.coda"
grep -q "1.001" "$work/dyt_bad.coda" || { fails=$((fails + 1)); echo "FAIL: sed did not change dyt"; }
expect 1 "gradcheck dyt total off by 0.1%" "$coda" gradcheck "$progs/dyt.coda" "$work/dyt_bad.coda" \
  --wrt alpha=dalpha --grad y=acc
# applied QK-norm: the backward reads two statistics of its own (r, mean(g x))
expect 0 "gradcheck qknorm_applied" "$coda" gradcheck "$progs/qknorm_applied.coda" "$progs/qknorm_applied_bwd.coda" \
  --wrt acc=dx,gamma=dgamma --grad y=acc --save acc=x
sed 's/x \* r \* r \* r \* gx/x * r * r * gx/' "$progs/qknorm_applied_bwd.coda" >"$work/qk_bad.coda"
grep -q "x \* r \* r \* gx" "$work/qk_bad.coda" || { fails=$((fails + 1)); echo "FAIL: sed did not change qknorm"; }
expect 1 "gradcheck qknorm_applied with r^2 for r^3" "$coda" gradcheck "$progs/qknorm_applied.coda" "$work/qk_bad.coda" \
  --wrt acc=dx,gamma=dgamma --grad y=acc --save acc=x
expect 0 "run qknorm_applied_bwd" "$coda" run "$progs/qknorm_applied_bwd.coda" --m 96 --n 64 --k 32 --strict --reps 1
# z-loss: forward and backward are the same file; loss's gradient goes to scale
expect 0 "gradcheck zloss" "$coda" gradcheck "$progs/zloss.coda" "$progs/zloss.coda" \
  --wrt acc=dl --grad loss=scale --value scale=1 --param zc=0.05
sed 's/(1 + 2 \* zc \* lse)/(1 + zc * lse)/' "$progs/zloss.coda" >"$work/zloss_bad.coda"
grep -q "(1 + zc \* lse)" "$work/zloss_bad.coda" || { fails=$((fails + 1)); echo "FAIL: sed did not change zloss"; }
expect 1 "gradcheck zloss without the factor 2" "$coda" gradcheck "$progs/zloss.coda" "$work/zloss_bad.coda" \
  --wrt acc=dl --grad loss=scale --value scale=1 --param zc=0.05
# a segmented statistic cannot be read: the message says what can
printf 'output y : f32\nreduce ss = rowsum(acc * acc) per 8\nfinish r = rstd(ss, 1e-6)\nstore y = acc * r\n' \
  >"$work/seg.coda"
expect 1 "check a segmented read" "$coda" check "$work/seg.coda"
grep -q "seg.coda:4:" "$work/err.txt" && grep -q "one segment per row" "$work/err.txt" ||
  { fails=$((fails + 1)); echo "FAIL: segmented read message"; sed 's/^/  | /' "$work/err.txt"; }
[ "$fails" -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all passed"
