"""The Llama block's ops around attention: RMSNorm, residual + RMSNorm,
SwiGLU and linear + residual (coda::llama_rmsnorm, llama_residual_norm,
llama_swiglu, linear_residual and their backwards)."""

from typing import Optional

import torch

from ._common import _check_2d, _linear_bwd, _program, _row_scaled_linear_bwd, _scalar, _stat_dtype, context_for


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
