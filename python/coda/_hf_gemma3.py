"""coda.torch.apply_to_gemma3: a Hugging Face Gemma3ForCausalLM (the text
model, gemma3_text) whose decoder layers, final norm, tied head, soft cap
and loss run through coda ops: the programs of the Gemma 3 block plan
(src/nn/gemma3.c, programs/gemma3_*.coda) and Qwen3's QK-norm ops.

Gemma's RMSNorm weights are stored as w and scale by 1 + w; the ops take
the stored w and form 1 + w inside their eager bodies (the gradient of
1 + w is w's). A decoder layer runs as five ops:
  - coda::hf_gemma3_rmsnorm: the input norm's producer (llama_rmsnorm on
    1 + w): h1 = x (1 + wn1), r1;
  - coda::hf_gemma3_qkv_norm_rope: qwen3_qkv_norm_rope on Hugging Face's
    q/k/v weights (the rows reordered for the adjacent-pair RoPE as
    apply_to_qwen3's), the QK-norm gains 1 + w with the query's gain also
    times sqrt(head_dim / query_pre_attn_scalar): coda's attention scales
    the scores by 1/sqrt(head_dim), so the scores come out scaled by
    query_pre_attn_scalar^-1/2 (RoPE is linear, so the factor may sit before
    it); the backward maps the gain's gradient back through the factor;
  - the attention: coda::attention (causal) on global layers and on local
    ones whose window covers the sequence; a local layer whose window is
    shorter than the sequence passes it the window (query t sees keys
    t - window < j <= t, as Hugging Face's sliding mask;
    coda_attention_forward_mask / _backward_mask);
  - coda::hf_gemma3_post_attn: the out projection with the post-attention
    norm's statistics in its epilogue (gemma3_post_stats), then
    x1 = x + a1 rpa (1 + wpa) with the pre-feedforward norm's producer
    h2 = x1 (1 + wn2), r2 (gemma3_post_add_norm); backward the residual
    norm's map (rn_bwd), the post-norm's (qknorm_bwd_dots, qknorm_bwd over
    whole rows) and the out projection's dgrad and wgrad;
  - coda::hf_gemma3_mlp: gate/up with GeGLU (gemma3_geglu, the tanh GELU),
    the down projection with the post-feedforward norm's statistics
    (gemma3_post_stats) and x_out = x1 + a2 rpf (1 + wpf) (gemma3_post_add);
    only the pairs z are kept, y = gelu(g) u is recomputed in the backward
    (gemma3_geglu_bwd_pairs after the dgrad GEMM).
The final norm and head: llama_lm_head_loss on 1 + w, or with
final_logit_softcapping coda.torch.gemma3_lm_head_loss (gemma3_lm_head,
gemma3_ce_bwd). The embedding is the model's own (its scale sqrt(hidden)
included). The forward, routing (a KV cache runs the model's own layers),
padding refusal, shifted targets and num_items_in_batch are
apply_to_llama's (_hf_llama._coda_forward)."""

import math
import sys

import torch

from . import _hf_llama
from . import torch as ct
from ._hf_llama import _dims, _hf_dg, _hf_dwqkv, _hf_g, _hf_wgu, _hf_wqkv

__all__ = ["apply_to_gemma3", "gemma3_decoder_layer"]

_TANH_GELU = ("gelu_pytorch_tanh", "gelu_new")
_LAYER_TYPES = ("full_attention", "sliding_attention")


def _scale(w):
    """The norm's scale from Gemma's stored weight: 1 + w."""
    return w + 1


# ------------------------------------------------------------- RMSNorm (1 + w)

@torch.library.custom_op("coda::hf_gemma3_rmsnorm", mutates_args=())
def _rmsnorm(x: torch.Tensor, w: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.coda.llama_rmsnorm(x, _scale(w), eps)


@_rmsnorm.register_fake
def _(x, w, eps):
    return torch.empty_like(x), x.new_empty((x.shape[0],), dtype=ct._stat_dtype(x.dtype))


@torch.library.custom_op("coda::hf_gemma3_rmsnorm_backward", mutates_args=())
def _rmsnorm_bwd(x: torch.Tensor, w: torch.Tensor, r: torch.Tensor, dh: torch.Tensor,
                 dr: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.coda.llama_rmsnorm_backward(x, _scale(w), r, dh, dr)


@_rmsnorm_bwd.register_fake
def _(x, w, r, dh, dr):
    return torch.empty_like(x), torch.empty_like(w)


def _rmsnorm_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0], inputs[1], output[1])


def _rmsnorm_grad(ctx, dh, dr):
    dx, dw = torch.ops.coda.hf_gemma3_rmsnorm_backward(*ctx.saved_tensors, dh, dr)
    return dx, dw, None


_rmsnorm.register_autograd(_rmsnorm_grad, setup_context=_rmsnorm_setup)


# ------------------------------------------------- qkv + QK-norm (1 + w) + RoPE

def _gains(gq, gk, qscale):
    """coda's QK-norm gains from Gemma's stored weights: 1 + w, the query's
    times qscale, columns in the RoPE pair order (_hf_g)."""
    return _hf_g(_scale(gq) * qscale), _hf_g(_scale(gk))


@torch.library.custom_op("coda::hf_gemma3_qkv_norm_rope", mutates_args=())
def _qkv(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, r: torch.Tensor, gq: torch.Tensor,
         gk: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor, heads_q: int, heads_kv: int, eps: float,
         qscale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g1, g2 = _gains(gq, gk, qscale)
    return torch.ops.coda.qwen3_qkv_norm_rope(h, _hf_wqkv(wq, wk, wv, heads_q, heads_kv), r, g1, g2, pos, freq,
                                              heads_q, heads_kv, eps)


@_qkv.register_fake
def _(h, wq, wk, wv, r, gq, gk, pos, freq, heads_q, heads_kv, eps, qscale):
    M, N = h.shape[0], wq.shape[0] + wk.shape[0] + wv.shape[0]
    return (h.new_empty((M, N)), h.new_empty((M, N)),
            h.new_empty((M, heads_q + 2 * heads_kv), dtype=ct._stat_dtype(h.dtype)))


@torch.library.custom_op("coda::hf_gemma3_qkv_norm_rope_backward", mutates_args=())
def _qkv_bwd(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, r: torch.Tensor,
             gq: torch.Tensor, gk: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor, qkv: torch.Tensor,
             pre: torch.Tensor, rq: torch.Tensor, dqkv: torch.Tensor, heads_q: int, heads_kv: int,
             qscale: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                     torch.Tensor, torch.Tensor]:
    g1, g2 = _gains(gq, gk, qscale)
    dh, dw, dr, dg1, dg2 = torch.ops.coda.qwen3_qkv_norm_rope_backward(
        h, _hf_wqkv(wq, wk, wv, heads_q, heads_kv), r, g1, g2, pos, freq, qkv, pre, rq, dqkv, heads_q, heads_kv)
    dq, dk, dv = _hf_dwqkv(dw, heads_q, heads_kv, wq.shape[0], wk.shape[0])
    return dh, dq, dk, dv, dr, _hf_dg(dg1) * qscale, _hf_dg(dg2)


@_qkv_bwd.register_fake
def _(h, wq, wk, wv, r, gq, gk, pos, freq, qkv, pre, rq, dqkv, heads_q, heads_kv, qscale):
    return (torch.empty_like(h), torch.empty_like(wq), torch.empty_like(wk), torch.empty_like(wv),
            torch.empty_like(r), torch.empty_like(gq), torch.empty_like(gk))


def _qkv_setup(ctx, inputs, output):
    qkv, pre, rq = output
    ctx.save_for_backward(*inputs[:9], qkv, pre, rq)
    ctx.args = (inputs[9], inputs[10], inputs[12])   # heads_q, heads_kv, qscale
    ctx.mark_non_differentiable(pre, rq)   # kept for the backward only


def _qkv_grad(ctx, dqkv, dpre, drq):
    grads = torch.ops.coda.hf_gemma3_qkv_norm_rope_backward(*ctx.saved_tensors, dqkv, *ctx.args)
    return (*grads, None, None, None, None, None, None)


_qkv.register_autograd(_qkv_grad, setup_context=_qkv_setup)


# ---------------------------------- out projection + post-norm + residual + norm

def _post_norm_bwd(cx, a, r, w, dy):
    """The backward of y = a r w (r = rsqrt(mean(a^2) + eps) per row; w the
    scale 1 + w): qknorm_bwd_dots and qknorm_bwd over whole rows. Returns
    da and dw (w's dtype)."""
    M, D = a.shape
    st = ct._stat_dtype(a.dtype)
    dy = dy.contiguous()
    s = torch.empty((M,), dtype=st, device=a.device)
    cx.map(ct._program("qknorm_bwd_dots", a.dtype), M, D, x=a, dy=dy, gamma=w, s=s)
    da = torch.empty_like(a)
    dw = torch.empty((D,), dtype=st, device=a.device)
    cx.map(ct._program("qknorm_bwd", a.dtype), M, D, x=a, dy=dy, r=r, gamma=w, s=s,
           invhd=ct._scalar(1.0 / D, st, a.device), dx=da, dgamma=dw)
    return da, dw.to(w.dtype)


@torch.library.custom_op("coda::hf_gemma3_post_attn", mutates_args=())
def _post_attn(o: torch.Tensor, wo: torch.Tensor, x: torch.Tensor, wpa: torch.Tensor, wn2: torch.Tensor,
               eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ct._check_2d("o", o)
    cx = ct.context_for(o)
    M, D = o.shape[0], wo.shape[0]
    st = ct._stat_dtype(o.dtype)
    a1 = torch.empty((M, D), dtype=o.dtype, device=o.device)
    rpa = torch.empty((M,), dtype=st, device=o.device)
    cx.gemm_epilogue(ct._program("gemma3_post_stats", o.dtype, eps), o, wo, trans_b=True, a=a1, r=rpa)
    x1, h2 = torch.empty_like(a1), torch.empty_like(a1)
    r2 = torch.empty((M,), dtype=st, device=o.device)
    cx.map(ct._program("gemma3_post_add_norm", o.dtype, eps), M, D, a=a1, r=rpa, w=_scale(wpa), res=x.contiguous(),
           wn=_scale(wn2), x=x1, h=h2, rn=r2)
    return x1, h2, r2, a1, rpa


@_post_attn.register_fake
def _(o, wo, x, wpa, wn2, eps):
    M, D = o.shape[0], wo.shape[0]
    st = ct._stat_dtype(o.dtype)
    return (o.new_empty((M, D)), o.new_empty((M, D)), o.new_empty((M,), dtype=st), o.new_empty((M, D)),
            o.new_empty((M,), dtype=st))


@torch.library.custom_op("coda::hf_gemma3_post_attn_backward", mutates_args=())
def _post_attn_bwd(o: torch.Tensor, wo: torch.Tensor, wpa: torch.Tensor, wn2: torch.Tensor, x1: torch.Tensor,
                   r2: torch.Tensor, a1: torch.Tensor, rpa: torch.Tensor, dx1: torch.Tensor, dh2: torch.Tensor,
                   dr2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    cx = ct.context_for(o)
    M, D = x1.shape
    st = ct._stat_dtype(o.dtype)
    # the pre-feedforward norm's producer (h2 = x1 (1 + wn2), r2) and the residual: ds = d x1
    ds = torch.empty_like(x1)
    dwn2 = torch.empty((D,), dtype=st, device=o.device)
    cx.map(ct._program("rn_bwd", o.dtype), M, D, s=x1, w=_scale(wn2), r=r2, dx=dx1.contiguous(), dh=dh2.contiguous(),
           dr=dr2.contiguous(), inv_n=ct._scalar(1.0 / D, st, o.device), ds=ds, dw=dwn2)
    da1, dwpa = _post_norm_bwd(cx, a1, rpa, _scale(wpa), ds)
    do, dwo = ct._linear_bwd(cx, da1, o, wo)
    return do, dwo, ds, dwpa, dwn2.to(wn2.dtype)


@_post_attn_bwd.register_fake
def _(o, wo, wpa, wn2, x1, r2, a1, rpa, dx1, dh2, dr2):
    return (torch.empty_like(o), torch.empty_like(wo), torch.empty_like(x1), torch.empty_like(wpa),
            torch.empty_like(wn2))


def _post_attn_setup(ctx, inputs, output):
    o, wo, _, wpa, wn2, _ = inputs
    x1, _, r2, a1, rpa = output
    ctx.save_for_backward(o, wo, wpa, wn2, x1, r2, a1, rpa)
    ctx.mark_non_differentiable(a1, rpa)   # kept for the backward only


def _post_attn_grad(ctx, dx1, dh2, dr2, da1, drpa):
    do, dwo, dx, dwpa, dwn2 = torch.ops.coda.hf_gemma3_post_attn_backward(*ctx.saved_tensors, dx1, dh2, dr2)
    return do, dwo, dx, dwpa, dwn2, None


_post_attn.register_autograd(_post_attn_grad, setup_context=_post_attn_setup)


# ------------------------------------------------------- GeGLU MLP + post-norm

@torch.library.custom_op("coda::hf_gemma3_mlp", mutates_args=())
def _mlp(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, r: torch.Tensor, wd: torch.Tensor, wpf: torch.Tensor,
         res: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    ct._check_2d("h", h)
    cx = ct.context_for(h)
    M, F, D = h.shape[0], wg.shape[0], wd.shape[0]
    st = ct._stat_dtype(h.dtype)
    z = torch.empty((M, 2 * F), dtype=h.dtype, device=h.device)
    y = torch.empty((M, F), dtype=h.dtype, device=h.device)
    cx.gemm_epilogue(ct._program("gemma3_geglu", h.dtype), h, _hf_wgu(wg, wu), trans_b=True, r=r.contiguous(), z=z,
                     y=y)
    a2 = torch.empty((M, D), dtype=h.dtype, device=h.device)
    rpf = torch.empty((M,), dtype=st, device=h.device)
    cx.gemm_epilogue(ct._program("gemma3_post_stats", h.dtype, eps), y, wd, trans_b=True, a=a2, r=rpf)
    del y
    x = torch.empty_like(a2)
    cx.map(ct._program("gemma3_post_add", h.dtype), M, D, a=a2, r=rpf, w=_scale(wpf), res=res.contiguous(), x=x)
    return x, z, a2, rpf


@_mlp.register_fake
def _(h, wg, wu, r, wd, wpf, res, eps):
    M, F, D = h.shape[0], wg.shape[0], wd.shape[0]
    return (h.new_empty((M, D)), h.new_empty((M, 2 * F)), h.new_empty((M, D)),
            h.new_empty((M,), dtype=ct._stat_dtype(h.dtype)))


@torch.library.custom_op("coda::hf_gemma3_mlp_backward", mutates_args=())
def _mlp_bwd(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, r: torch.Tensor, wd: torch.Tensor,
             wpf: torch.Tensor, z: torch.Tensor, a2: torch.Tensor, rpf: torch.Tensor,
             dx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                        torch.Tensor]:
    cx = ct.context_for(h)
    M, F2 = z.shape
    da2, dwpf = _post_norm_bwd(cx, a2, rpf, _scale(wpf), dx)
    dy = torch.empty((M, F2 // 2), dtype=h.dtype, device=h.device)
    cx.gemm(da2, wd, out=dy)                                   # dy = da2 wd
    dz, y, zdz = ct._swiglu_bwd_map(cx, z, dy, "gemma3_geglu_bwd_pairs")
    del dy
    dwd = torch.empty_like(wd)
    cx.gemm(da2, y, trans_a=True, out=dwd)                     # dwd = da2^T y, y recomputed
    del y
    dh, dwgu, dr = ct._row_scaled_linear_bwd(cx, h, _hf_wgu(wg, wu), r, dz, zdz)
    dwgu = dwgu.reshape(wg.shape[0], 2, wg.shape[1])
    return dh, dwgu[:, 0].contiguous(), dwgu[:, 1].contiguous(), dr, dwd, dwpf


@_mlp_bwd.register_fake
def _(h, wg, wu, r, wd, wpf, z, a2, rpf, dx):
    return (torch.empty_like(h), torch.empty_like(wg), torch.empty_like(wu), torch.empty_like(r),
            torch.empty_like(wd), torch.empty_like(wpf))


def _mlp_setup(ctx, inputs, output):
    h, wg, wu, r, wd, wpf, _, _ = inputs
    _, z, a2, rpf = output
    ctx.save_for_backward(h, wg, wu, r, wd, wpf, z, a2, rpf)
    ctx.mark_non_differentiable(z, a2, rpf)   # kept for the backward only


def _mlp_grad(ctx, dx, dz, da2, drpf):
    dh, dwg, dwu, dr, dwd, dwpf = torch.ops.coda.hf_gemma3_mlp_backward(*ctx.saved_tensors, dx)
    return dh, dwg, dwu, dr, dwd, dwpf, dx, None


_mlp.register_autograd(_mlp_grad, setup_context=_mlp_setup)


# ------------------------------------------------------------------ the layer

def _gemma3_layer(x, wn1, wq, wk, wv, gq, gk, wo, wpa, wn2, wg, wu, wd, wpf, pos, freq, batch, hq, hkv, eps, qscale,
                  window):
    h1, r1 = torch.ops.coda.hf_gemma3_rmsnorm(x, wn1, eps)
    qkv, _, _ = torch.ops.coda.hf_gemma3_qkv_norm_rope(h1, wq, wk, wv, r1, gq, gk, pos, freq, hq, hkv, eps, qscale)
    # a window covering the sequence is no window: the plain call, as on global layers
    o, _ = ct.attention(qkv, batch, hq, hkv, window if 0 < window < x.shape[0] // batch else 0)
    x1, h2, r2, _, _ = torch.ops.coda.hf_gemma3_post_attn(o, wo, x, wpa, wn2, eps)
    x2, _, _, _ = torch.ops.coda.hf_gemma3_mlp(h2, wg, wu, r2, wd, wpf, x1, eps)
    return x2


# one nested compile region per layer under torch.compile, as the Llama layer's
_nested = getattr(torch.compiler, "nested_compile_region", None)
_gemma3_layer_compiled = _nested(_gemma3_layer) if _nested is not None else _gemma3_layer


def _layer_type(layer):
    att = layer.self_attn
    lt = getattr(att, "layer_type", None)
    if lt is None:
        lt = "sliding_attention" if getattr(att, "is_sliding", False) else "full_attention"
    return lt


def gemma3_decoder_layer(layer, x, batch, pos, freqs, dims, qscale):
    """One Gemma3DecoderLayer on x ((batch*seq) x hidden) through the coda
    ops: (1 + w) RMSNorm, qkv with the QK-norm and RoPE (the layer type's
    frequencies, freqs[layer type]; pos, freqs: qk_norm_rope_tables), the
    attention (the layer's sliding window), out projection + post-norm +
    residual + pre-feedforward norm, GeGLU + down projection + post-norm +
    residual. dims: (heads_q, heads_kv, head_dim); qscale: sqrt(head_dim /
    query_pre_attn_scalar)."""
    hq, hkv, _ = dims
    att, mlp = layer.self_attn, layer.mlp
    lt = _layer_type(layer)
    window = int(att.sliding_window or 0) if lt == "sliding_attention" else 0
    return _gemma3_layer_compiled(
        x, layer.input_layernorm.weight, att.q_proj.weight, att.k_proj.weight, att.v_proj.weight, att.q_norm.weight,
        att.k_norm.weight, att.o_proj.weight, layer.post_attention_layernorm.weight,
        layer.pre_feedforward_layernorm.weight, mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight,
        layer.post_feedforward_layernorm.weight, pos, freqs[lt], batch, hq, hkv, layer.input_layernorm.eps, qscale,
        window)


def _rotary(model, layer_type):
    """(inv_freq, rope type, attention scaling) of a layer type: transformers
    5 holds them per type on model.model.rotary_emb; earlier versions have
    rotary_emb (global) and rotary_emb_local."""
    rot = model.model.rotary_emb
    inv = getattr(rot, layer_type + "_inv_freq", None)
    if inv is not None:
        rt = getattr(rot, "rope_type", {})
        return (inv, rt.get(layer_type, "default") if isinstance(rt, dict) else rt,
                getattr(rot, layer_type + "_attention_scaling", 1.0))
    if layer_type == "sliding_attention" and hasattr(model.model, "rotary_emb_local"):
        rot = model.model.rotary_emb_local
    return getattr(rot, "inv_freq", None), getattr(rot, "rope_type", "default"), getattr(rot, "attention_scaling", 1.0)


def _layer_types(model):
    return [_layer_type(layer) for layer in model.model.layers[: model.config.num_hidden_layers]]


def _qscale(cfg):
    return math.sqrt(_dims(cfg)[2] / float(cfg.query_pre_attn_scalar))


class _Gemma3(_hf_llama._Family):
    hf_class = "Gemma3ForCausalLM"
    layer_name = "gemma3_decoder_layer"

    def __init__(self):
        super().__init__("apply_to_gemma3")

    def prepare(self, model, embeds, position_ids, kwargs):
        B, T, D = embeds.shape
        dims = _dims(model.config)
        freqs, pos = {}, None
        for lt in sorted(set(_layer_types(model))):
            pos, freqs[lt] = ct.qk_norm_rope_tables(position_ids, _rotary(model, lt)[0], dims[0], dims[1],
                                                    embeds.dtype)
        return embeds.reshape(B * T, D), (B, pos, freqs, dims, _qscale(model.config))

    def head_loss(self, model, x, tgt, keep_logits):
        norm = model.model.norm
        cap = model.config.final_logit_softcapping
        if cap:
            return ct.gemma3_lm_head_loss(x, _scale(norm.weight), model.lm_head.weight, tgt, cap, norm.eps)
        return ct.llama_lm_head_loss(x, _scale(norm.weight), model.lm_head.weight, tgt, norm.eps,
                                     keep_logits=keep_logits)

    def logits(self, model, hidden):
        logits = model.lm_head(hidden)
        cap = model.config.final_logit_softcapping
        if cap:
            logits = torch.tanh(logits / cap) * cap
        return logits


_FAMILY = _Gemma3()
_FAMILY.module = sys.modules[__name__]


def _check_supported(model, keep_logits):
    cfg = model.config
    problems = []
    act = getattr(cfg, "hidden_activation", None) or getattr(cfg, "hidden_act", None)
    if act not in _TANH_GELU:
        problems.append("hidden_activation %r (the GeGLU program's GELU is the tanh form: %s)"
                        % (act, ", ".join(_TANH_GELU)))
    if getattr(cfg, "attention_bias", False):
        problems.append("attention_bias (the qkv and out projections have no bias here)")
    if getattr(cfg, "attn_logit_softcapping", None):
        problems.append("attn_logit_softcapping %r (the attention's scores are not capped here: null)"
                        % cfg.attn_logit_softcapping)
    if getattr(cfg, "use_bidirectional_attention", False):
        problems.append("use_bidirectional_attention (the attention is causal: False)")
    cap = getattr(cfg, "final_logit_softcapping", None)
    if cap is not None and not cap > 0:
        problems.append("final_logit_softcapping %r (null, or a cap > 0)" % (cap,))
    if cap and keep_logits:
        problems.append("keep_logits with final_logit_softcapping %r (the capped head recomputes its logits: "
                        "keep_logits=False)" % (cap,))
    hq, hkv, hd = _dims(cfg)
    if hd % 2 or hq % hkv:
        problems.append("head_dim %d / heads %d, %d (needs an even head_dim and heads a multiple of kv heads)"
                        % (hd, hq, hkv))
    if hd % _hf_llama._TILE_N and _hf_llama._TILE_N % hd:
        problems.append("head_dim %d (the QK-norm's per-head statistics need head_dim and the GEMM tile of %d "
                        "columns to divide one another)" % (hd, _hf_llama._TILE_N))
    qpas = getattr(cfg, "query_pre_attn_scalar", None)
    if not qpas or not float(qpas) > 0:
        problems.append("query_pre_attn_scalar %r (a score scale query_pre_attn_scalar^-1/2 > 0)" % (qpas,))
    types = _layer_types(model)
    other = sorted(set(types) - set(_LAYER_TYPES))
    if other:
        problems.append("layer_types %s (full_attention, sliding_attention)" % other)
    for lt in sorted(set(types) & set(_LAYER_TYPES)):
        inv, rt, scaling = _rotary(model, lt)
        if inv is None:
            problems.append("no rotary inverse frequencies for the %s layers" % lt)
            continue
        if rt not in _hf_llama._STATIC_ROPE:
            problems.append("rope_type %r of the %s layers (rope_parameters: inverse frequencies that do not change "
                            "with the length: %s)" % (rt, lt, ", ".join(_hf_llama._STATIC_ROPE)))
        if float(scaling) != 1.0:
            problems.append("rope attention_scaling %r of the %s layers (scaled cos/sin)" % (scaling, lt))
        if inv.numel() * 2 != hd:
            problems.append("inv_freq of %d entries for head_dim %d" % (inv.numel(), hd))
    if problems:
        raise ValueError("coda.torch.apply_to_gemma3: this model is not supported: %s" % "; ".join(problems))


def apply_to_gemma3(model, keep_logits=False):
    """Patches a transformers Gemma3ForCausalLM (the text model,
    gemma3_text) in place (and returns it): its forward without a KV cache
    runs the decoder layers, the final norm, the head, its soft cap and the
    loss through the coda ops (loss without logits when labels are given;
    logits through the model's own norm, head and cap when not); generation
    with a cache runs the model's own layers. Parameters, state dict and
    modules stay the model's. Refuses (ValueError, naming the config key and
    what is allowed): another activation than the tanh GELU
    (gelu_pytorch_tanh), attention_bias, attn_logit_softcapping,
    use_bidirectional_attention, RoPE with an attention scaling or
    length-dependent frequencies, a head_dim that does not divide 128 or is
    not a multiple of it, keep_logits with final_logit_softcapping; in a
    forward, padding masks with zeros and attention dropout in training.
    keep_logits (uncapped heads only): the loss stores the logits for its
    backward (coda.torch.llama_lm_head_loss); patching a patched model
    again sets it."""
    mm = getattr(model, "model", None)
    layers = getattr(mm, "layers", None)
    if (mm is None or layers is None or not hasattr(model, "lm_head") or not len(layers)
            or not hasattr(layers[0], "pre_feedforward_layernorm")):
        raise TypeError("coda.torch.apply_to_gemma3: expects a transformers %s (the text model), got %s"
                        % (_FAMILY.hf_class, type(model).__name__))
    if getattr(model, "_coda_patched", False):
        _check_supported(model, keep_logits)
    return _hf_llama._install(model, _FAMILY, keep_logits, lambda m: _check_supported(m, keep_logits))
