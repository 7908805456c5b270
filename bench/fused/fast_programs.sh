#!/bin/sh
# The `math fast` variants of the programs of the fused-vs-plain table that
# call functions the fast math approximates or contract (examples and
# built-ins), written into DIR as copies with `math fast` after the mode
# line; prints them as bench_fused arguments, with the probes.
#   bench/fused/fast_programs.sh DIR
cd "$(dirname "$0")/../.." || exit 1
D=${1:?usage: bench/fused/fast_programs.sh DIR}
mkdir -p "$D" || exit 1
for f in programs/examples/gelu_bwd_explicit.coda programs/examples/sqrelu_bwd.coda \
         programs/examples/geglu_scaled.coda programs/llama_swiglu.coda programs/llama_swiglu_bwd.coda \
         programs/llama_swiglu_bwd_pairs.coda programs/llama_norm_bwd.coda programs/gpt2_ln_linear_gelu.coda \
         programs/gpt2_gelu_bwd.coda; do
  out="$D/fast_$(basename "$f")"
  awk 'BEGIN { done = 0 }
       !done && /^mode / { print; print "math fast"; done = 1; next }
       !done && !/^#/ && !/^[ \t]*$/ { print "math fast"; done = 1 }
       { print }' "$f" > "$out" || exit 1
  printf -- '--program %s ' "$out"
done
for f in bench/fused/probes/*.coda; do printf -- '--program %s ' "$f"; done
echo
