"""The LM heads with the mean cross-entropy: Llama's (coda::llama_lm_head_loss,
its keep-logits form) and Gemma 3's soft-capped one
(coda::gemma3_lm_head_loss), and the loss and fake helpers GPT-2's head
shares."""

import torch

from ._common import _check_2d, _program, _scalar, _stat_dtype, context_for


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
