"""coda.torch.apply_to_llama and apply_to_qwen3: a Hugging Face
LlamaForCausalLM (or MistralForCausalLM) or Qwen3ForCausalLM whose decoder
layers, final norm, LM head and loss run through the coda ops. Mistral's
layers are Llama's with a sliding window on every layer (query t sees keys
t - sliding_window < j <= t), passed to the attention op. Qwen3's decoder layer is Llama's
with a per-head RMSNorm of q and k (q_norm, k_norm: weights of head_dim,
eps rms_norm_eps) between the projection and RoPE; both share everything
here but the qkv op.

The model's parameters stay what they are (state dict, optimizer and
checkpoint code unchanged); custom ops (coda::hf_llama_qkv_rope or, for
Qwen3, coda::hf_qwen3_qkv_norm_rope, coda::hf_llama_swiglu and
coda::hf_llama_mlp, the SwiGLU with the down projection) take the model's
weights as they are, build the operands in coda's layouts inside their
eager implementations (where torch.compile does not see them) and their
backward ops map the gradients back:
  - q, k, v rows: Hugging Face pairs the rotary dimensions (i, i + hd/2),
    coda's RoPE program adjacent columns (2j, 2j+1), so the rows of each q
    and k head are reordered (the permutation rope_row_permutation names,
    applied as a reshape): coda row 2j + s of a head is HF row s·hd/2 + j;
    the attention scores are unchanged by the same permutation of q and k;
  - q_norm, k_norm weights (Qwen3): their columns take the same
    permutation (coda column 2j + s is HF column s·hd/2 + j); the per-head
    RMS is a sum over the head, unchanged by it, so the normalized q and k
    are HF's with their columns permuted;
  - gate/up rows interleaved [g0, u0, g1, u1, ...] for the SwiGLU program.
These copies are rebuilt in the backward instead of being kept.

Routing: a forward with a KV cache (generation, model.generate) runs the
model's own layers, with the same weights; a forward without one runs the
coda ops and returns no cache (it asks for none: use_cache=True without a
cache also runs the Hugging Face layers)."""

import sys
import types

import torch

from . import torch as ct

__all__ = ["apply_to_llama", "apply_to_qwen3", "llama_decoder_layer", "qwen3_decoder_layer"]

# rope types whose inverse frequencies do not change with the sequence length
_STATIC_ROPE = ("default", "linear", "llama3", "yarn_static")


# The weight re-layouts happen inside the eager implementations of these
# custom ops, where torch.compile does not see them: a traced decoder layer is
# a handful of opaque calls, and Inductor generates and compiles no gather,
# concatenation or scatter kernels per layer (with the re-layouts as aten ops
# in the graph, the first compile grew by seconds per layer). The copies live
# only for the duration of one op call, in the forward and again in the
# backward.

def _hf_wqkv(wq, wk, wv, heads_q, heads_kv):
    """coda's qkv weight from Hugging Face's: within every q and k head, HF
    row s·hd/2 + j becomes coda row 2j + s (rope_row_permutation). A reshape,
    not an index: the op's eager body also runs on tensors whose values are
    not set (torch.compile's nested regions take their output metadata by
    running it), where an index tensor would point anywhere."""
    nh, K = heads_q + heads_kv, wq.shape[1]
    qk = torch.cat([wq, wk]).reshape(nh, 2, -1, K).transpose(1, 2).reshape(-1, K)
    return torch.cat([qk, wv])


def _hf_dwqkv(dw, heads_q, heads_kv, nq, nk):
    """The inverse of _hf_wqkv on a gradient: Hugging Face's q, k, v rows,
    each a tensor of its own (custom op outputs may not alias)."""
    K = dw.shape[1]

    def heads(rows, n):
        return rows.reshape(n, -1, 2, K).transpose(1, 2).reshape(-1, K)   # a copy: the transpose

    return heads(dw[:nq], heads_q), heads(dw[nq:nq + nk], heads_kv), dw[nq + nk:].clone()


def _hf_wgu(wg, wu):
    return torch.stack([wg, wu], dim=1).reshape(2 * wg.shape[0], wg.shape[1])


@torch.library.custom_op("coda::hf_llama_qkv_rope", mutates_args=())
def _hf_qkv_rope(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, r: torch.Tensor,
                 pos: torch.Tensor, freq: torch.Tensor, heads_q: int, heads_kv: int) -> torch.Tensor:
    return torch.ops.coda.llama_qkv_rope(h, _hf_wqkv(wq, wk, wv, heads_q, heads_kv), r, pos, freq)


@_hf_qkv_rope.register_fake
def _(h, wq, wk, wv, r, pos, freq, heads_q, heads_kv):
    return h.new_empty((h.shape[0], wq.shape[0] + wk.shape[0] + wv.shape[0]))


@torch.library.custom_op("coda::hf_llama_qkv_rope_backward", mutates_args=())
def _hf_qkv_rope_bwd(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, r: torch.Tensor,
                     pos: torch.Tensor, freq: torch.Tensor, qkv: torch.Tensor, dqkv: torch.Tensor,
                     heads_q: int, heads_kv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                                                           torch.Tensor, torch.Tensor]:
    dh, dw, dr = torch.ops.coda.llama_qkv_rope_backward(h, _hf_wqkv(wq, wk, wv, heads_q, heads_kv), r, pos,
                                                        freq, qkv, dqkv)
    dq, dk, dv = _hf_dwqkv(dw, heads_q, heads_kv, wq.shape[0], wk.shape[0])
    return dh, dq, dk, dv, dr


@_hf_qkv_rope_bwd.register_fake
def _(h, wq, wk, wv, r, pos, freq, qkv, dqkv, heads_q, heads_kv):
    return torch.empty_like(h), torch.empty_like(wq), torch.empty_like(wk), torch.empty_like(wv), torch.empty_like(r)


def _hf_qkv_rope_setup(ctx, inputs, output):
    ctx.save_for_backward(*inputs[:7], output)
    ctx.heads = inputs[7:]


def _hf_qkv_rope_grad(ctx, dqkv):
    dh, dq, dk, dv, dr = torch.ops.coda.hf_llama_qkv_rope_backward(*ctx.saved_tensors, dqkv, *ctx.heads)
    return dh, dq, dk, dv, dr, None, None, None, None


_hf_qkv_rope.register_autograd(_hf_qkv_rope_grad, setup_context=_hf_qkv_rope_setup)


def _hf_g(g):
    """coda's QK-norm weight from Hugging Face's (one head's columns, the
    rotary permutation of _hf_wqkv): column 2j + s is HF's s·hd/2 + j."""
    return g.reshape(2, -1).t().reshape(-1)


def _hf_dg(dg):
    """The inverse of _hf_g on a gradient (a tensor of its own)."""
    return dg.reshape(-1, 2).t().contiguous().reshape(-1)


@torch.library.custom_op("coda::hf_qwen3_qkv_norm_rope", mutates_args=())
def _hf_qwen3_qkv(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, r: torch.Tensor,
                  gq: torch.Tensor, gk: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor, heads_q: int,
                  heads_kv: int, eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return torch.ops.coda.qwen3_qkv_norm_rope(h, _hf_wqkv(wq, wk, wv, heads_q, heads_kv), r, _hf_g(gq), _hf_g(gk),
                                              pos, freq, heads_q, heads_kv, eps)


@_hf_qwen3_qkv.register_fake
def _(h, wq, wk, wv, r, gq, gk, pos, freq, heads_q, heads_kv, eps):
    M, N = h.shape[0], wq.shape[0] + wk.shape[0] + wv.shape[0]
    return (h.new_empty((M, N)), h.new_empty((M, N)),
            h.new_empty((M, heads_q + 2 * heads_kv), dtype=ct._stat_dtype(h.dtype)))


@torch.library.custom_op("coda::hf_qwen3_qkv_norm_rope_backward", mutates_args=())
def _hf_qwen3_qkv_bwd(h: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor, r: torch.Tensor,
                      gq: torch.Tensor, gk: torch.Tensor, pos: torch.Tensor, freq: torch.Tensor, qkv: torch.Tensor,
                      pre: torch.Tensor, rq: torch.Tensor, dqkv: torch.Tensor, heads_q: int,
                      heads_kv: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                              torch.Tensor, torch.Tensor]:
    dh, dw, dr, dgq, dgk = torch.ops.coda.qwen3_qkv_norm_rope_backward(
        h, _hf_wqkv(wq, wk, wv, heads_q, heads_kv), r, _hf_g(gq), _hf_g(gk), pos, freq, qkv, pre, rq, dqkv,
        heads_q, heads_kv)
    dq, dk, dv = _hf_dwqkv(dw, heads_q, heads_kv, wq.shape[0], wk.shape[0])
    return dh, dq, dk, dv, dr, _hf_dg(dgq), _hf_dg(dgk)


@_hf_qwen3_qkv_bwd.register_fake
def _(h, wq, wk, wv, r, gq, gk, pos, freq, qkv, pre, rq, dqkv, heads_q, heads_kv):
    return (torch.empty_like(h), torch.empty_like(wq), torch.empty_like(wk), torch.empty_like(wv),
            torch.empty_like(r), torch.empty_like(gq), torch.empty_like(gk))


def _hf_qwen3_qkv_setup(ctx, inputs, output):
    qkv, pre, rq = output
    ctx.save_for_backward(*inputs[:9], qkv, pre, rq)
    ctx.heads = inputs[9:11]
    ctx.mark_non_differentiable(pre, rq)   # kept for the backward only


def _hf_qwen3_qkv_grad(ctx, dqkv, dpre, drq):
    grads = torch.ops.coda.hf_qwen3_qkv_norm_rope_backward(*ctx.saved_tensors, dqkv, *ctx.heads)
    return (*grads, None, None, None, None, None)


_hf_qwen3_qkv.register_autograd(_hf_qwen3_qkv_grad, setup_context=_hf_qwen3_qkv_setup)


@torch.library.custom_op("coda::hf_llama_swiglu", mutates_args=())
def _hf_swiglu(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor,
               r: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.ops.coda.llama_swiglu(h, _hf_wgu(wg, wu), r)


@_hf_swiglu.register_fake
def _(h, wg, wu, r):
    M, F = h.shape[0], wg.shape[0]
    return h.new_empty((M, 2 * F)), h.new_empty((M, F))


@torch.library.custom_op("coda::hf_llama_swiglu_backward", mutates_args=())
def _hf_swiglu_bwd(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, r: torch.Tensor, z: torch.Tensor,
                   dy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    dh, dwgu, dr = torch.ops.coda.llama_swiglu_backward(h, _hf_wgu(wg, wu), r, z, None, dy)
    dwgu = dwgu.reshape(wg.shape[0], 2, wg.shape[1])
    return dh, dwgu[:, 0].contiguous(), dwgu[:, 1].contiguous(), dr


@_hf_swiglu_bwd.register_fake
def _(h, wg, wu, r, z, dy):
    return torch.empty_like(h), torch.empty_like(wg), torch.empty_like(wu), torch.empty_like(r)


def _hf_swiglu_setup(ctx, inputs, output):
    z, _ = output
    ctx.save_for_backward(*inputs, z)
    ctx.mark_non_differentiable(z)   # kept for the backward only


def _hf_swiglu_grad(ctx, dz, dy):
    return torch.ops.coda.hf_llama_swiglu_backward(*ctx.saved_tensors, dy)


_hf_swiglu.register_autograd(_hf_swiglu_grad, setup_context=_hf_swiglu_setup)


# The MLP after the attention's residual norm as one op: gate/up + SwiGLU,
# then the down projection + residual. Only z (the pre-activation pairs)
# is kept for the backward, not y = silu(g) * u: the backward's SwiGLU map
# (llama_swiglu_bwd_pairs) recomputes y from z beside dz, and the down
# projection's weight gradient takes that. Saving y as the separate
# linear_residual op does costs M x F values a layer (2 GiB at the 1.1 B
# shape's 16 layers and 8192 tokens).

@torch.library.custom_op("coda::hf_llama_mlp", mutates_args=())
def _hf_mlp(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, r: torch.Tensor, wd: torch.Tensor,
            res: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z, y = torch.ops.coda.llama_swiglu(h, _hf_wgu(wg, wu), r)
    return torch.ops.coda.linear_residual(y, wd, res), z


@_hf_mlp.register_fake
def _(h, wg, wu, r, wd, res):
    M, F = h.shape[0], wg.shape[0]
    return h.new_empty((M, wd.shape[0])), h.new_empty((M, 2 * F))


@torch.library.custom_op("coda::hf_llama_mlp_backward", mutates_args=())
def _hf_mlp_bwd(h: torch.Tensor, wg: torch.Tensor, wu: torch.Tensor, r: torch.Tensor, wd: torch.Tensor,
                z: torch.Tensor, dx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                                            torch.Tensor]:
    cx = ct.context_for(h)
    M, F2 = z.shape
    dx = dx.contiguous()
    dy = torch.empty((M, F2 // 2), dtype=h.dtype, device=h.device)
    cx.gemm(dx, wd, out=dy)                                    # dy = dx wd
    dz, y, zdz = ct._swiglu_bwd_map(cx, z, dy)
    del dy
    dwd = torch.empty_like(wd)
    cx.gemm(dx, y, trans_a=True, out=dwd)                      # dwd = dx^T y, y recomputed
    del y
    dh, dwgu, dr = ct._row_scaled_linear_bwd(cx, h, _hf_wgu(wg, wu), r, dz, zdz)
    dwgu = dwgu.reshape(wg.shape[0], 2, wg.shape[1])
    return dh, dwgu[:, 0].contiguous(), dwgu[:, 1].contiguous(), dr, dwd


@_hf_mlp_bwd.register_fake
def _(h, wg, wu, r, wd, z, dx):
    return (torch.empty_like(h), torch.empty_like(wg), torch.empty_like(wu), torch.empty_like(r),
            torch.empty_like(wd))


def _hf_mlp_setup(ctx, inputs, output):
    h, wg, wu, r, wd, _ = inputs
    ctx.save_for_backward(h, wg, wu, r, wd, output[1])
    ctx.mark_non_differentiable(output[1])   # z: kept for the backward only


def _hf_mlp_grad(ctx, dx, dz):
    dh, dwg, dwu, dr, dwd = torch.ops.coda.hf_llama_mlp_backward(*ctx.saved_tensors, dx)
    return dh, dwg, dwu, dr, dwd, dx


_hf_mlp.register_autograd(_hf_mlp_grad, setup_context=_hf_mlp_setup)


def _dims(config):
    hq = config.num_attention_heads
    hkv = getattr(config, "num_key_value_heads", None) or hq
    hd = getattr(config, "head_dim", None) or config.hidden_size // hq
    return hq, hkv, hd


def _window(cfg):
    """The sliding window transformers applies on every layer (0: none):
    Mistral's sliding_window (null: none); LlamaForCausalLM does not read
    the key, and Qwen3's windows are refused (_check_supported)."""
    if getattr(cfg, "model_type", None) == "mistral":
        return int(getattr(cfg, "sliding_window", None) or 0)
    return 0


def _block_rest(qkv, x, wo, wn2, wg, wu, wd, batch, hq, hkv, eps2, window):
    """The decoder layer after its qkv: attention (within the window when
    it is shorter than the sequence), out-projection + residual + RMSNorm,
    the MLP + residual (the same in Llama, Mistral and Qwen3)."""
    o, _ = ct.attention(qkv, batch, hq, hkv, window if 0 < window < x.shape[0] // batch else 0)
    x1, h2, r2 = ct.llama_residual_norm(o, wo, x, wn2, eps2)
    x2, _ = torch.ops.coda.hf_llama_mlp(h2, wg, wu, r2, wd, x1)
    return x2


def _decoder_layer(x, wn1, wq, wk, wv, wo, wn2, wg, wu, wd, pos, freq, batch, hq, hkv, eps1, eps2, window):
    h1, r1 = ct.llama_rmsnorm(x, wn1, eps1)
    qkv = torch.ops.coda.hf_llama_qkv_rope(h1, wq, wk, wv, r1, pos, freq, hq, hkv)
    return _block_rest(qkv, x, wo, wn2, wg, wu, wd, batch, hq, hkv, eps2, window)


def _qwen3_decoder_layer(x, wn1, wq, wk, wv, gq, gk, wo, wn2, wg, wu, wd, pos, freq, batch, hq, hkv, eps1, eps_qk,
                         eps2, window):
    h1, r1 = ct.llama_rmsnorm(x, wn1, eps1)
    qkv, _, _ = torch.ops.coda.hf_qwen3_qkv_norm_rope(h1, wq, wk, wv, r1, gq, gk, pos, freq, hq, hkv, eps_qk)
    return _block_rest(qkv, x, wo, wn2, wg, wu, wd, batch, hq, hkv, eps2, window)


# Under torch.compile every layer is the same subgraph on other weights:
# a nested compile region is traced and compiled once and called per layer
# (Inductor's time for the whole model grew faster than the layer count:
# bench/results/gpu-2026-12-02b.md, call 4). Eager calls are unchanged.
_nested = getattr(torch.compiler, "nested_compile_region", None)
_decoder_layer_compiled = _nested(_decoder_layer) if _nested is not None else _decoder_layer
_qwen3_decoder_layer_compiled = _nested(_qwen3_decoder_layer) if _nested is not None else _qwen3_decoder_layer


def llama_decoder_layer(layer, x, batch, pos, freq, dims, window=0):
    """One LlamaDecoderLayer (or MistralDecoderLayer) on x ((batch*seq) x
    hidden) through the coda ops: RMSNorm, qkv + RoPE, attention,
    out-projection + residual + RMSNorm, gate/up + SwiGLU, down-projection +
    residual. pos, freq: rope_tables; dims: (heads_q, heads_kv, head_dim);
    window > 0: query t sees keys t - window < j <= t only (Mistral's
    sliding_window; 0: causal)."""
    hq, hkv, _ = dims
    att, mlp = layer.self_attn, layer.mlp
    n1, n2 = layer.input_layernorm, layer.post_attention_layernorm
    return _decoder_layer_compiled(x, n1.weight, att.q_proj.weight, att.k_proj.weight, att.v_proj.weight,
                                   att.o_proj.weight, n2.weight, mlp.gate_proj.weight, mlp.up_proj.weight,
                                   mlp.down_proj.weight, pos, freq, batch, hq, hkv, n1.variance_epsilon,
                                   n2.variance_epsilon, int(window))


def qwen3_decoder_layer(layer, x, batch, pos, freq, dims, window=0):
    """One Qwen3DecoderLayer on x ((batch*seq) x hidden) through the coda
    ops: as llama_decoder_layer, with the qkv op's QK-norm (q_norm, k_norm)
    between the projection and RoPE. pos, freq: qk_norm_rope_tables."""
    hq, hkv, _ = dims
    att, mlp = layer.self_attn, layer.mlp
    n1, n2 = layer.input_layernorm, layer.post_attention_layernorm
    return _qwen3_decoder_layer_compiled(x, n1.weight, att.q_proj.weight, att.k_proj.weight, att.v_proj.weight,
                                         att.q_norm.weight, att.k_norm.weight, att.o_proj.weight, n2.weight,
                                         mlp.gate_proj.weight, mlp.up_proj.weight, mlp.down_proj.weight, pos, freq,
                                         batch, hq, hkv, n1.variance_epsilon, att.q_norm.variance_epsilon,
                                         n2.variance_epsilon, int(window))


# the tile width of the backends' GEMMs (coda_preferred_tiling): the QK-norm's
# per-head statistics are segments of the qkv GEMM's columns
_TILE_N = 128


def _has_qk_norm(model):
    layers = getattr(getattr(model, "model", None), "layers", None)
    return bool(layers) and hasattr(layers[0].self_attn, "q_norm")


def _check_supported(model, name="apply_to_llama", qk_norm=False):
    cfg = model.config
    problems = []
    if qk_norm:
        if getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (getattr(cfg, "layer_types", None)
                                                                                 or ()):
            problems.append("use_sliding_window / sliding_attention layers (the attention is causal and global)")
        hd = _dims(cfg)[2]
        if hd % _TILE_N and _TILE_N % hd:
            problems.append("head_dim %d (the QK-norm's per-head statistics need head_dim and the GEMM tile of "
                            "%d columns to divide one another)" % (hd, _TILE_N))
        att = model.model.layers[0].self_attn
        if att.q_norm.variance_epsilon != att.k_norm.variance_epsilon:
            problems.append("q_norm eps %r != k_norm eps %r" % (att.q_norm.variance_epsilon,
                                                                 att.k_norm.variance_epsilon))
    elif getattr(cfg, "model_type", None) not in ("llama", "mistral") and getattr(cfg, "sliding_window", None) \
            and getattr(cfg, "use_sliding_window", True):
        problems.append("sliding_window %r of model_type %r (Mistral's window on every layer is taken; Llama has "
                        "none)" % (cfg.sliding_window, getattr(cfg, "model_type", None)))
    if getattr(cfg, "hidden_act", "silu") != "silu":
        problems.append("hidden_act %r (the SwiGLU program is silu)" % cfg.hidden_act)
    if getattr(cfg, "attention_bias", False):
        problems.append("attention_bias (the qkv and out projections have no bias here)")
    if getattr(cfg, "mlp_bias", False):
        problems.append("mlp_bias")
    if getattr(cfg, "pretraining_tp", 1) not in (1, None):
        problems.append("pretraining_tp %r" % cfg.pretraining_tp)
    hq, hkv, hd = _dims(cfg)
    if hd % 2 or hq % hkv:
        problems.append("head_dim %d / heads %d, %d (needs an even head_dim and heads a multiple of kv heads)"
                        % (hd, hq, hkv))
    rot = getattr(model.model, "rotary_emb", None)
    if rot is None or not hasattr(rot, "inv_freq"):
        problems.append("no rotary embedding with inv_freq on model.model")
    else:
        if float(getattr(rot, "attention_scaling", 1.0)) != 1.0:
            problems.append("rope attention_scaling %r (scaled cos/sin)" % rot.attention_scaling)
        rt = getattr(rot, "rope_type", "default")
        if rt not in _STATIC_ROPE:
            problems.append("rope_type %r (inverse frequencies that change with the length)" % rt)
        if rot.inv_freq.numel() * 2 != hd:
            problems.append("inv_freq of %d entries for head_dim %d" % (rot.inv_freq.numel(), hd))
    if problems:
        raise ValueError("coda.torch.%s: this model is not supported: %s" % (name, "; ".join(problems)))


class _Family:
    """What the patched forward (_coda_forward) needs of a model family:
    apply_to_llama's and apply_to_qwen3's here, apply_to_gpt2's in
    _hf_gpt2. name: the apply function's; hf_class: the model class it
    takes; module, layer_name: where the function of one patched layer is
    looked up (at every call, so a test may wrap it)."""
    hf_class = "LlamaForCausalLM"
    module = None
    layer_name = "llama_decoder_layer"

    def __init__(self, name, qk_norm=False):
        self.name = name
        self.qk_norm = qk_norm
        if qk_norm:
            self.hf_class, self.layer_name = "Qwen3ForCausalLM", "qwen3_decoder_layer"

    def check_call(self, model, kwargs):
        """Refusals of a forward's arguments and of training settings."""
        cfg = model.config
        if model.training and float(getattr(cfg, "attention_dropout", 0.0) or 0.0) > 0.0:
            raise ValueError("coda.torch.%s: attention_dropout %r is not supported in training"
                             % (self.name, cfg.attention_dropout))

    def embed_tokens(self, model):
        return model.model.embed_tokens

    def layers(self, model):
        return model.model.layers[: model.config.num_hidden_layers]

    def checkpointing(self, model):
        # gradient_checkpointing_enable() sets the flag on the model and on each layer
        return bool(getattr(model.model, "gradient_checkpointing", False))

    def prepare(self, model, embeds, position_ids, kwargs):
        """The residual stream's first value ((batch*seq) x hidden) and the
        layer function's arguments after (layer, x)."""
        B, T, D = embeds.shape
        dims = _dims(model.config)
        tables = ct.qk_norm_rope_tables if self.qk_norm else ct.rope_tables
        pos, freq = tables(position_ids, model.model.rotary_emb.inv_freq, dims[0], dims[1], embeds.dtype)
        return embeds.reshape(B * T, D), (B, pos, freq, dims, _window(model.config))

    def head_loss(self, model, x, tgt, keep_logits):
        norm = model.model.norm
        return ct.llama_lm_head_loss(x, norm.weight, model.lm_head.weight, tgt, norm.variance_epsilon,
                                     keep_logits=keep_logits)

    def final_norm(self, model):
        return model.model.norm

    def logits(self, model, hidden):
        """The logits of the final norm's output (the forward without labels)."""
        return model.lm_head(hidden)

    def output(self, **fields):
        from transformers.modeling_outputs import CausalLMOutputWithPast

        return CausalLMOutputWithPast(**fields)


def _coda_forward(self, input_ids=None, attention_mask=None, position_ids=None, inputs_embeds=None, labels=None,
                  use_cache=None, logits_to_keep=0, **kwargs):
    """The patched forward of every family (self._coda_family)."""
    cache = kwargs.get("cache", kwargs.get("past_key_values"))
    wants_extra = kwargs.get("output_attentions") or kwargs.get("output_hidden_states")
    if cache is not None or use_cache is True or wants_extra:
        # generation (KV cache) and per-layer outputs: the model's own layers
        return self._coda_hf_forward(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                                     inputs_embeds=inputs_embeds, labels=labels, use_cache=use_cache,
                                     logits_to_keep=logits_to_keep, **kwargs)
    fam = self._coda_family
    name = "coda.torch." + fam.name
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError(name + ": give exactly one of input_ids and inputs_embeds")
    if attention_mask is not None and attention_mask.dim() == 2 and not bool(attention_mask.all()):
        raise ValueError(name + ": the attention is causal without padding; this batch has a "
                         "padding mask with zeros (pack the sequences, or mask padded targets with -100 and "
                         "pass attention_mask=None)")
    if attention_mask is not None and attention_mask.dim() != 2:
        raise ValueError(name + ": only a 2-D padding mask of ones is taken here, got a "
                         "%d-D attention_mask" % attention_mask.dim())
    fam.check_call(self, kwargs)
    if inputs_embeds is None:
        inputs_embeds = fam.embed_tokens(self)(input_ids)
    B, T, D = inputs_embeds.shape
    if position_ids is None:
        position_ids = torch.arange(T, device=inputs_embeds.device)
    position_ids = position_ids.expand(B, T)
    x, layer_args = fam.prepare(self, inputs_embeds, position_ids, kwargs)
    decoder_layer = getattr(fam.module, fam.layer_name)
    checkpointing = self.training and fam.checkpointing(self)
    for layer in fam.layers(self):
        if checkpointing:
            x = torch.utils.checkpoint.checkpoint(decoder_layer, layer, x, *layer_args, use_reentrant=False)
        else:
            x = decoder_layer(layer, x, *layer_args)
    loss, logits = None, None
    if labels is not None:
        # the shift of Hugging Face's causal-LM loss: row t predicts token t + 1
        tgt = torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1)
        loss, count = fam.head_loss(self, x, tgt, self._coda_keep_logits)
        num_items = kwargs.get("num_items_in_batch")
        if num_items is not None:
            # a sum over the counted targets divided by the batch's count (gradient accumulation)
            loss = loss * (count / torch.as_tensor(num_items, dtype=count.dtype, device=count.device))
    else:
        hidden = fam.final_norm(self)(x.reshape(B, T, D))
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = fam.logits(self, hidden[:, keep, :])
    return fam.output(loss=loss, logits=logits)


def _install(model, family, keep_logits, check):
    """Patches model's forward with _coda_forward for family (check(model)
    refuses what it does not cover); patching a patched model again sets
    keep_logits only."""
    if getattr(model, "_coda_patched", False):
        model._coda_keep_logits = bool(keep_logits)
        return model
    check(model)
    model._coda_family = family
    model._coda_name = family.name
    model._coda_keep_logits = bool(keep_logits)
    model._coda_hf_forward = model.forward
    model.forward = types.MethodType(_coda_forward, model)
    model._coda_patched = True
    return model


def _patch(model, keep_logits, name, qk_norm):
    if not hasattr(model, "model") or not hasattr(model, "lm_head") or not hasattr(model.model, "layers"):
        raise TypeError("coda.torch.%s: expects a transformers %s, got %s"
                        % (name, _FAMILIES[name].hf_class, type(model).__name__))
    layers = model.model.layers
    if len(layers) and hasattr(layers[0], "pre_feedforward_layernorm"):
        raise ValueError("coda.torch.%s: this model has Gemma 3's layers (pre_feedforward_layernorm, post-norms): "
                         "use coda.torch.apply_to_gemma3" % name)
    if _has_qk_norm(model) != qk_norm:
        raise ValueError("coda.torch.%s: this model has %s QK-norm (q_norm, k_norm): use coda.torch.%s"
                         % (name, "no" if qk_norm else "a", "apply_to_llama" if qk_norm else "apply_to_qwen3"))
    return _install(model, _FAMILIES[name], keep_logits, lambda m: _check_supported(m, name, qk_norm))


def apply_to_llama(model, keep_logits=False):
    """Patches a transformers LlamaForCausalLM or MistralForCausalLM (its
    sliding_window on every layer) in place (and returns it): its
    forward without a KV cache runs the decoder layers, the final norm, the
    LM head and the loss through the coda ops (loss without logits when
    labels are given; logits through the model's own norm and head when
    not); generation with a cache runs the model's own layers. Parameters,
    state dict and modules stay the model's. Refuses (ValueError, naming
    why) models the ops do not cover: biases, another activation, scaled or
    length-dependent RoPE, a QK-norm (apply_to_qwen3). keep_logits: the
    loss stores the logits for its backward instead of recomputing them
    (coda.torch.llama_lm_head_loss); patching a patched model again sets
    it."""
    return _patch(model, keep_logits, "apply_to_llama", False)


def apply_to_qwen3(model, keep_logits=False):
    """Patches a transformers Qwen3ForCausalLM in place (and returns it), as
    apply_to_llama a Llama: the decoder layers' qkv op adds the per-head
    RMSNorm of q and k (q_norm, k_norm) before RoPE. Refuses (ValueError,
    naming why) what apply_to_llama refuses, and sliding-window layers and
    a head_dim that does not divide 128 or is not a multiple of it."""
    return _patch(model, keep_logits, "apply_to_qwen3", True)


_FAMILIES = {"apply_to_llama": _Family("apply_to_llama"), "apply_to_qwen3": _Family("apply_to_qwen3", True)}
for _f in _FAMILIES.values():
    _f.module = sys.modules[__name__]
