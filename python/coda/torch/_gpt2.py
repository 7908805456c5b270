"""GPT-2's ops: LayerNorm + linear, residual + LayerNorm, the MLP and the
LM head with the cross-entropy (coda::gpt2_*)."""

import torch

from .. import _core
from ._common import _DERIVED, _TEXTS, _check_2d, _program, _scalar, _stat_dtype, context_for
from ._head import _ce_loss, _head_stats_fake, _head_targets, _lm_head_loss_grad


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
