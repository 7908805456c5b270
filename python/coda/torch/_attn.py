"""Causal GQA softmax attention on the packed qkv (coda::attention and its
backward)."""

import torch

from ._common import _check_2d, _stat_dtype, context_for


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
