#!/bin/sh
# coda gradcheck over the whole domain (issue 39): the clamped SwiGLU
# backward without its clamp masks passes with acc in the default range
# but FAILS with --range acc=-10:10 and with --points (values beside the
# clamps at +-7), while the right backward passes all three; DyT's scalar
# alpha is linked with its per-row dalpha (summed over rows), and a
# dalpha off by a factor fails; error messages name what was given.
#   sh tests/cli/gradcheck_domain.sh PATH/TO/coda PROGRAMS_DIR WORKDIR
set -u
coda=$1
progs=$2
work=$3
rm -rf "$work"
mkdir -p "$work"
fails=0
run() { # run WANT_RC ARGS...
  want=$1
  shift
  "$coda" gradcheck "$@" >"$work/out.txt" 2>"$work/err.txt"
  rc=$?
  if [ "$rc" -ne "$want" ]; then
    fails=$((fails + 1))
    echo "FAIL: coda gradcheck $* -> $rc, expected $want"
    sed 's/^/  | /' "$work/out.txt" "$work/err.txt" | head -20
  else
    echo "ok: coda gradcheck $* -> $rc"
  fi
}
need() { # need FILE PATTERN WHAT
  grep -q -- "$2" "$work/$1" || { fails=$((fails + 1)); echo "FAIL: $3"; sed 's/^/  | /' "$work/$1" | head -5; }
}
fwd="$progs/examples/swiglu_clamp.coda"
bwd="$progs/examples/swiglu_clamp_bwd.coda"
# the backward without its clamp masks
sed -e 's/ \* (x < 7)$//' -e 's/ \* (v > -7) \* (v < 7)$//' "$bwd" >"$work/nomask.coda"
grep -q "x < 7\|v < 7" "$work/nomask.coda" && { fails=$((fails + 1)); echo "FAIL: sed left a mask"; }
run 0 "$fwd" "$bwd" --wrt acc=dz --grad y=dy --range acc=-10:10
run 0 "$fwd" "$bwd" --wrt acc=dz --grad y=dy
run 0 "$fwd" "$bwd" --wrt acc=dz --grad y=dy --points --m 4 --n 16
run 1 "$fwd" "$work/nomask.coda" --wrt acc=dz --grad y=dy --range acc=-10:10
need out.txt "dacc .*MISMATCH" "the missing mask is not reported"
run 1 "$fwd" "$work/nomask.coda" --wrt acc=dz --grad y=dy --points --m 4 --n 16
need out.txt "MISMATCH" "--points does not find the missing mask"
# inside the clamps the bug cannot be seen: the default range +-[0.1, 4)
run 0 "$fwd" "$work/nomask.coda" --wrt acc=dz --grad y=dy
# DyT: scalar alpha (gradient per row, summed), w and b per column
run 0 "$progs/examples/dyt.coda" "$progs/examples/dyt_bwd.coda" --wrt acc=dx,alpha=dalpha,w=dw,b=db --grad y=acc
need out.txt "dalpha .*ok" "dalpha not checked"
sed 's/^store dx = dt \* alpha$/store dx = dt * alpha\nreduce dap2 = rowsum(dt * x * 1.01)\nfinish dalpha2 = sum(dap2)/' \
  "$progs/examples/dyt_bwd.coda" >"$work/dyt_bad.coda"
run 1 "$progs/examples/dyt.coda" "$work/dyt_bad.coda" --wrt acc=dx,alpha=dalpha2 --grad y=acc
need out.txt "dalpha .*MISMATCH" "a wrong dalpha is not reported"
# messages name what was given
run 1 "$progs/examples/dyt.coda" "$progs/examples/dyt_bwd.coda" --wrt acc=dx --grad y=acc --range nosuch=-3:5
need err.txt "range link nosuch=-3:5" "the range link is not named with its range"
run 1 "$progs/examples/dyt.coda" "$progs/examples/dyt_bwd.coda" --wrt w=dalpha --grad y=acc
need err.txt "wrt w=dalpha" "the link whose shapes differ is not named"
run 2 "$fwd" "$bwd" --wrt acc=dz --grad y=dy --range acc=5:1
need err.txt "acc=5:1" "the bad range is not named"
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
