#!/bin/sh
# coda gradcheck: built-in forward/backward pairs pass; a backward with one
# constant changed fails (exit status 1, MISMATCH); a link naming nothing
# is a usage error with a message.
#   sh tests/cli/gradcheck.sh PATH/TO/coda PROGRAMS_DIR WORKDIR
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
run 0 builtin:llama_swiglu builtin:llama_swiglu_bwd_pairs --wrt acc=dz --grad y=dy --value r=1
# with r = 1, dL/dr = sum_n (g dg + u du): the backward's zdz reduction is checked too
run 0 builtin:llama_swiglu builtin:llama_swiglu_bwd_pairs --wrt acc=dz,r=zdz --grad y=dy --value r=1
grep -q "zdz .*ok" "$work/out.txt" || { fails=$((fails + 1)); echo "FAIL: zdz not checked"; }
# RoPE: the backward rotates back; pos and freq are shared by name, y is the saved qkv
run 0 builtin:llama_qkv_rope builtin:llama_rope_bwd --wrt acc=dz --grad qkv=dy --save qkv=y --value r=1
run 0 builtin:gpt2_ln_linear_gelu builtin:gpt2_gelu_bwd --wrt acc=du,dv=db --grad g=acc --value rs=1 --m 4 --n 10
run 0 builtin:gpt2_ln_linear_gelu "$progs/examples/gelu_bwd_explicit.coda" --wrt acc=du --grad g=acc --value rs=1
grep -q PASS "$work/out.txt" || { fails=$((fails + 1)); echo "FAIL: no PASS line"; }
# one constant changed: 3 * 0.044715 = 0.134145 -> 0.13
sed 's/0\.134145/0.13/' "$progs/examples/gelu_bwd_explicit.coda" >"$work/broken.coda"
run 1 builtin:gpt2_ln_linear_gelu "$work/broken.coda" --wrt acc=du --grad g=acc --value rs=1
grep -q MISMATCH "$work/out.txt" || { fails=$((fails + 1)); echo "FAIL: no MISMATCH line"; }
# the forward's r left random: dL/dacc = dz r, not dz
run 1 builtin:llama_swiglu builtin:llama_swiglu_bwd_pairs --wrt acc=dz --grad y=dy
# the tutorial's pair (docs/tutorial.md), and its bug: the factor 2 of 2 ds y dropped
run 0 "$progs/examples/sqrelu.coda" "$progs/examples/sqrelu_bwd.coda" --wrt acc=dpre,b=db --grad y=acc,s=ds
sed 's/2 \* ds \* v/ds * v/' "$progs/examples/sqrelu_bwd.coda" >"$work/sqrelu_bad.coda"
cmp -s "$progs/examples/sqrelu_bwd.coda" "$work/sqrelu_bad.coda" && { fails=$((fails + 1)); echo "FAIL: sed did not change the program"; }
run 1 "$progs/examples/sqrelu.coda" "$work/sqrelu_bad.coda" --wrt acc=dpre,b=db --grad y=acc,s=ds
# parameters: a soft-capping forward and backward with cap bound on the
# command line pass; a backward with cap 30 written in (no parameter) fails
printf 'param cap\noutput y : f64\noutput z : f64\nstore y = cap * tanh(acc / cap)\nstore z = acc\n' >"$work/cap.coda"
printf 'param cap\ninput dy : tile f64\ninput z : tile f64\noutput dz : f64\nt = tanh(z / cap)\nstore dz = dy * (1 - t * t)\n' >"$work/cap_bwd.coda"
printf 'input dy : tile f64\ninput z : tile f64\noutput dz : f64\nt = tanh(z / 30)\nstore dz = dy * (1 - t * t)\n' >"$work/cap_bwd30.coda"
run 0 "$work/cap.coda" "$work/cap_bwd.coda" --wrt acc=dz --grad y=dy --param cap=0.5
run 1 "$work/cap.coda" "$work/cap_bwd30.coda" --wrt acc=dz --grad y=dy --param cap=0.5
grep -q MISMATCH "$work/out.txt" || { fails=$((fails + 1)); echo "FAIL: cap 0.5 vs 30 not a mismatch"; }
run 1 "$work/cap.coda" "$work/cap_bwd.coda" --wrt acc=dz --grad y=dy
grep -q "parameter 'cap' has no value" "$work/err.txt" || { fails=$((fails + 1)); echo "FAIL: unbound cap not reported"; }
run 1 "$work/cap.coda" "$work/cap_bwd.coda" --wrt acc=dz --grad y=dy --param cap=0.5,caq=1
grep -q "caq" "$work/err.txt" || { fails=$((fails + 1)); echo "FAIL: unknown parameter not named"; }
run 2 "$work/cap.coda" "$work/cap_bwd.coda" --wrt acc=dz --grad y=dy --param cap=inf
# bad links and usage
run 1 builtin:llama_swiglu builtin:llama_swiglu_bwd_pairs --wrt nosuch=dz --grad y=dy
grep -q "nosuch" "$work/err.txt" || { fails=$((fails + 1)); echo "FAIL: message does not name the link"; }
run 1 builtin:llama_swiglu builtin:llama_swiglu_bwd_pairs --wrt acc=dz
grep -q "not linked" "$work/err.txt" || { fails=$((fails + 1)); echo "FAIL: unlinked input not reported"; }
run 1 builtin:llama_swiglu builtin:llama_swiglu_bwd --wrt acc=dz --grad y=acc --value r=1
grep -q "x2" "$work/err.txt" || { fails=$((fails + 1)); echo "FAIL: x2 not reported"; }
run 2 builtin:llama_swiglu
run 2 builtin:llama_swiglu builtin:llama_swiglu_bwd_pairs --wrt acc
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
