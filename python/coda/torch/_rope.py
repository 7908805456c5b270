"""The qkv projection with RoPE (coda::llama_qkv_rope), Qwen3's with the
QK-norm before RoPE (coda::qwen3_qkv_norm_rope), and their position and
frequency tables."""

import math

import torch

from ._common import _check_2d, _program, _row_scaled_linear_bwd, _scalar, _stat_dtype, context_for


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
