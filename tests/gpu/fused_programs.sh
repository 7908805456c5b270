#!/bin/sh
# The programs of the fused-vs-plain table (bench_fused --program), as
# bench_fused arguments: every example program, and the built-ins a user
# would start from, forward and backward.
cd "$(dirname "$0")/../.." || exit 1
for f in programs/examples/*.coda; do printf -- '--program %s ' "$f"; done
for b in llama_residual_norm llama_swiglu llama_qkv_rope llama_swiglu_bwd llama_swiglu_bwd_pairs \
         llama_norm_bwd gpt2_ln_linear_gelu gpt2_gelu_bwd; do
  printf -- '--program builtin:%s ' "$b"
done
echo
