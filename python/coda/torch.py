"""PyTorch ops over coda's Llama epilogue programs, with autograd.

Custom ops (torch.library, namespace "coda", each with a fake/meta
implementation so torch.compile and FakeTensor tracing see shapes):

  coda::llama_residual_norm(a, wo, res, w) -> (x, h, r)
      the out-projection with the residual add and the RMSNorm producer in
      its epilogue (programs/llama_residual_norm.coda):
      x = a wo^T + res,  h = x * w,  r = rsqrt(mean(x^2) + 1e-5) per row.
  coda::llama_swiglu(h, wgu, r) -> (z, y)
      the gate/up projection scaled by the RMSNorm row statistic, with
      SwiGLU (programs/llama_swiglu.coda); wgu rows interleaved
      [g0, u0, g1, u1, ...]: z = r * (h wgu^T) (the (g, u) pairs, M x 2F),
      y = silu(g) * u (M x F).
  coda::llama_residual_norm_backward, coda::llama_swiglu_backward: their
      backward passes. The SwiGLU backward runs programs/
      llama_swiglu_bwd_pairs.coda (dz and the row sums of z dz that the
      RMSNorm backward needs); the RMSNorm backward is the math of
      programs/llama_norm_bwd.coda split at the op boundary (this op gets
      dh and dr, where the fused block gets dz Wgu), as a map program.

llama_residual_norm() and llama_swiglu() below apply them through
torch.autograd.Function. Chained as in a Llama block (src/nn/llama3.c):

    x, h, r = llama_residual_norm(o, wo, x_in, wn2)
    z, y = llama_swiglu(h, wgu, r)

dtypes: bfloat16 (fp32 compute; r fp32), float32, and float64 on the CPU
backend's exact mode (fp64 compute, for gradcheck). Device: CPU tensors run
on a CPU context; CUDA tensors on a CUDA context bound to torch's current
stream (a context per device and stream, cached), viewed without copies.
"""

import threading

import torch

from . import _core

__all__ = ["llama_residual_norm", "llama_swiglu", "context_for", "LlamaResidualNorm", "LlamaSwiGLU"]

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

_DT_WORD = {torch.bfloat16: None, torch.float32: "f32", torch.float64: "f64"}


def _program(name, dtype):
    """Built-in program `name` (or one of the texts above), retyped for dtype:
    bf16 as written; float32 / float64: every floating declaration."""
    if dtype not in _DT_WORD:
        raise TypeError("coda ops: dtype %s not supported (bfloat16, float32, float64)" % dtype)
    key = (name, dtype)
    p = _programs.get(key)
    if p is None:
        texts = {"rn_bwd": _RN_BWD, "rowscale_gemm": _ROWSCALE_GEMM, "rowscale_map": _ROWSCALE_MAP}
        p = _core.Program.parse(texts[name]) if name in texts else _core.Program.builtin(name)
        if _DT_WORD[dtype]:
            p = p.retyped(_DT_WORD[dtype])
        _programs[key] = p
    return p


def _stat_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_2d(name, t):
    if t.dim() != 2:
        raise ValueError("coda ops: %s must be 2-D, got shape %s" % (name, tuple(t.shape)))


# ------------------------------------------------------- residual + RMSNorm

@torch.library.custom_op("coda::llama_residual_norm", mutates_args=())
def _residual_norm(a: torch.Tensor, wo: torch.Tensor, res: torch.Tensor, w: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_2d("a", a)
    _check_2d("wo", wo)
    ctx = context_for(a)
    M, N = a.shape[0], wo.shape[0]
    x = torch.empty((M, N), dtype=a.dtype, device=a.device)
    h = torch.empty_like(x)
    r = torch.empty((M,), dtype=_stat_dtype(a.dtype), device=a.device)
    ctx.gemm_epilogue(_program("llama_residual_norm", a.dtype), a, wo, trans_b=True, res=res, w=w, x=x, h=h, r=r)
    return x, h, r


@_residual_norm.register_fake
def _(a, wo, res, w):
    M, N = a.shape[0], wo.shape[0]
    return (a.new_empty((M, N)), a.new_empty((M, N)), a.new_empty((M,), dtype=_stat_dtype(a.dtype)))


@torch.library.custom_op("coda::llama_residual_norm_backward", mutates_args=())
def _residual_norm_bwd(a: torch.Tensor, wo: torch.Tensor, x: torch.Tensor, w: torch.Tensor, r: torch.Tensor,
                       dx: torch.Tensor, dh: torch.Tensor, dr: torch.Tensor) -> tuple[
        torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(a)
    M, N = x.shape
    st = _stat_dtype(a.dtype)
    inv_n = torch.full((1, 1), 1.0 / N, dtype=st, device=a.device)
    ds = torch.empty_like(x)
    dw = torch.empty((N,), dtype=st, device=a.device)
    ctx.map(_program("rn_bwd", a.dtype), M, N, s=x, w=w, r=r, dx=dx.contiguous(), dh=dh.contiguous(),
            dr=dr.contiguous(), inv_n=inv_n, ds=ds, dw=dw)
    da = torch.empty_like(a)
    ctx.gemm(ds, wo, out=da)                  # ds (M x N) wo (N x K)
    dwo = torch.empty_like(wo)
    ctx.gemm(ds, a, trans_a=True, out=dwo)    # ds^T (N x M) a (M x K)
    return da, dwo, ds, dw.to(w.dtype)


@_residual_norm_bwd.register_fake
def _(a, wo, x, w, r, dx, dh, dr):
    return torch.empty_like(a), torch.empty_like(wo), torch.empty_like(x), torch.empty_like(w)


class LlamaResidualNorm(torch.autograd.Function):
    """(a, wo, res, w) -> (x, h, r); see the module doc."""

    @staticmethod
    def forward(ctx, a, wo, res, w):
        x, h, r = torch.ops.coda.llama_residual_norm(a, wo, res, w)
        ctx.save_for_backward(a, wo, x, w, r)
        return x, h, r

    @staticmethod
    def backward(ctx, dx, dh, dr):
        a, wo, x, w, r = ctx.saved_tensors
        da, dwo, dres, dw = torch.ops.coda.llama_residual_norm_backward(a, wo, x, w, r, dx, dh, dr)
        return da, dwo, dres, dw


def llama_residual_norm(a, wo, res, w):
    """x = a wo^T + res, h = x * w, r = rsqrt(mean(x^2, -1) + 1e-5): one
    GEMM with its epilogue; differentiable in all four inputs."""
    return LlamaResidualNorm.apply(a, wo, res, w)


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


@torch.library.custom_op("coda::llama_swiglu_backward", mutates_args=())
def _swiglu_bwd(h: torch.Tensor, wgu: torch.Tensor, r: torch.Tensor, z: torch.Tensor, dz_out: torch.Tensor,
                dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    ctx = context_for(h)
    M, F2 = z.shape
    st = _stat_dtype(h.dtype)
    dz = torch.empty_like(z)
    zdz = torch.empty((M,), dtype=st, device=h.device)
    y_re = torch.empty((M, F2 // 2), dtype=h.dtype, device=h.device)
    ctx.map(_program("llama_swiglu_bwd_pairs", h.dtype), M, F2, z=z, dy=dy.contiguous(), dz=dz, y=y_re, zdz=zdz)
    # a gradient reaching z itself (z is also an output) adds to the pairs'
    dz = dz + dz_out
    zdz = zdz + (dz_out.to(st) * z.to(st)).sum(-1)
    r = r.contiguous()
    dh = torch.empty_like(h)
    ctx.gemm_epilogue(_program("rowscale_gemm", h.dtype), dz, wgu, r=r, o=dh)   # r * (dz wgu)
    hr = torch.empty_like(h)
    ctx.map(_program("rowscale_map", h.dtype), x=h, r=r, o=hr)                 # h * r
    dwgu = torch.empty_like(wgu)
    ctx.gemm(dz, hr, trans_a=True, out=dwgu)                                   # dz^T (h r)
    dr = (zdz / r.to(st)).to(r.dtype)
    return dh, dwgu, dr


@_swiglu_bwd.register_fake
def _(h, wgu, r, z, dz_out, dy):
    return torch.empty_like(h), torch.empty_like(wgu), torch.empty_like(r)


class LlamaSwiGLU(torch.autograd.Function):
    """(h, wgu, r) -> (z, y); see the module doc."""

    @staticmethod
    def forward(ctx, h, wgu, r):
        z, y = torch.ops.coda.llama_swiglu(h, wgu, r)
        ctx.save_for_backward(h, wgu, r, z)
        return z, y

    @staticmethod
    def backward(ctx, dz, dy):
        h, wgu, r, z = ctx.saved_tensors
        return torch.ops.coda.llama_swiglu_backward(h, wgu, r, z, dz, dy)


def llama_swiglu(h, wgu, r):
    """z = r * (h wgu^T) (interleaved gate/up pairs), y = silu(g) * u: one
    GEMM with its epilogue; differentiable in h, wgu and r."""
    return LlamaSwiGLU.apply(h, wgu, r)
