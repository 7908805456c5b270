#!/bin/sh
# The two maths of the fused-vs-plain programs that call a function
# `math fast` approximates or whose arithmetic it contracts (examples and
# built-ins): DIR/exact_NAME and DIR/fast_NAME are copies of each with its
# `math` line set (after the mode line, or first; docs/language.md,
# "Math"), whatever the program declares itself. Prints them as
# bench_fused arguments, followed by the probes.
#   bench/fused/math_variants.sh DIR
cd "$(dirname "$0")/../.." || exit 1
D=${1:?usage: bench/fused/math_variants.sh DIR}
mkdir -p "$D" || exit 1
for f in programs/examples/gelu_bwd_explicit.coda programs/examples/sqrelu_bwd.coda \
         programs/examples/geglu_scaled.coda programs/llama_swiglu.coda programs/llama_swiglu_bwd.coda \
         programs/llama_swiglu_bwd_pairs.coda programs/llama_norm_bwd.coda programs/gpt2_ln_linear_gelu.coda \
         programs/gpt2_gelu_bwd.coda; do
  for m in exact fast; do
    out="$D/${m}_$(basename "$f")"
    awk -v m="$m" 'BEGIN { done = 0 }
         /^math / { next }
         !done && /^mode / { print; print "math " m; done = 1; next }
         !done && !/^#/ && !/^[ \t]*$/ { print "math " m; done = 1 }
         { print }' "$f" > "$out" || exit 1
    printf -- '--program %s ' "$out"
  done
done
for f in bench/fused/probes/*.coda; do printf -- '--program %s ' "$f"; done
echo
