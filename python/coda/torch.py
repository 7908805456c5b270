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
the same names below call the ops. Chained as in a Llama block
(src/nn/llama3.c):

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

import math
import re
import threading
from typing import Optional

import torch

from . import _core

__all__ = ["llama_residual_norm", "llama_swiglu", "llama_rmsnorm", "llama_qkv_rope", "attention", "linear_residual",
           "llama_lm_head_loss", "qwen3_qkv_norm_rope", "rope_tables", "qk_norm_rope_tables", "rope_row_permutation",
           "gpt2_ln_linear", "gpt2_residual_ln", "gpt2_mlp", "gpt2_lm_head_loss", "gemma3_lm_head_loss", "context_for",
           "apply_to_llama", "apply_to_qwen3", "apply_to_gpt2", "apply_to_gemma3"]

# --------------------------------------------------------------- contexts

_lock = threading.Lock()
_contexts = {}


def context_for(t):
    """The coda context for tensor t: CPU (exact mode for float64), or CUDA
    on t's device and torch's current stream there (cached per stream)."""
    if t.is_cuda:
        if t.dtype == torch.float64:
            raise _core.CodaError(9, "float64 runs on the CPU backend only (exact mode)")
        dev = t.device.index if t.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(dev).cuda_stream
        key = ("cuda", dev, stream)
        make = lambda: _core.Context("cuda", device=dev, stream=stream)  # noqa: E731
    else:
        prec = "f64" if t.dtype == torch.float64 else "f32"
        key = ("cpu", prec)
        make = lambda: _core.Context("cpu", precision=prec)  # noqa: E731
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = _contexts[key] = make()
        return ctx


# --------------------------------------------------------------- programs

_programs = {}

_RN_BWD = """
input s : tile bf16
input w : col bf16
input r : row f32
input dx : tile bf16
input dh : tile bf16
input dr : row f32
input inv_n : scalar f32
output ds : bf16
store ds = dx + dh * w - dr * (r * r * r) * s * inv_n
reduce dwp = colsum(dh * s)
finish dw = sum(dwp)
"""

_ROWSCALE_GEMM = """
input r : row f32
output o : bf16
store o = acc * r
"""

_ROWSCALE_MAP = """
input x : tile bf16
input r : row f32
output o : bf16
store o = x * r
"""

# The RMSNorm backward of llama_rmsnorm's (h = x * w, r): the first
# block's and the final norm's, whose x no GEMM produced.
_RMS_BWD = """
input x : tile bf16
input w : col bf16
input r : row f32
input dh : tile bf16
input dr : row f32
input inv_n : scalar f32
output dx : bf16
store dx = dh * w - dr * (r * r * r) * x * inv_n
reduce dwp = colsum(dh * x)
finish dw = sum(dwp)
"""

_DT_WORD = {torch.bfloat16: None, torch.float32: "f32", torch.float64: "f64"}
_TEXTS = {"rn_bwd": _RN_BWD, "rms_bwd": _RMS_BWD, "rowscale_gemm": _ROWSCALE_GEMM,
          "rowscale_map": _ROWSCALE_MAP}


def _qknorm_rope_pos_text():
    """qwen3_qknorm_rope with the position of each head row read from a row
    input `pos` instead of derived from the row index ((row div heads) mod
    seq, positions 0..seq-1 in every sequence): any position_ids. The rest
    of the built-in's text is taken as it is."""
    text = _core.Program.builtin("qwen3_qknorm_rope").text
    for a, b in (("input seq : scalar i32", "input pos : row i32"), ("imod(idiv(row, ht), seq)", "pos")):
        if text.count(a) != 1:
            raise _core.CodaError(13, "built-in qwen3_qknorm_rope: expected one '%s' in its text" % a)
        text = text.replace(a, b)
    return text


# programs derived from a built-in's text
_DERIVED = {"qwen3_qknorm_rope_pos": _qknorm_rope_pos_text}

# the head size the per-head segments of these built-ins are written for
# (`rowsum(...) per 128`), rewritten to the model's (as the Qwen3 plan does)
_SEG_WRITTEN = {"qwen3_qkv": 128}


def _program(name, dtype, eps=None, seg=None):
    """Built-in program `name` (or one of the texts above), retyped for dtype:
    bf16 as written; float32 / float64: every floating declaration. eps:
    the value of its parameter `eps`, the RMSNorm epsilon (the built-ins'
    default is 1e-5; Hugging Face configurations often say 1e-6). seg: the
    head size for a program with per-head segments (_SEG_WRITTEN)."""
    if dtype not in _DT_WORD:
        raise TypeError("coda ops: dtype %s not supported (bfloat16, float32, float64)" % dtype)
    key = (name, dtype, eps, seg)
    p = _programs.get(key)
    if p is None:
        if name in _TEXTS:
            p = _core.Program.parse(_TEXTS[name])
        elif name in _DERIVED:
            p = _core.Program.parse(_DERIVED[name]())
        else:
            p = _core.Program.builtin(name)
        if seg is not None and seg != _SEG_WRITTEN[name]:
            old = "per %d" % _SEG_WRITTEN[name]
            if old not in p.text:
                raise _core.CodaError(13, "program %s has no '%s' segment" % (name, old))
            p = _core.Program.parse(re.sub(r"\b%s\b" % old, "per %d" % int(seg), p.text))
        if eps is not None and float(eps) != 1e-5:
            if not (float(eps) > 0.0):
                raise ValueError("coda ops: RMSNorm eps must be > 0, got %r" % (eps,))
            if "eps" not in p.params:
                raise _core.CodaError(13, "program %s has no parameter eps (it has %s)" % (name, sorted(p.params)))
            p = p.bind(eps=float(eps))
        if _DT_WORD[dtype]:
            p = p.retyped(_DT_WORD[dtype])
        _programs[key] = p
    return p


_scalars = {}


def _scalar(value, dtype, device):
    """A 1 x 1 input tensor holding value (cached: the ops only read it)."""
    key = (float(value), dtype, device)
    t = _scalars.get(key)
    if t is None:
        if len(_scalars) > 256:
            _scalars.clear()
        t = _scalars[key] = torch.full((1, 1), float(value), dtype=dtype, device=device)
    return t


def _stat_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_2d(name, t):
    if t.dim() != 2:
        raise ValueError("coda ops: %s must be 2-D, got shape %s" % (name, tuple(t.shape)))


def _linear_bwd(ctx, dy, a, w):
    """The gradients of y = a w^T: da = dy w, dw = dy^T a."""
    da = torch.empty_like(a)
    ctx.gemm(dy, w, out=da)                 # dy (M x N) w (N x K)
    dw = torch.empty_like(w)
    ctx.gemm(dy, a, trans_a=True, out=dw)   # dy^T (N x M) a (M x K)
    return da, dw


def _row_scaled_linear_bwd(ctx, h, w, r, dz, zdz):
    """The gradients of z = r * (h w^T) given dz and zdz = sum z dz per row:
    dh = r * (dz w), dw = dz^T (h r), dr = zdz / r."""
    st = _stat_dtype(h.dtype)
    r = r.contiguous()
    dh = torch.empty_like(h)
    ctx.gemm_epilogue(_program("rowscale_gemm", h.dtype), dz, w, r=r, o=dh)   # r * (dz w)
    hr = torch.empty_like(h)
    ctx.map(_program("rowscale_map", h.dtype), x=h, r=r, o=hr)               # h * r
    dw = torch.empty_like(w)
    ctx.gemm(dz, hr, trans_a=True, out=dw)                                   # dz^T (h r)
    dr = (zdz / r.to(st)).to(r.dtype)
    return dh, dw, dr


# ------------------------------------------------------- residual + RMSNorm

@torch.library.custom_op("coda::llama_residual_norm", mutates_args=())
def _residual_norm(a: torch.Tensor, wo: torch.Tensor, res: torch.Tensor, w: torch.Tensor,
                   eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_2d("a", a)
    _check_2d("wo", wo)
    ctx = context_for(a)
    M, N = a.shape[0], wo.shape[0]
    x = torch.empty((M, N), dtype=a.dtype, device=a.device)
    h = torch.empty_like(x)
    r = torch.empty((M,), dtype=_stat_dtype(a.dtype), device=a.device)
    ctx.gemm_epilogue(_program("llama_residual_norm", a.dtype, eps), a, wo, trans_b=True, res=res, w=w, x=x, h=h, r=r)
    return x, h, r


@_residual_norm.register_fake
def _(a, wo, res, w, eps=1e-5):
    M, N = a.shape[0], wo.shape[0]
    return (a.new_empty((M, N)), a.new_empty((M, N)), a.new_empty((M,), dtype=_stat_dtype(a.dtype)))


@torch.library.custom_op("coda::llama_residual_norm_backward", mutates_args=())
def _residual_norm_bwd(a: torch.Tensor, wo: torch.Tensor, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor,
                       dx: torch.Tensor, dh: torch.Tensor, dr: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(a)
    M, N = x.shape
    st = _stat_dtype(a.dtype)
    inv_n = _scalar(1.0 / N, st, a.device)
    ds = torch.empty_like(x)
    dw = torch.empty((N,), dtype=st, device=a.device)
    ctx.map(_program("rn_bwd", a.dtype), M, N, s=x, w=w, r=r, dx=dx.contiguous(), dh=dh.contiguous(),
            dr=dr.contiguous(), inv_n=inv_n, ds=ds, dw=dw)
    da, dwo = _linear_bwd(ctx, ds, a, wo)
    return da, dwo, ds, dw.to(w.dtype)


@_residual_norm_bwd.register_fake
def _(a, wo, x, w, r, dx, dh, dr):
    return torch.empty_like(a), torch.empty_like(wo), torch.empty_like(x), torch.empty_like(w)


def _residual_norm_setup(ctx, inputs, output):
    a, wo, _, w, _ = inputs
    x, _, r = output
    ctx.save_for_backward(a, wo, x, w, r)


def _residual_norm_grad(ctx, dx, dh, dr):
    a, wo, x, w, r = ctx.saved_tensors
    da, dwo, dres, dw = torch.ops.coda.llama_residual_norm_backward(a, wo, x, w, r, dx, dh, dr)
    return da, dwo, dres, dw, None


_residual_norm.register_autograd(_residual_norm_grad, setup_context=_residual_norm_setup)


def llama_residual_norm(a, wo, res, w, eps=1e-5):
    """x = a wo^T + res, h = x * w, r = rsqrt(mean(x^2, -1) + eps): one
    GEMM with its epilogue; differentiable in all four inputs."""
    return torch.ops.coda.llama_residual_norm(a, wo, res, w, eps)


# ------------------------------------------------------------------ SwiGLU

@torch.library.custom_op("coda::llama_swiglu", mutates_args=())
def _swiglu(h: torch.Tensor, wgu: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _check_2d("h", h)
    _check_2d("wgu", wgu)
    ctx = context_for(h)
    M, F2 = h.shape[0], wgu.shape[0]
    z = torch.empty((M, F2), dtype=h.dtype, device=h.device)
    y = torch.empty((M, F2 // 2), dtype=h.dtype, device=h.device)
    ctx.gemm_epilogue(_program("llama_swiglu", h.dtype), h, wgu, trans_b=True, r=r.contiguous(), z=z, y=y)
    return z, y


@_swiglu.register_fake
def _(h, wgu, r):
    M, F2 = h.shape[0], wgu.shape[0]
    return h.new_empty((M, F2)), h.new_empty((M, F2 // 2))


def _swiglu_bwd_map(ctx, z, dy, program="llama_swiglu_bwd_pairs"):
    """The SwiGLU backward over the pairs z given dy (llama_swiglu_bwd_pairs):
    dz, y = silu(g) * u recomputed from z, and zdz = sum z dz per row
    (program gemma3_geglu_bwd_pairs: the same for GeGLU, y = gelu(g) * u)."""
    M, F2 = z.shape
    dz = torch.empty_like(z)
    zdz = torch.empty((M,), dtype=_stat_dtype(z.dtype), device=z.device)
    y = torch.empty((M, F2 // 2), dtype=z.dtype, device=z.device)
    ctx.map(_program(program, z.dtype), M, F2, z=z, dy=dy.contiguous(), dz=dz, y=y, zdz=zdz)
    return dz, y, zdz


@torch.library.custom_op("coda::llama_swiglu_backward", mutates_args=())
def _swiglu_bwd(h: torch.Tensor, wgu: torch.Tensor, r: torch.Tensor, z: torch.Tensor,
                dz_out: Optional[torch.Tensor], dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(h)
    st = _stat_dtype(h.dtype)
    dz, _, zdz = _swiglu_bwd_map(ctx, z, dy)
    if dz_out is not None:
        # a gradient reaching z itself (z is also an output) adds to the pairs'
        dz = dz + dz_out
        zdz = zdz + (dz_out.to(st) * z.to(st)).sum(-1)
    return _row_scaled_linear_bwd(ctx, h, wgu, r, dz, zdz)


@_swiglu_bwd.register_fake
def _(h, wgu, r, z, dz_out, dy):
    return torch.empty_like(h), torch.empty_like(wgu), torch.empty_like(r)


def _swiglu_setup(ctx, inputs, output):
    h, wgu, r = inputs
    ctx.save_for_backward(h, wgu, r, output[0])
    ctx.set_materialize_grads(False)   # no gradient reaching z: dz_out None


def _swiglu_grad(ctx, dz, dy):
    h, wgu, r, z = ctx.saved_tensors
    if dy is None:
        dy = torch.zeros_like(z[:, : z.shape[1] // 2])
    return torch.ops.coda.llama_swiglu_backward(h, wgu, r, z, dz, dy)


_swiglu.register_autograd(_swiglu_grad, setup_context=_swiglu_setup)


def llama_swiglu(h, wgu, r):
    """z = r * (h wgu^T) (interleaved gate/up pairs), y = silu(g) * u: one
    GEMM with its epilogue; differentiable in h, wgu and r."""
    return torch.ops.coda.llama_swiglu(h, wgu, r)


# ----------------------------------------------------------------- RMSNorm

@torch.library.custom_op("coda::llama_rmsnorm", mutates_args=())
def _rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor]:
    _check_2d("x", x)
    ctx = context_for(x)
    M, N = x.shape
    h = torch.empty_like(x)
    r = torch.empty((M,), dtype=_stat_dtype(x.dtype), device=x.device)
    ctx.map(_program("llama_rmsnorm", x.dtype, eps), M, N, x=x.contiguous(), w=w, h=h, r=r)
    return h, r


@_rmsnorm.register_fake
def _(x, w, eps=1e-5):
    return torch.empty_like(x), x.new_empty((x.shape[0],), dtype=_stat_dtype(x.dtype))


@torch.library.custom_op("coda::llama_rmsnorm_backward", mutates_args=())
def _rmsnorm_bwd(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, dh: torch.Tensor,
                 dr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ctx = context_for(x)
    M, N = x.shape
    st = _stat_dtype(x.dtype)
    dx = torch.empty_like(x)
    dw = torch.empty((N,), dtype=st, device=x.device)
    ctx.map(_program("rms_bwd", x.dtype), M, N, x=x, w=w, r=r, dh=dh.contiguous(), dr=dr.contiguous(),
            inv_n=_scalar(1.0 / N, st, x.device), dx=dx, dw=dw)
    return dx, dw.to(w.dtype)


@_rmsnorm_bwd.register_fake
def _(x, w, r, dh, dr):
    return torch.empty_like(x), torch.empty_like(w)


def _rmsnorm_setup(ctx, inputs, output):
    x, w, _ = inputs
    ctx.save_for_backward(x, w, output[1])


def _rmsnorm_grad(ctx, dh, dr):
    x, w, r = ctx.saved_tensors
    dx, dw = torch.ops.coda.llama_rmsnorm_backward(x, w, r, dh, dr)
    return dx, dw, None


_rmsnorm.register_autograd(_rmsnorm_grad, setup_context=_rmsnorm_setup)


def llama_rmsnorm(x, w, eps=1e-5):
    """The RMSNorm producer of a block input that no GEMM made (programs/
    llama_rmsnorm.coda, a map pass): h = x * w, r = rsqrt(mean(x^2, -1) +
    eps) per row, so that RMSNorm(x) W^T = r * (h W^T) in the consumer
    GEMM's epilogue (llama_qkv_rope, llama_swiglu, llama_lm_head_loss)."""
    return torch.ops.coda.llama_rmsnorm(x, w, eps)


# ------------------------------------------------------------- qkv + RoPE

def rope_tables(positions, inv_freq, n_heads, n_kv_heads, dtype=torch.float32):
    """The position and frequency tables of llama_qkv_rope: pos, int32, one
    per row (positions flattened), and freq, one per qkv column: within each
    Q and K head the column pair (2j, 2j+1) rotates by positions * inv_freq[j]
    (inv_freq: head_dim / 2 angular frequencies, as Hugging Face's
    rotary embedding holds them), given in turns split as a float-float pair
    (hi at 2j, lo at 2j+1; float64: hi alone); V columns 0. dtype: that of
    the op's tensors (float64 for the CPU exact mode, else float32). Both
    on the device of positions."""
    dev = positions.device
    turns = inv_freq.detach().to(device=dev, dtype=torch.float64) / (2.0 * math.pi)
    if dtype == torch.float64:
        pair = torch.stack([turns, torch.zeros_like(turns)], dim=1)
    else:
        hi = turns.to(torch.float32).to(torch.float64)
        pair = torch.stack([hi, turns - hi], dim=1)
    head = pair.reshape(-1)
    v = torch.zeros(n_kv_heads * head.numel(), dtype=torch.float64, device=dev)
    freq = torch.cat([head.repeat(n_heads + n_kv_heads), v])
    st = torch.float64 if dtype == torch.float64 else torch.float32
    return positions.reshape(-1).to(torch.int32), freq.to(st)


@torch.library.custom_op("coda::llama_qkv_rope", mutates_args=())
def _qkv_rope(h: torch.Tensor, wqkv: torch.Tensor, r: torch.Tensor, pos: torch.Tensor,
              freq: torch.Tensor) -> torch.Tensor:
    _check_2d("h", h)
    _check_2d("wqkv", wqkv)
    ctx = context_for(h)
    qkv = torch.empty((h.shape[0], wqkv.shape[0]), dtype=h.dtype, device=h.device)
    ctx.gemm_epilogue(_program("llama_qkv_rope", h.dtype), h, wqkv, trans_b=True, r=r.contiguous(),
                      pos=pos.contiguous(), freq=freq.contiguous(), qkv=qkv)
    return qkv


@_qkv_rope.register_fake
def _(h, wqkv, r, pos, freq):
    return h.new_empty((h.shape[0], wqkv.shape[0]))


@torch.library.custom_op("coda::llama_qkv_rope_backward", mutates_args=())
def _qkv_rope_bwd(h: torch.Tensor, wqkv: torch.Tensor, r: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor,
                  qkv: torch.Tensor, dqkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(h)
    M, N = qkv.shape
    st = _stat_dtype(h.dtype)
    dz = torch.empty_like(qkv)
    zdz = torch.empty((M,), dtype=st, device=h.device)
    # dz = R^-1 dqkv; zdz = sum qkv dqkv = sum z dz (the rotation is orthogonal)
    ctx.map(_program("llama_rope_bwd", h.dtype), M, N, y=qkv, dy=dqkv.contiguous(), pos=pos.contiguous(),
            freq=freq.contiguous(), dz=dz, zdz=zdz)
    return _row_scaled_linear_bwd(ctx, h, wqkv, r, dz, zdz)


@_qkv_rope_bwd.register_fake
def _(h, wqkv, r, pos, freq, qkv, dqkv):
    return torch.empty_like(h), torch.empty_like(wqkv), torch.empty_like(r)


def _qkv_rope_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs, output)


def _qkv_rope_grad(ctx, dqkv):
    dh, dw, dr = torch.ops.coda.llama_qkv_rope_backward(*ctx.saved_tensors, dqkv)
    return dh, dw, dr, None, None


_qkv_rope.register_autograd(_qkv_rope_grad, setup_context=_qkv_rope_setup)


def llama_qkv_rope(h, wqkv, r, pos, freq):
    """The qkv projection with the RMSNorm row scale and RoPE in its
    epilogue (programs/llama_qkv_rope.coda): z = r * (h wqkv^T), then every
    adjacent column pair (2j, 2j+1) of the Q and K heads rotated by
    pos * 2 pi freq (rope_tables). wqkv rows: [q heads | k heads | v heads],
    the rotary pairs adjacent within each head (permute_rope_rows converts
    Hugging Face's half-split rows). Backward: programs/llama_rope_bwd.coda
    (the inverse rotation and sum z dz), then dh, dwqkv, dr."""
    return torch.ops.coda.llama_qkv_rope(h, wqkv, r, pos, freq)


def rope_row_permutation(n_heads, n_kv_heads, head_dim, device=None):
    """Index of the Hugging Face qkv row that each coda row takes: HF's
    rotary pairs are (i, i + head_dim/2) within a head, coda's (2j, 2j+1)
    (coda_llama_qkv_row, include/coda_nn.h); V rows stay. wqkv_coda =
    wqkv_hf[perm]; the dot products of q and k are unchanged, so attention
    on the permuted qkv gives the same output."""
    half = head_dim // 2
    within = torch.empty(head_dim, dtype=torch.long)
    within[0::2] = torch.arange(half)
    within[1::2] = torch.arange(half) + half
    nqk = n_heads + n_kv_heads
    qk = (torch.arange(nqk)[:, None] * head_dim + within[None, :]).reshape(-1)
    v = torch.arange(n_kv_heads * head_dim) + nqk * head_dim
    return torch.cat([qk, v]).to(device)


# ------------------------------------------------- qkv + QK-norm + RoPE (Qwen3)

def qk_norm_rope_tables(positions, inv_freq, n_heads, n_kv_heads, dtype=torch.float32):
    """The tables of qwen3_qkv_norm_rope, whose RoPE runs over the packed
    qkv viewed one head per row ((rows heads) x head_dim, heads = n_heads
    + 2 n_kv_heads): pos, int32, one per head row (the row's position for
    its Q and K heads, 0 for its V heads, which the backward's inverse
    rotation then leaves as they are), and freq, one per column of a head
    (as rope_tables gives them for one head)."""
    pos, freq = rope_tables(positions, inv_freq, 1, 0, dtype)
    M, nqk = pos.numel(), n_heads + n_kv_heads
    posh = torch.cat([pos[:, None].expand(M, nqk), pos.new_zeros((M, n_kv_heads))], 1)
    return posh.reshape(-1), freq


def _heads(wqkv_rows, heads_q, heads_kv):
    H = heads_q + 2 * heads_kv
    if wqkv_rows % H:
        raise ValueError("coda ops: %d qkv rows are not %d heads of one size" % (wqkv_rows, H))
    return H, wqkv_rows // H


@torch.library.custom_op("coda::qwen3_qkv_norm_rope", mutates_args=())
def _qwen3_qkv(h: torch.Tensor, wqkv: torch.Tensor, r: torch.Tensor, gq: torch.Tensor, gk: torch.Tensor,
               pos: torch.Tensor, freq: torch.Tensor, heads_q: int, heads_kv: int,
               eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_2d("h", h)
    _check_2d("wqkv", wqkv)
    ctx = context_for(h)
    M, N = h.shape[0], wqkv.shape[0]
    H, hd = _heads(N, heads_q, heads_kv)
    dev = h.device
    pre = torch.empty((M, N), dtype=h.dtype, device=dev)
    rq = torch.empty((M, H), dtype=_stat_dtype(h.dtype), device=dev)
    # z = r * (h wqkv^T) and the per-head statistics of the QK-norm (qwen3_qkv, segments of hd)
    ctx.gemm_epilogue(_program("qwen3_qkv", h.dtype, eps, seg=hd), h, wqkv, trans_b=True, r=r.contiguous(),
                      qkv=pre, rq=rq)
    qkv = torch.empty_like(pre)
    i32 = torch.int32
    ctx.map(_program("qwen3_qknorm_rope_pos", h.dtype), M * H, hd, x=pre.view(M * H, hd), r=rq.view(M * H),
            gq=gq.contiguous(), gk=gk.contiguous(), pos=pos.contiguous(), freq=freq.contiguous(),
            ht=_scalar(H, i32, dev), hq=_scalar(heads_q, i32, dev), hqk=_scalar(heads_q + heads_kv, i32, dev),
            y=qkv.view(M * H, hd))
    return qkv, pre, rq


@_qwen3_qkv.register_fake
def _(h, wqkv, r, gq, gk, pos, freq, heads_q, heads_kv, eps=1e-6):
    M, N = h.shape[0], wqkv.shape[0]
    return (h.new_empty((M, N)), h.new_empty((M, N)),
            h.new_empty((M, heads_q + 2 * heads_kv), dtype=_stat_dtype(h.dtype)))


@torch.library.custom_op("coda::qwen3_qkv_norm_rope_backward", mutates_args=())
def _qwen3_qkv_bwd(h: torch.Tensor, wqkv: torch.Tensor, r: torch.Tensor, gq: torch.Tensor, gk: torch.Tensor,
                   pos: torch.Tensor, freq: torch.Tensor, qkv: torch.Tensor, pre: torch.Tensor, rq: torch.Tensor,
                   dqkv: torch.Tensor, heads_q: int, heads_kv: int) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(h)
    M, N = qkv.shape
    H, hd = _heads(N, heads_q, heads_kv)
    MH = M * H
    dev = h.device
    st = _stat_dtype(h.dtype)
    pos, freq = pos.contiguous(), freq.contiguous()
    # the inverse rotation per head row (V rows: position 0, unrotated) and
    # zp = sum over the head of qkv dqkv
    dz = torch.empty_like(qkv)
    zp = torch.empty((MH,), dtype=st, device=dev)
    ctx.map(_program("llama_rope_bwd", h.dtype), MH, hd, y=qkv.view(MH, hd), dy=dqkv.contiguous().view(MH, hd),
            pos=pos, freq=freq, dz=dz.view(MH, hd), zdz=zp)
    # the QK-norm backward: dpre, the gradient of z; sum z dpre partials; dgq, dgk
    dpre = torch.empty_like(qkv)
    dgq = torch.empty((hd,), dtype=st, device=dev)
    dgk = torch.empty((hd,), dtype=st, device=dev)
    i32 = torch.int32
    out = ctx.map(_program("qwen3_qknorm_bwd", h.dtype), MH, hd, x=pre.view(MH, hd), dy=dz.view(MH, hd),
                  r=rq.reshape(MH), zp=zp, gq=gq.contiguous(), gk=gk.contiguous(),
                  invhd=_scalar(1.0 / hd, st, dev), ht=_scalar(H, i32, dev), hq=_scalar(heads_q, i32, dev),
                  hqk=_scalar(heads_q + heads_kv, i32, dev), dx=dpre.view(MH, hd), dgq=dgq, dgk=dgk)
    del dz
    zdz = out["zq"].reshape(M, -1).sum(1)   # the row's sum over its heads' partials
    dh, dw, dr = _row_scaled_linear_bwd(ctx, h, wqkv, r, dpre, zdz)
    return dh, dw, dr, dgq.to(gq.dtype), dgk.to(gk.dtype)


@_qwen3_qkv_bwd.register_fake
def _(h, wqkv, r, gq, gk, pos, freq, qkv, pre, rq, dqkv, heads_q, heads_kv):
    return (torch.empty_like(h), torch.empty_like(wqkv), torch.empty_like(r), torch.empty_like(gq),
            torch.empty_like(gk))


def _qwen3_qkv_setup(ctx, inputs, output):
    h, wqkv, r, gq, gk, pos, freq, heads_q, heads_kv, _ = inputs
    qkv, pre, rq = output
    ctx.save_for_backward(h, wqkv, r, gq, gk, pos, freq, qkv, pre, rq)
    ctx.heads = (heads_q, heads_kv)
    ctx.mark_non_differentiable(pre, rq)   # kept for the backward only


def _qwen3_qkv_grad(ctx, dqkv, dpre, drq):
    dh, dw, dr, dgq, dgk = torch.ops.coda.qwen3_qkv_norm_rope_backward(*ctx.saved_tensors, dqkv, *ctx.heads)
    return dh, dw, dr, dgq, dgk, None, None, None, None, None


_qwen3_qkv.register_autograd(_qwen3_qkv_grad, setup_context=_qwen3_qkv_setup)


def qwen3_qkv_norm_rope(h, wqkv, r, gq, gk, pos, freq, heads_q, heads_kv, eps=1e-6):
    """The Qwen3 qkv projection with the QK-norm before RoPE: z = r * (h
    wqkv^T) with the per-head statistics rq = rsqrt(mean over the head of
    z^2 + eps) in the GEMM's epilogue (programs/qwen3_qkv.coda, segments of
    head_dim), then over the head rows q = rope(z rq gq), k = rope(z rq gk),
    v = z (qwen3_qknorm_rope with the row's position from pos;
    qk_norm_rope_tables). wqkv rows and gq, gk columns: the rotary pairs
    adjacent within each head, as llama_qkv_rope's. Returns (qkv, z, rq);
    z and rq are kept for the backward and not differentiable. Backward:
    llama_rope_bwd over the head rows, programs/qwen3_qknorm_bwd.coda, then
    dh, dwqkv, dr as llama_qkv_rope's."""
    return torch.ops.coda.qwen3_qkv_norm_rope(h, wqkv, r, gq, gk, pos, freq, heads_q, heads_kv, eps)


# --------------------------------------------------------------- attention

@torch.library.custom_op("coda::attention", mutates_args=())
def _attention(qkv: torch.Tensor, batch: int, heads_q: int, heads_kv: int, window: int = 0,
               scale: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    _check_2d("qkv", qkv)
    ctx = context_for(qkv)
    hd = qkv.shape[1] // (heads_q + 2 * heads_kv)
    o = torch.empty((qkv.shape[0], heads_q * hd), dtype=qkv.dtype, device=qkv.device)
    lse = torch.empty((qkv.shape[0], heads_q), dtype=_stat_dtype(qkv.dtype), device=qkv.device)
    ctx.attention_forward(qkv.contiguous(), batch, heads_q, heads_kv, out=o, lse=lse, window=window, scale=scale)
    return o, lse


@_attention.register_fake
def _(qkv, batch, heads_q, heads_kv, window=0, scale=0.0):
    hd = qkv.shape[1] // (heads_q + 2 * heads_kv)
    return (qkv.new_empty((qkv.shape[0], heads_q * hd)),
            qkv.new_empty((qkv.shape[0], heads_q), dtype=_stat_dtype(qkv.dtype)))


@torch.library.custom_op("coda::attention_backward", mutates_args=())
def _attention_bwd(qkv: torch.Tensor, o: torch.Tensor, lse: torch.Tensor, do: torch.Tensor, batch: int,
                   heads_q: int, heads_kv: int, window: int = 0, scale: float = 0.0) -> torch.Tensor:
    ctx = context_for(qkv)
    dqkv = torch.empty_like(qkv)
    ctx.attention_backward(qkv.contiguous(), o, lse, do.contiguous(), batch, heads_q, heads_kv, dqkv=dqkv,
                           window=window, scale=scale)
    return dqkv


@_attention_bwd.register_fake
def _(qkv, o, lse, do, batch, heads_q, heads_kv, window=0, scale=0.0):
    return torch.empty_like(qkv)


def _attention_setup(ctx, inputs, output):
    qkv, batch, heads_q, heads_kv, window, scale = inputs   # defaults filled in by torch
    o, lse = output
    ctx.save_for_backward(qkv, o, lse)
    ctx.dims = (batch, heads_q, heads_kv, window, scale)
    ctx.mark_non_differentiable(lse)


def _attention_grad(ctx, do, dlse):
    qkv, o, lse = ctx.saved_tensors
    return torch.ops.coda.attention_backward(qkv, o, lse, do, *ctx.dims), None, None, None, None, None


_attention.register_autograd(_attention_grad, setup_context=_attention_setup)


def attention(qkv, batch, heads_q, heads_kv, window=0, scale=0.0):
    """Causal softmax attention with grouped-query heads (coda_attention_forward,
    include/coda.h) on the packed qkv, (batch*seq) x ((heads_q + 2 heads_kv)
    head_dim), per row [q heads | k heads | v heads]; scores scale * q.k
    (scale 0: 1/sqrt(head_dim)); window > 0: query t sees keys t - window <
    j <= t (coda_attention_forward_mask; the default window 0 and scale 0
    are the plain call). Returns (o, lse): o (batch*seq) x (heads_q
    head_dim), heads in order; lse (batch*seq) x heads_q, not
    differentiable. Backward: coda_attention_backward(_mask)."""
    return torch.ops.coda.attention(qkv, batch, heads_q, heads_kv, window, scale)


# ------------------------------------------------------- linear + residual

@torch.library.custom_op("coda::linear_residual", mutates_args=())
def _linear_residual(a: torch.Tensor, w: torch.Tensor, res: torch.Tensor) -> torch.Tensor:
    _check_2d("a", a)
    _check_2d("w", w)
    ctx = context_for(a)
    x = torch.empty((a.shape[0], w.shape[0]), dtype=a.dtype, device=a.device)
    ctx.gemm_epilogue(_program("llama_residual", a.dtype), a, w, trans_b=True, res=res, x=x)
    return x


@_linear_residual.register_fake
def _(a, w, res):
    return a.new_empty((a.shape[0], w.shape[0]))


@torch.library.custom_op("coda::linear_residual_backward", mutates_args=())
def _linear_residual_bwd(a: torch.Tensor, w: torch.Tensor, dx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return _linear_bwd(context_for(a), dx.contiguous(), a, w)


@_linear_residual_bwd.register_fake
def _(a, w, dx):
    return torch.empty_like(a), torch.empty_like(w)


def _linear_residual_setup(ctx, inputs, output):
    a, w, _ = inputs
    ctx.save_for_backward(a, w)


def _linear_residual_grad(ctx, dx):
    a, w = ctx.saved_tensors
    da, dw = torch.ops.coda.linear_residual_backward(a, w, dx)
    return da, dw, dx


_linear_residual.register_autograd(_linear_residual_grad, setup_context=_linear_residual_setup)


def linear_residual(a, w, res):
    """x = a w^T + res, the residual add in the GEMM's epilogue
    (programs/llama_residual.coda: the down projection of a block)."""
    return torch.ops.coda.linear_residual(a, w, res)


# ------------------------------------------------- LM head + cross-entropy

def _cap_scalars(cap, st, dev):
    return dict(cap=_scalar(cap, st, dev), icap=_scalar(1.0 / cap, st, dev))


def _head_forward(x, wnf, wout, targets, eps, keep, cap=0.0):
    """The final RMSNorm, the LM head GEMM with the online LSE and the
    target's logit in its epilogue (storing the logits z when keep), and the
    mean loss. cap > 0: the logits soft-capped, cap * tanh(l / cap)
    (gemma3_lm_head; not with keep). Returns (loss, h, r, lse, valid,
    count, z or None)."""
    _check_2d("x", x)
    _check_2d("wout", wout)
    ctx = context_for(x)
    M, D = x.shape
    V = wout.shape[0]
    st = _stat_dtype(x.dtype)
    dev = x.device
    tgt = _head_targets(targets, M)
    h = torch.empty_like(x)
    r = torch.empty((M,), dtype=st, device=dev)
    ctx.map(_program("llama_rmsnorm", x.dtype, eps), M, D, x=x.contiguous(), w=wnf, h=h, r=r)
    lse = torch.empty((M,), dtype=st, device=dev)
    if cap > 0.0:
        z = None
        out = ctx.gemm_epilogue(_program("gemma3_lm_head", x.dtype), h, wout, trans_b=True, r=r, tgt=tgt, lse=lse,
                                **_cap_scalars(cap, st, dev))
    elif keep:
        z = torch.empty((M, V), dtype=x.dtype, device=dev)
        out = ctx.gemm_epilogue(_program("llama_lm_head_keep", x.dtype), h, wout, trans_b=True, r=r, tgt=tgt, lse=lse,
                                z=z)
    else:
        # the logits r * (h wout^T) stay in the epilogue: online LSE partials and the target's logit
        z = None
        out = ctx.gemm_epilogue(_program("llama_lm_head", x.dtype), h, wout, trans_b=True, r=r, tgt=tgt, lse=lse)
    loss, valid, cnt = _ce_loss(ctx, lse, out["pick"], tgt, V, x.dtype)
    return loss, h, r, lse, valid, cnt, z


def _head_targets(targets, M):
    tgt = targets.reshape(-1).to(torch.int32).contiguous()
    if tgt.numel() != M:
        raise ValueError("coda ops: targets has %d entries, x %d rows" % (tgt.numel(), M))
    return tgt


def _ce_loss(ctx, lse, pick, tgt, V, dtype):
    """The mean cross-entropy from a head GEMM's per-row lse and target
    logit (llama_ce_stats, llama_ce_loss; the Llama and GPT-2 heads'):
    returns (loss, valid (M), count)."""
    M = lse.shape[0]
    st = _stat_dtype(dtype)
    dev = lse.device
    valid = torch.empty((M, 1), dtype=st, device=dev)
    lsum = torch.empty((1, 1), dtype=st, device=dev)
    cnt = torch.empty((1, 1), dtype=st, device=dev)
    ctx.map(_program("llama_ce_stats", dtype), M, 1, lse=lse, pick=pick, tgt=tgt,
            nv=_scalar(float(V), st, dev), valid=valid, lsum=lsum, cnt=cnt)
    loss = torch.empty((1, 1), dtype=st, device=dev)
    ctx.map(_program("llama_ce_loss", dtype), 1, 1, lsum=lsum, cnt=cnt, loss=loss)
    return loss.reshape(()), valid.reshape(M), cnt.reshape(())


def _head_backward(x, wnf, wout, targets, h, z, r, lse, valid, cnt, dloss, cap=0.0):
    """dx, dwnf, dwout of _head_forward's loss: d loss / d logits (dl, and
    zdz = sum z dl per row) from the stored logits z by a map, or with z
    None recomputed in the epilogue of the head GEMM on h (cap > 0: through
    the soft cap's derivative, gemma3_ce_bwd); then the dgrad with the
    final RMSNorm's backward and dwout = dl^T (x r w)."""
    ctx = context_for(x)
    M, D = x.shape
    V = wout.shape[0]
    st = _stat_dtype(x.dtype)
    dev = x.device
    tgt = targets.reshape(-1).to(torch.int32).contiguous()
    # scaled by the incoming gradient through the row weights
    valid_s = (valid.to(st) * dloss.to(st)).contiguous()
    dl = torch.empty((M, V), dtype=x.dtype, device=dev)
    zdz = torch.empty((M,), dtype=st, device=dev)
    if cap > 0.0:
        ctx.gemm_epilogue(_program("gemma3_ce_bwd", x.dtype), h, wout, trans_b=True, r=r, tgt=tgt, lse=lse,
                          valid=valid_s, cnt=cnt.reshape(1, 1), dl=dl, zdz=zdz, **_cap_scalars(cap, st, dev))
    elif z is not None:
        ctx.map(_program("llama_ce_bwd_map", x.dtype), z=z, tgt=tgt, lse=lse, valid=valid_s, cnt=cnt.reshape(1, 1),
                dl=dl, zdz=zdz)
    else:
        ctx.gemm_epilogue(_program("llama_ce_bwd", x.dtype), h, wout, trans_b=True, r=r, tgt=tgt, lse=lse,
                          valid=valid_s, cnt=cnt.reshape(1, 1), dl=dl, zdz=zdz)
    dx = torch.empty_like(x)
    post = torch.empty_like(x)
    dw = torch.empty((D,), dtype=st, device=dev)
    ctx.gemm_epilogue(_program("llama_head_norm_bwd", x.dtype), dl, wout, x=x, w=wnf, r=r, zdz=zdz,
                      inv_n=_scalar(1.0 / D, st, dev), dx=dx, post=post, dw=dw)
    dwout = torch.empty_like(wout)
    ctx.gemm(dl, post, trans_a=True, out=dwout)    # dl^T (x r w)
    return dx, dw.to(wnf.dtype), dwout


@torch.library.custom_op("coda::llama_lm_head_loss", mutates_args=())
def _lm_head_loss(x: torch.Tensor, wnf: torch.Tensor, wout: torch.Tensor, targets: torch.Tensor,
                  eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor, torch.Tensor]:
    return _head_forward(x, wnf, wout, targets, eps, False)[:6]


def _head_stats_fake(x):
    M = x.shape[0]
    st = _stat_dtype(x.dtype)
    return x.new_empty((), dtype=st), x.new_empty((M,), dtype=st), x.new_empty((M,), dtype=st), \
        x.new_empty((M,), dtype=st), x.new_empty((), dtype=st)


@_lm_head_loss.register_fake
def _(x, wnf, wout, targets, eps=1e-5):
    loss, r, lse, valid, cnt = _head_stats_fake(x)
    return loss, torch.empty_like(x), r, lse, valid, cnt


@torch.library.custom_op("coda::llama_lm_head_loss_backward", mutates_args=())
def _lm_head_loss_bwd(x: torch.Tensor, wnf: torch.Tensor, wout: torch.Tensor, targets: torch.Tensor,
                      h: torch.Tensor, r: torch.Tensor, lse: torch.Tensor, valid: torch.Tensor, cnt: torch.Tensor,
                      dloss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _head_backward(x, wnf, wout, targets, h, None, r, lse, valid, cnt, dloss)


@_lm_head_loss_bwd.register_fake
def _(x, wnf, wout, targets, h, r, lse, valid, cnt, dloss):
    return torch.empty_like(x), torch.empty_like(wnf), torch.empty_like(wout)


def _lm_head_loss_setup(ctx, inputs, output):
    x, wnf, wout, targets, _ = inputs
    _, h, r, lse, valid, cnt = output
    ctx.save_for_backward(x, wnf, wout, targets, h, r, lse, valid, cnt)
    # only the loss carries a gradient; the rest are statistics for the backward
    ctx.mark_non_differentiable(h, r, lse, valid, cnt)


def _lm_head_loss_grad(backward):
    """The autograd formula of a head-loss op whose saved tensors are its
    backward op's arguments (h or z, by the op)."""
    def grad(ctx, dloss, *_):
        return (*backward(*ctx.saved_tensors, dloss), None, None)   # the weights' gradients; none for targets, eps
    return grad


_lm_head_loss.register_autograd(_lm_head_loss_grad(torch.ops.coda.llama_lm_head_loss_backward),
                                setup_context=_lm_head_loss_setup)


# The same loss keeping the logits (the head plan's CODA_LLAMA_KEEP_LOGITS):
# the forward stores z (M x V, the inputs' dtype; llama_lm_head_keep) and
# the backward's d loss / d logits is the map llama_ce_bwd_map over z
# instead of a GEMM that recomputes the logits (three vocabulary-wide
# GEMMs a step, not four), for M x V values kept from the forward to the
# backward. In bf16 z is the logits rounded to bf16, lse from fp32 logits.

@torch.library.custom_op("coda::llama_lm_head_loss_keep", mutates_args=())
def _lm_head_loss_keep(x: torch.Tensor, wnf: torch.Tensor, wout: torch.Tensor, targets: torch.Tensor,
                       eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                   torch.Tensor, torch.Tensor]:
    loss, _, r, lse, valid, cnt, z = _head_forward(x, wnf, wout, targets, eps, True)
    return loss, z, r, lse, valid, cnt


@_lm_head_loss_keep.register_fake
def _(x, wnf, wout, targets, eps=1e-5):
    loss, r, lse, valid, cnt = _head_stats_fake(x)
    return loss, x.new_empty((x.shape[0], wout.shape[0])), r, lse, valid, cnt


@torch.library.custom_op("coda::llama_lm_head_loss_keep_backward", mutates_args=())
def _lm_head_loss_keep_bwd(x: torch.Tensor, wnf: torch.Tensor, wout: torch.Tensor, targets: torch.Tensor,
                           z: torch.Tensor, r: torch.Tensor, lse: torch.Tensor, valid: torch.Tensor,
                           cnt: torch.Tensor, dloss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _head_backward(x, wnf, wout, targets, None, z, r, lse, valid, cnt, dloss)


@_lm_head_loss_keep_bwd.register_fake
def _(x, wnf, wout, targets, z, r, lse, valid, cnt, dloss):
    return torch.empty_like(x), torch.empty_like(wnf), torch.empty_like(wout)


_lm_head_loss_keep.register_autograd(_lm_head_loss_grad(torch.ops.coda.llama_lm_head_loss_keep_backward),
                                     setup_context=_lm_head_loss_setup)


def llama_lm_head_loss(x, wnf, wout, targets, eps=1e-5, keep_logits=False):
    """Final RMSNorm, LM head and mean cross-entropy:
    loss = mean over rows m with 0 <= targets[m] < V of
    logsumexp(l[m]) - l[m, targets[m]], l = RMSNorm(x; wnf, eps) wout^T.
    Returns (loss, count), count the number of counted targets (rows with
    another target, e.g. -100, are ignored). By default the logits are
    never stored: the forward keeps only per-row statistics (programs
    llama_rmsnorm, llama_lm_head, llama_ce_stats, llama_ce_loss), the
    backward recomputes the logits in the epilogue of the same GEMM
    (llama_ce_bwd), then the dgrad with the RMSNorm backward
    (llama_head_norm_bwd) and dwout. keep_logits=True stores the logits in
    the forward's epilogue (M x V values in x's dtype, kept for the
    backward) and the backward maps over them instead of recomputing them:
    one vocabulary-wide GEMM fewer. loss and count are fp32 (fp64 for
    float64 inputs)."""
    op = torch.ops.coda.llama_lm_head_loss_keep if keep_logits else torch.ops.coda.llama_lm_head_loss
    loss, _, _, _, _, cnt = op(x, wnf, wout, targets, eps)
    return loss, cnt


# Gemma 3's soft-capped head (the head plan's logit_softcap): the logits
# l = cap * tanh(z / cap), z = RMSNorm(x; wnf) wout^T, into the LSE and the
# target's logit (gemma3_lm_head); the backward recomputes them and takes
# the cap's derivative 1 - (l / cap)^2 (gemma3_ce_bwd), then
# llama_head_norm_bwd and dwout as the Llama head's. The logits are never
# stored (no keep_logits form).

@torch.library.custom_op("coda::gemma3_lm_head_loss", mutates_args=())
def _gemma3_head_loss(x: torch.Tensor, wnf: torch.Tensor, wout: torch.Tensor, targets: torch.Tensor, cap: float,
                      eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                  torch.Tensor, torch.Tensor]:
    if not (cap > 0.0):
        raise ValueError("coda ops: gemma3_lm_head_loss: soft cap %r must be > 0" % (cap,))
    return _head_forward(x, wnf, wout, targets, eps, False, cap)[:6]


@_gemma3_head_loss.register_fake
def _(x, wnf, wout, targets, cap, eps=1e-6):
    loss, r, lse, valid, cnt = _head_stats_fake(x)
    return loss, torch.empty_like(x), r, lse, valid, cnt


@torch.library.custom_op("coda::gemma3_lm_head_loss_backward", mutates_args=())
def _gemma3_head_loss_bwd(x: torch.Tensor, wnf: torch.Tensor, wout: torch.Tensor, targets: torch.Tensor,
                          h: torch.Tensor, r: torch.Tensor, lse: torch.Tensor, valid: torch.Tensor, cnt: torch.Tensor,
                          dloss: torch.Tensor, cap: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return _head_backward(x, wnf, wout, targets, h, None, r, lse, valid, cnt, dloss, cap)


@_gemma3_head_loss_bwd.register_fake
def _(x, wnf, wout, targets, h, r, lse, valid, cnt, dloss, cap):
    return torch.empty_like(x), torch.empty_like(wnf), torch.empty_like(wout)


def _gemma3_head_loss_setup(ctx, inputs, output):
    _lm_head_loss_setup(ctx, inputs[:4] + inputs[5:], output)
    ctx.cap = inputs[4]


def _gemma3_head_loss_grad(ctx, dloss, *_):
    dx, dw, dwout = torch.ops.coda.gemma3_lm_head_loss_backward(*ctx.saved_tensors, dloss, ctx.cap)
    return dx, dw, dwout, None, None, None


_gemma3_head_loss.register_autograd(_gemma3_head_loss_grad, setup_context=_gemma3_head_loss_setup)


def gemma3_lm_head_loss(x, wnf, wout, targets, cap, eps=1e-6):
    """llama_lm_head_loss with Gemma 3's logit soft cap: loss = mean over
    the counted rows of logsumexp(l[m]) - l[m, targets[m]], l = cap *
    tanh(RMSNorm(x; wnf, eps) wout^T / cap), cap > 0. wnf is the norm's
    scale itself (a Gemma model's 1 + w). Programs llama_rmsnorm,
    gemma3_lm_head, llama_ce_stats, llama_ce_loss; backward gemma3_ce_bwd
    (the logits recomputed, times the cap's derivative), llama_head_norm_bwd,
    dwout. Returns (loss, count)."""
    loss, _, _, _, _, cnt = torch.ops.coda.gemma3_lm_head_loss(x, wnf, wout, targets, float(cap), eps)
    return loss, cnt


# ------------------------------------------------------------------ GPT-2
#
# The GPT-2 block's LayerNorm runs as the C plan's producer/consumer pair
# (src/nn/gpt2.c): the consumer GEMM takes h = x * gamma and corrects its
# accumulator with the row statistics mu, rs and the per-column vectors
# c = W gamma, dv = W beta + b (gpt2_fold_bias; recomputed from the weights
# in every forward and backward: 1 x N GEMMs); the LayerNorm backward takes
# its two row means as dots s1, s2 in the consumer's output space, where dz
# is produced (gpt2_qkv_dots, gpt2_gelu_bwd, gpt2_ce_bwd), in the epilogue of
# the consumer's dgrad (gpt2_ln_bwd). Weights are Hugging Face's Conv1D
# layout, in x out (K x N: z = LN(x) w + b), the tied head's out x in.

_GELU_MAP = """
math fast
input u : tile bf16
output g : bf16
store g = gelu(u)
"""

# gpt2_ce_bwd over stored logits z (the head's keep_logits): the map
# llama_ce_bwd_map is to llama_ce_bwd, with the LayerNorm backward's dots
# s1 = sum dl c, s2 = sum dl (z - dv) of gpt2_ce_bwd.
_GPT2_CE_BWD_MAP = """
input z : tile bf16
input c : col f32
input dv : col f32
input tgt : row i32
input lse : row f32
input valid : row f32
input cnt : scalar f32
output dl : bf16
onehot = col == tgt
d = (exp(z - lse) - onehot) * (valid / max(cnt, 1.0))
store dl = d
reduce p1 = rowsum(d * c)
reduce p2 = rowsum(d * (z - dv))
finish s1 = sum(p1)
finish s2 = sum(p2)
"""

_TEXTS.update({"gelu_map": _GELU_MAP, "gpt2_ce_bwd_map": _GPT2_CE_BWD_MAP})


def _gpt2_ln_bwd_nores_text():
    """gpt2_ln_bwd without its residual gradient dres (a LayerNorm whose
    input's other uses get their gradients from other ops)."""
    text = _core.Program.builtin("gpt2_ln_bwd").text
    for a, b in (("input dres : tile bf16\n", ""), ("v = dres + rs", "v = rs")):
        if text.count(a) != 1:
            raise _core.CodaError(13, "built-in gpt2_ln_bwd: expected one '%s' in its text" % a.strip())
        text = text.replace(a, b)
    return text


_DERIVED.update({"gpt2_ln_bwd_nores": _gpt2_ln_bwd_nores_text,
                 "gpt2_lm_head_keep": lambda: _core.Program.builtin("gpt2_lm_head").variant(keep="l",
                                                                                          keep_as="z").text})


def _gpt2_fold(ctx, gamma, beta, w, b, trans_b=False):
    """c = W gamma and dv = W beta + b (b None: no bias), the per-column
    vectors of a LayerNorm's consumer (gpt2_fold_bias); w in x out, or out x
    in with trans_b. fp32 (fp64 for float64)."""
    K = gamma.shape[0]
    g, be = gamma.reshape(1, K).contiguous(), beta.reshape(1, K).contiguous()
    c = ctx.gemm(g, w, trans_b=trans_b)
    if b is None:
        dv = ctx.gemm(be, w, trans_b=trans_b)
    else:
        dv = ctx.gemm_epilogue(_program("gpt2_fold_bias", w.dtype), be, w, trans_b=trans_b, b=b.contiguous())["dv"]
    return c.reshape(-1), dv.reshape(-1)


def _gpt2_ln_stats(ctx, x, gamma, eps):
    """h = x * gamma and the LayerNorm statistics mu, rs of x's rows (gpt2_ln_stats)."""
    M, D = x.shape
    st = _stat_dtype(x.dtype)
    h = torch.empty_like(x)
    mu = torch.empty((M,), dtype=st, device=x.device)
    rs = torch.empty((M,), dtype=st, device=x.device)
    ctx.map(_program("gpt2_ln_stats", x.dtype, eps), M, D, x=x, gamma=gamma, h=h, mu=mu, rs=rs)
    return h, mu, rs


def _row_dots(M, N, like):
    st = _stat_dtype(like.dtype)
    return (torch.empty((M,), dtype=st, device=like.device), torch.empty((M,), dtype=st, device=like.device),
            torch.empty((N,), dtype=st, device=like.device))


def _gpt2_ln_bwd(ctx, dz, w, trans_b, x, gamma, beta, mu, rs, s1, s2, dres):
    """The dgrad of a LayerNorm consumer with the LayerNorm backward in its
    epilogue (gpt2_ln_bwd; acc = dz W): dx (+ dres, None: none), post =
    LN(x) (the consumer's weight gradient is dz^T post), dgamma, dbeta."""
    M, D = x.shape
    st = _stat_dtype(x.dtype)
    dx, post = torch.empty_like(x), torch.empty_like(x)
    dgamma = torch.empty((D,), dtype=st, device=x.device)
    dbeta = torch.empty((D,), dtype=st, device=x.device)
    args = dict(x=x, gamma=gamma, beta=beta, mu=mu, rs=rs, s1=s1, s2=s2, invd=_scalar(1.0 / D, st, x.device), dx=dx,
                post=post, dgamma=dgamma, dbeta=dbeta)
    if dres is not None:
        args["dres"] = dres.contiguous()
    ctx.gemm_epilogue(_program("gpt2_ln_bwd" if dres is not None else "gpt2_ln_bwd_nores", x.dtype), dz, w,
                      trans_b=trans_b, args=args)
    return dx, post, dgamma.to(gamma.dtype), dbeta.to(beta.dtype)


def _colsum(ctx, t):
    M, N = t.shape
    s = torch.empty((N,), dtype=_stat_dtype(t.dtype), device=t.device)
    ctx.map(_program("gpt2_colsum", t.dtype), M, N, t=t, s=s)
    return s


# LayerNorm + linear + bias: the qkv projection of a block

@torch.library.custom_op("coda::gpt2_ln_linear", mutates_args=())
def _gpt2_ln_linear(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                    eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_2d("x", x)
    _check_2d("w", w)
    ctx = context_for(x)
    x = x.contiguous()
    h, mu, rs = _gpt2_ln_stats(ctx, x, gamma, eps)
    c, dv = _gpt2_fold(ctx, gamma, beta, w, b)
    z = torch.empty((x.shape[0], w.shape[1]), dtype=x.dtype, device=x.device)
    ctx.gemm_epilogue(_program("gpt2_ln_linear", x.dtype), h, w, mu=mu, rs=rs, c=c, dv=dv, z=z)
    return z, mu, rs


@_gpt2_ln_linear.register_fake
def _(x, gamma, beta, w, b, eps=1e-5):
    st = _stat_dtype(x.dtype)
    return x.new_empty((x.shape[0], w.shape[1])), x.new_empty((x.shape[0],), dtype=st), \
        x.new_empty((x.shape[0],), dtype=st)


@torch.library.custom_op("coda::gpt2_ln_linear_backward", mutates_args=())
def _gpt2_ln_linear_bwd(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, w: torch.Tensor, b: torch.Tensor,
                        z: torch.Tensor, mu: torch.Tensor, rs: torch.Tensor, dz: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(x)
    M, N = z.shape
    dz = dz.contiguous()
    c, dv = _gpt2_fold(ctx, gamma, beta, w, b)
    s1, s2, db = _row_dots(M, N, x)
    ctx.map(_program("gpt2_qkv_dots", x.dtype), M, N, dz=dz, z=z, c=c, dv=dv, s1=s1, s2=s2, db=db)
    dx, post, dgamma, dbeta = _gpt2_ln_bwd(ctx, dz, w, True, x, gamma, beta, mu, rs, s1, s2, None)
    dw = torch.empty_like(w)
    ctx.gemm(post, dz, trans_a=True, out=dw)    # LN(x)^T dz
    return dx, dgamma, dbeta, dw, db.to(b.dtype)


@_gpt2_ln_linear_bwd.register_fake
def _(x, gamma, beta, w, b, z, mu, rs, dz):
    return (torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(beta), torch.empty_like(w),
            torch.empty_like(b))


def _gpt2_ln_linear_setup(ctx, inputs, output):
    z, mu, rs = output
    ctx.save_for_backward(*inputs[:5], z, mu, rs)
    ctx.mark_non_differentiable(mu, rs)


def _gpt2_ln_linear_grad(ctx, dz, dmu, drs):
    return (*torch.ops.coda.gpt2_ln_linear_backward(*ctx.saved_tensors, dz), None)


_gpt2_ln_linear.register_autograd(_gpt2_ln_linear_grad, setup_context=_gpt2_ln_linear_setup)


def gpt2_ln_linear(x, gamma, beta, w, b, eps=1e-5):
    """z = LayerNorm(x; gamma, beta, eps) w + b, w in x out (Hugging Face's
    Conv1D): the statistics by a map (gpt2_ln_stats), then one GEMM on
    x * gamma with the LayerNorm in its epilogue (gpt2_ln_linear). Returns
    (z, mu, rs); mu, rs (the rows' mean and 1 / std) are kept for the
    backward and not differentiable. Backward: gpt2_qkv_dots (the
    LayerNorm's row dots and db), the dgrad with the LayerNorm backward
    (gpt2_ln_bwd), dw = LN(x)^T dz."""
    return torch.ops.coda.gpt2_ln_linear(x, gamma, beta, w, b, eps)


# out-projection + bias + residual, the next LayerNorm's producer

@torch.library.custom_op("coda::gpt2_residual_ln", mutates_args=())
def _gpt2_residual_ln(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor, res: torch.Tensor, gamma: torch.Tensor,
                      eps: float = 1e-5) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_2d("a", a)
    _check_2d("w", w)
    ctx = context_for(a)
    M, N = a.shape[0], w.shape[1]
    st = _stat_dtype(a.dtype)
    x = torch.empty((M, N), dtype=a.dtype, device=a.device)
    h = torch.empty_like(x)
    mu = torch.empty((M,), dtype=st, device=a.device)
    rs = torch.empty((M,), dtype=st, device=a.device)
    ctx.gemm_epilogue(_program("gpt2_residual_ln", a.dtype, eps), a, w, bias=b, res=res.contiguous(), gamma=gamma,
                      x=x, h=h, mu=mu, rs=rs)
    return x, h, mu, rs


@_gpt2_residual_ln.register_fake
def _(a, w, b, res, gamma, eps=1e-5):
    M, N = a.shape[0], w.shape[1]
    st = _stat_dtype(a.dtype)
    return a.new_empty((M, N)), a.new_empty((M, N)), a.new_empty((M,), dtype=st), a.new_empty((M,), dtype=st)


@torch.library.custom_op("coda::gpt2_residual_ln_backward", mutates_args=())
def _gpt2_residual_ln_bwd(a: torch.Tensor, w: torch.Tensor, dx: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(a)
    dx = dx.contiguous()
    da = torch.empty_like(a)
    ctx.gemm(dx, w, trans_b=True, out=da)     # dx w^T
    dw = torch.empty_like(w)
    ctx.gemm(a, dx, trans_a=True, out=dw)     # a^T dx
    return da, dw, _colsum(ctx, dx).to(w.dtype)


@_gpt2_residual_ln_bwd.register_fake
def _(a, w, dx):
    return torch.empty_like(a), torch.empty_like(w), w.new_empty((w.shape[1],))


def _gpt2_residual_ln_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1])
    ctx.mark_non_differentiable(*output[1:])   # h, mu, rs: the consumer's backward differentiates through x


def _gpt2_residual_ln_grad(ctx, dx, dh, dmu, drs):
    da, dw, db = torch.ops.coda.gpt2_residual_ln_backward(*ctx.saved_tensors, dx)
    return da, dw, db, dx, None, None


_gpt2_residual_ln.register_autograd(_gpt2_residual_ln_grad, setup_context=_gpt2_residual_ln_setup)


def gpt2_residual_ln(a, w, b, res, gamma, eps=1e-5):
    """x = a w + b + res (w in x out) with the next LayerNorm's producer in
    the epilogue (gpt2_residual_ln): h = x * gamma and the statistics mu,
    rs of x's rows. Returns (x, h, mu, rs); only x is differentiable (in a,
    w, b, res): h, mu and rs feed gpt2_mlp, whose backward takes the
    LayerNorm's gradient through x."""
    return torch.ops.coda.gpt2_residual_ln(a, w, b, res, gamma, eps)


# the MLP on gpt2_residual_ln's producer: LayerNorm consumer + GELU, down
# projection + bias + residual. Only the pre-activation u is kept; the
# backward recomputes gelu(u) for the down projection's weight gradient.

@torch.library.custom_op("coda::gpt2_mlp", mutates_args=())
def _gpt2_mlp(x: torch.Tensor, h: torch.Tensor, mu: torch.Tensor, rs: torch.Tensor, gamma: torch.Tensor,
              beta: torch.Tensor, wfc: torch.Tensor, bfc: torch.Tensor, wproj: torch.Tensor,
              bproj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _check_2d("x", x)
    _check_2d("wfc", wfc)
    ctx = context_for(x)
    M, F = x.shape[0], wfc.shape[1]
    c, dv = _gpt2_fold(ctx, gamma, beta, wfc, bfc)
    u = torch.empty((M, F), dtype=x.dtype, device=x.device)
    g = torch.empty_like(u)
    ctx.gemm_epilogue(_program("gpt2_ln_linear_gelu", x.dtype), h.contiguous(), wfc, mu=mu, rs=rs, c=c, dv=dv, u=u,
                      g=g)
    y = torch.empty_like(x)
    ctx.gemm_epilogue(_program("gpt2_bias_residual", x.dtype), g, wproj, bias=bproj, res=x.contiguous(), y=y)
    return y, u


@_gpt2_mlp.register_fake
def _(x, h, mu, rs, gamma, beta, wfc, bfc, wproj, bproj):
    return torch.empty_like(x), x.new_empty((x.shape[0], wfc.shape[1]))


@torch.library.custom_op("coda::gpt2_mlp_backward", mutates_args=())
def _gpt2_mlp_bwd(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, wfc: torch.Tensor, bfc: torch.Tensor,
                  wproj: torch.Tensor, mu: torch.Tensor, rs: torch.Tensor, u: torch.Tensor,
                  dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                             torch.Tensor, torch.Tensor]:
    ctx = context_for(x)
    M, F = u.shape
    dy = dy.contiguous()
    x = x.contiguous()
    c, dv = _gpt2_fold(ctx, gamma, beta, wfc, bfc)
    dbproj = _colsum(ctx, dy)
    # du = (dy wproj^T) gelu'(u), the LayerNorm's row dots and dbfc (gpt2_gelu_bwd)
    du = torch.empty_like(u)
    s1, s2, dbfc = _row_dots(M, F, x)
    ctx.gemm_epilogue(_program("gpt2_gelu_bwd", x.dtype), dy, wproj, trans_b=True, u=u, c=c, dv=dv, du=du, s1=s1,
                      s2=s2, db=dbfc)
    g = torch.empty_like(u)
    ctx.map(_program("gelu_map", x.dtype), M, F, u=u, g=g)
    dwproj = torch.empty_like(wproj)
    ctx.gemm(g, dy, trans_a=True, out=dwproj)   # gelu(u)^T dy, gelu(u) recomputed
    del g
    dx, post, dgamma, dbeta = _gpt2_ln_bwd(ctx, du, wfc, True, x, gamma, beta, mu, rs, s1, s2, dy)
    dwfc = torch.empty_like(wfc)
    ctx.gemm(post, du, trans_a=True, out=dwfc)  # LN(x)^T du
    return dx, dgamma, dbeta, dwfc, dbfc.to(bfc.dtype), dwproj, dbproj.to(wproj.dtype)


@_gpt2_mlp_bwd.register_fake
def _(x, gamma, beta, wfc, bfc, wproj, mu, rs, u, dy):
    return (torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(beta), torch.empty_like(wfc),
            torch.empty_like(bfc), torch.empty_like(wproj), wproj.new_empty((wproj.shape[1],)))


def _gpt2_mlp_setup(ctx, inputs, output):
    x, _, mu, rs, gamma, beta, wfc, bfc, wproj, _ = inputs
    ctx.save_for_backward(x, gamma, beta, wfc, bfc, wproj, mu, rs, output[1])
    ctx.mark_non_differentiable(output[1])   # u: kept for the backward only


def _gpt2_mlp_grad(ctx, dy, du):
    dx, dgamma, dbeta, dwfc, dbfc, dwproj, dbproj = torch.ops.coda.gpt2_mlp_backward(*ctx.saved_tensors, dy)
    return dx, None, None, None, dgamma, dbeta, dwfc, dbfc, dwproj, dbproj


_gpt2_mlp.register_autograd(_gpt2_mlp_grad, setup_context=_gpt2_mlp_setup)


def gpt2_mlp(x, h, mu, rs, gamma, beta, wfc, bfc, wproj, bproj):
    """y = x + gelu(LayerNorm(x; gamma, beta) wfc + bfc) wproj + bproj
    (weights in x out), given gpt2_residual_ln's h = x * gamma, mu and rs
    of x: the LayerNorm consumer with the tanh GELU (gpt2_ln_linear_gelu),
    then the down projection with bias and residual (gpt2_bias_residual).
    Returns (y, u); u, the pre-activation, is kept for the backward and not
    differentiable. Differentiable in x (through the LayerNorm too: h, mu
    and rs take no gradient) and the weights. Backward: gpt2_colsum (dbproj),
    gpt2_gelu_bwd, gelu(u) recomputed for dwproj, then the dgrad with the
    LayerNorm backward and the residual (gpt2_ln_bwd) and dwfc."""
    return torch.ops.coda.gpt2_mlp(x, h, mu, rs, gamma, beta, wfc, bfc, wproj, bproj)


# final LayerNorm + tied head + cross-entropy

def _gpt2_head_forward(x, gamma, beta, wout, targets, eps, keep):
    """The final LayerNorm's statistics, the head GEMM with the LayerNorm
    folded in and the online LSE and target logit in its epilogue (storing
    the logits when keep; gpt2_lm_head), and the mean loss (_ce_loss).
    Returns (loss, h, mu, rs, lse, valid, count, z or None)."""
    _check_2d("x", x)
    _check_2d("wout", wout)
    ctx = context_for(x)
    M, V = x.shape[0], wout.shape[0]
    x = x.contiguous()
    tgt = _head_targets(targets, M)
    h, mu, rs = _gpt2_ln_stats(ctx, x, gamma, eps)
    c, dv = _gpt2_fold(ctx, gamma, beta, wout, None, trans_b=True)
    lse = torch.empty((M,), dtype=_stat_dtype(x.dtype), device=x.device)
    args = dict(mu=mu, rs=rs, c=c, dv=dv, tgt=tgt, lse=lse)
    z = None
    if keep:
        z = args["z"] = torch.empty((M, V), dtype=x.dtype, device=x.device)
    out = ctx.gemm_epilogue(_program("gpt2_lm_head_keep" if keep else "gpt2_lm_head", x.dtype), h, wout,
                            trans_b=True, args=args)
    loss, valid, cnt = _ce_loss(ctx, lse, out["pick"], tgt, V, x.dtype)
    return loss, h, mu, rs, lse, valid, cnt, z


def _gpt2_head_backward(x, gamma, beta, wout, targets, h, z, mu, rs, lse, valid, cnt, dloss):
    """dx, dgamma, dbeta, dwout of _gpt2_head_forward's loss: d loss / d
    logits dl with the LayerNorm's row dots, from the stored logits z by a
    map (gpt2_ce_bwd_map) or, z None, recomputed in the epilogue of the head
    GEMM on h (gpt2_ce_bwd); then the dgrad with the LayerNorm backward
    (gpt2_ln_bwd) and dwout = dl^T LN(x)."""
    ctx = context_for(x)
    M, V = x.shape[0], wout.shape[0]
    st = _stat_dtype(x.dtype)
    x = x.contiguous()
    tgt = _head_targets(targets, M)
    c, dv = _gpt2_fold(ctx, gamma, beta, wout, None, trans_b=True)
    valid_s = (valid.to(st) * dloss.to(st)).contiguous()   # scaled by the incoming gradient
    dl = torch.empty((M, V), dtype=x.dtype, device=x.device)
    s1, s2, _ = _row_dots(M, 0, x)
    args = dict(c=c, dv=dv, tgt=tgt, lse=lse, valid=valid_s, cnt=cnt.reshape(1, 1), dl=dl, s1=s1, s2=s2)
    if z is not None:
        ctx.map(_program("gpt2_ce_bwd_map", x.dtype), M, V, z=z, args=args)
    else:
        ctx.gemm_epilogue(_program("gpt2_ce_bwd", x.dtype), h, wout, trans_b=True, mu=mu, rs=rs, args=args)
    dx, post, dgamma, dbeta = _gpt2_ln_bwd(ctx, dl, wout, False, x, gamma, beta, mu, rs, s1, s2, None)
    dwout = torch.empty_like(wout)
    ctx.gemm(dl, post, trans_a=True, out=dwout)    # dl^T LN(x)
    return dx, dgamma, dbeta, dwout


def _gpt2_head_fake(x, second):
    loss, r, lse, valid, cnt = _head_stats_fake(x)
    return loss, second, r, torch.empty_like(r), lse, valid, cnt


@torch.library.custom_op("coda::gpt2_lm_head_loss", mutates_args=())
def _gpt2_lm_head_loss(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, wout: torch.Tensor,
                       targets: torch.Tensor, eps: float = 1e-5) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _gpt2_head_forward(x, gamma, beta, wout, targets, eps, False)[:7]


@_gpt2_lm_head_loss.register_fake
def _(x, gamma, beta, wout, targets, eps=1e-5):
    return _gpt2_head_fake(x, torch.empty_like(x))


@torch.library.custom_op("coda::gpt2_lm_head_loss_backward", mutates_args=())
def _gpt2_lm_head_loss_bwd(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, wout: torch.Tensor,
                           targets: torch.Tensor, h: torch.Tensor, mu: torch.Tensor, rs: torch.Tensor,
                           lse: torch.Tensor, valid: torch.Tensor, cnt: torch.Tensor, dloss: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _gpt2_head_backward(x, gamma, beta, wout, targets, h, None, mu, rs, lse, valid, cnt, dloss)


def _gpt2_head_bwd_fake(x, gamma, beta, wout, *_):
    return torch.empty_like(x), torch.empty_like(gamma), torch.empty_like(beta), torch.empty_like(wout)


_gpt2_lm_head_loss_bwd.register_fake(_gpt2_head_bwd_fake)


def _gpt2_lm_head_loss_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:5], *output[1:])
    ctx.mark_non_differentiable(*output[1:])   # only the loss carries a gradient


_gpt2_lm_head_loss.register_autograd(_lm_head_loss_grad(torch.ops.coda.gpt2_lm_head_loss_backward),
                                     setup_context=_gpt2_lm_head_loss_setup)


@torch.library.custom_op("coda::gpt2_lm_head_loss_keep", mutates_args=())
def _gpt2_lm_head_loss_keep(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, wout: torch.Tensor,
                            targets: torch.Tensor, eps: float = 1e-5) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    loss, _, mu, rs, lse, valid, cnt, z = _gpt2_head_forward(x, gamma, beta, wout, targets, eps, True)
    return loss, z, mu, rs, lse, valid, cnt


@_gpt2_lm_head_loss_keep.register_fake
def _(x, gamma, beta, wout, targets, eps=1e-5):
    return _gpt2_head_fake(x, x.new_empty((x.shape[0], wout.shape[0])))


@torch.library.custom_op("coda::gpt2_lm_head_loss_keep_backward", mutates_args=())
def _gpt2_lm_head_loss_keep_bwd(x: torch.Tensor, gamma: torch.Tensor, beta: torch.Tensor, wout: torch.Tensor,
                                targets: torch.Tensor, z: torch.Tensor, mu: torch.Tensor, rs: torch.Tensor,
                                lse: torch.Tensor, valid: torch.Tensor, cnt: torch.Tensor,
                                dloss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _gpt2_head_backward(x, gamma, beta, wout, targets, None, z, mu, rs, lse, valid, cnt, dloss)


_gpt2_lm_head_loss_keep_bwd.register_fake(_gpt2_head_bwd_fake)
_gpt2_lm_head_loss_keep.register_autograd(_lm_head_loss_grad(torch.ops.coda.gpt2_lm_head_loss_keep_backward),
                                          setup_context=_gpt2_lm_head_loss_setup)


def gpt2_lm_head_loss(x, gamma, beta, wout, targets, eps=1e-5, keep_logits=False):
    """Final LayerNorm (with bias), LM head (wout: vocab x hidden, no bias)
    and mean cross-entropy, as llama_lm_head_loss with the LayerNorm folded
    into the head GEMM's epilogue (gpt2_ln_stats, gpt2_lm_head,
    llama_ce_stats, llama_ce_loss; backward gpt2_ce_bwd, or with
    keep_logits the map gpt2_ce_bwd_map over the stored logits, then
    gpt2_ln_bwd and dwout). Returns (loss, count)."""
    op = torch.ops.coda.gpt2_lm_head_loss_keep if keep_logits else torch.ops.coda.gpt2_lm_head_loss
    out = op(x, gamma, beta, wout, targets, eps)
    return out[0], out[6]


def apply_to_llama(model, keep_logits=False):
    """Patches a transformers LlamaForCausalLM in place so that its decoder
    layers, final norm, LM head and loss run through these ops (see
    coda._hf_llama); returns the model. keep_logits: the loss keeps the
    logits for its backward (llama_lm_head_loss)."""
    from ._hf_llama import apply_to_llama as apply

    return apply(model, keep_logits=keep_logits)


def apply_to_qwen3(model, keep_logits=False):
    """Patches a transformers Qwen3ForCausalLM in place, as apply_to_llama a
    Llama, with the QK-norm in the qkv op (qwen3_qkv_norm_rope; see
    coda._hf_llama); returns the model."""
    from ._hf_llama import apply_to_qwen3 as apply

    return apply(model, keep_logits=keep_logits)


def apply_to_gpt2(model, keep_logits=False):
    """Patches a transformers GPT2LMHeadModel in place so that its blocks,
    final LayerNorm, head and loss run through the GPT-2 ops (see
    coda._hf_gpt2); returns the model. keep_logits: the loss keeps the
    logits for its backward (gpt2_lm_head_loss)."""
    from ._hf_gpt2 import apply_to_gpt2 as apply

    return apply(model, keep_logits=keep_logits)


def apply_to_gemma3(model, keep_logits=False):
    """Patches a transformers Gemma3ForCausalLM (the text model) in place so
    that its decoder layers, final norm, LM head, soft cap and loss run
    through the coda ops (see coda._hf_gemma3); returns the model."""
    from ._hf_gemma3 import apply_to_gemma3 as apply

    return apply(model, keep_logits=keep_logits)
