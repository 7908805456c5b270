"""PyTorch ops over coda's Llama epilogue programs, with autograd.

Custom ops (torch.library, namespace "coda", each with a fake/meta
implementation so torch.compile and FakeTensor tracing see shapes; each
backward is a custom op too):

  coda::llama_rmsnorm(x, w, eps) -> (h, r)
      h = x * w, r = rsqrt(mean(x^2) + eps) per row (programs/
      llama_rmsnorm.coda, a map pass): the RMSNorm of a block input that no
      GEMM produced; the consumer GEMM applies r in its epilogue.
  coda::llama_qkv_rope(h, wqkv, r, pos, freq) -> qkv
      z = r * (h wqkv^T), the adjacent column pairs of the Q and K heads
      rotated (programs/llama_qkv_rope.coda); backward programs/
      llama_rope_bwd.coda, then the dgrad and wgrad GEMMs.
  coda::qwen3_qkv_norm_rope(h, wqkv, r, gq, gk, pos, freq, heads_q, heads_kv, eps)
      -> (qkv, z, rq)
      Qwen3's qkv with the QK-norm before RoPE: z = r * (h wqkv^T) and the
      per-head rq = rsqrt(mean over the head of z^2 + eps) in the GEMM's
      epilogue (programs/qwen3_qkv.coda, its segments set to head_dim),
      then over the packed qkv viewed one head per row q = rope(z rq gq),
      k = rope(z rq gk), v = z (programs/qwen3_qknorm_rope.coda, the
      position read from a per-row table instead of derived from the row
      index: qwen3_qknorm_rope_pos); backward programs/llama_rope_bwd.coda
      over the head rows, programs/qwen3_qknorm_bwd.coda, then the dgrad
      and wgrad GEMMs as llama_qkv_rope's.
  coda::attention(qkv, batch, heads_q, heads_kv, window=0, scale=0.) -> (o, lse)
      causal GQA softmax attention on the packed qkv, optionally with a
      sliding window and a score scale (coda_attention_forward / _backward,
      their _mask forms with a window or scale, include/coda.h).
  coda::llama_residual_norm(a, wo, res, w, eps) -> (x, h, r)
      the out-projection with the residual add and the RMSNorm producer in
      its epilogue (programs/llama_residual_norm.coda):
      x = a wo^T + res,  h = x * w,  r = rsqrt(mean(x^2) + eps) per row.
  coda::llama_swiglu(h, wgu, r) -> (z, y)
      the gate/up projection scaled by the RMSNorm row statistic, with
      SwiGLU (programs/llama_swiglu.coda); wgu rows interleaved
      [g0, u0, g1, u1, ...]: z = r * (h wgu^T) (the (g, u) pairs, M x 2F),
      y = silu(g) * u (M x F). The backward runs programs/
      llama_swiglu_bwd_pairs.coda (dz and the row sums of z dz that the
      RMSNorm backward needs); the RMSNorm backward of residual_norm is the
      math of programs/llama_norm_bwd.coda split at the op boundary (this
      op gets dh and dr, where the fused block gets dz Wgu), as a map.
  coda::linear_residual(a, w, res) -> x
      x = a w^T + res (programs/llama_residual.coda).
  coda::llama_lm_head_loss(x, wnf, wout, targets, eps) -> (loss, ...)
      final RMSNorm, LM head and mean cross-entropy with the logits kept in
      the epilogue (llama_lm_head, llama_ce_stats, llama_ce_loss); the
      backward recomputes them in the epilogue of the same GEMM
      (llama_ce_bwd), then llama_head_norm_bwd.

Each op's autograd is registered on the op itself
(torch.library.register_autograd: setup_context saves what the backward op
needs), so torch.compile records one graph node per call instead of tracing
an autograd.Function's forward and backward at every call. The functions of
the same names (in this package's modules) call the ops. Chained as in a
Llama block (src/nn/llama3.c):

    h1, r1 = llama_rmsnorm(x, wn1)
    o, _ = attention(llama_qkv_rope(h1, wqkv, r1, pos, freq), batch, n_heads, n_kv_heads)
    x1, h2, r2 = llama_residual_norm(o, wo, x, wn2)
    z, y = llama_swiglu(h2, wgu, r2)
    x_out = linear_residual(y, wd, x1)

apply_to_llama(model) patches a Hugging Face LlamaForCausalLM to run on them,
apply_to_qwen3(model) a Qwen3ForCausalLM (qwen3_qkv_norm_rope for the qkv
step; coda/_hf_llama.py).

GPT-2's block (src/nn/gpt2.c; weights in x out, Hugging Face's Conv1D):
  coda::gpt2_ln_linear(x, gamma, beta, w, b, eps) -> (z, mu, rs)
      z = LayerNorm(x) w + b: gpt2_ln_stats (map), gpt2_fold_bias,
      gpt2_ln_linear; backward gpt2_qkv_dots, gpt2_ln_bwd, the wgrad.
  coda::gpt2_residual_ln(a, w, b, res, gamma, eps) -> (x, h, mu, rs)
      x = a w + b + res with the next LayerNorm's producer (h, mu, rs not
      differentiable: gpt2_mlp's backward goes through x).
  coda::gpt2_mlp(x, h, mu, rs, gamma, beta, wfc, bfc, wproj, bproj) -> (y, u)
      y = x + gelu(LayerNorm(x) wfc + bfc) wproj + bproj
      (gpt2_ln_linear_gelu, gpt2_bias_residual; backward gpt2_gelu_bwd,
      gpt2_ln_bwd with the residual).
  coda::gpt2_lm_head_loss(x, gamma, beta, wout, targets, eps) -> (loss, ...)
      final LayerNorm, head and mean cross-entropy (gpt2_lm_head and the
      Llama head's llama_ce_stats, llama_ce_loss; backward gpt2_ce_bwd,
      gpt2_ln_bwd). apply_to_gpt2(model) patches a GPT2LMHeadModel
      (coda/_hf_gpt2.py).

Gemma 3's soft-capped head:
  coda::gemma3_lm_head_loss(x, wnf, wout, targets, cap, eps) -> (loss, ...)
      llama_lm_head_loss with the logits cap * tanh(l / cap)
      (gemma3_lm_head; backward gemma3_ce_bwd, llama_head_norm_bwd).
      apply_to_gemma3(model) patches a Gemma3ForCausalLM
      (coda/_hf_gemma3.py: its layer ops over the gemma3_* programs and
      Qwen3's QK-norm op).

dtypes: bfloat16 (fp32 compute; r fp32), float32, and float64 on the CPU
backend's exact mode (fp64 compute, for gradcheck). Device: CPU tensors run
on a CPU context; CUDA tensors on a CUDA context bound to torch's current
stream (a context per device and stream, cached), viewed without copies.
"""

from ._attn import attention
from ._block import linear_residual, llama_residual_norm, llama_rmsnorm, llama_swiglu
from ._common import context_for
from ._gpt2 import gpt2_lm_head_loss, gpt2_ln_linear, gpt2_mlp, gpt2_residual_ln
from ._head import gemma3_lm_head_loss, llama_lm_head_loss
from ._patch import apply_to_gemma3, apply_to_gpt2, apply_to_llama, apply_to_qwen3
from ._rope import llama_qkv_rope, qk_norm_rope_tables, qwen3_qkv_norm_rope, rope_row_permutation, rope_tables

# helpers that coda._hf_llama, coda._hf_gemma3 and the tests reach as coda.torch._NAME
from ._block import _swiglu_bwd_map  # noqa: F401
from ._common import _check_2d, _linear_bwd, _program, _row_scaled_linear_bwd, _scalar, _stat_dtype  # noqa: F401

__all__ = ["llama_residual_norm", "llama_swiglu", "llama_rmsnorm", "llama_qkv_rope", "attention", "linear_residual",
           "llama_lm_head_loss", "qwen3_qkv_norm_rope", "rope_tables", "qk_norm_rope_tables", "rope_row_permutation",
           "gpt2_ln_linear", "gpt2_residual_ln", "gpt2_mlp", "gpt2_lm_head_loss", "gemma3_lm_head_loss", "context_for",
           "apply_to_llama", "apply_to_qwen3", "apply_to_gpt2", "apply_to_gemma3"]
