"""coda.torch.apply_to_gpt2: a Hugging Face GPT2LMHeadModel whose blocks,
final LayerNorm, tied head and loss run through the GPT-2 ops of
coda.torch (gpt2_ln_linear, attention, gpt2_residual_ln, gpt2_mlp,
gpt2_lm_head_loss: the epilogue programs programs/gpt2_*.coda of the C
plan, src/nn/gpt2.c and gpt2_head.c).

GPT-2's Conv1D weights are stored in x out, the layout the ops take (z =
LN(x) w + b), and its fused c_attn gives q, k, v as the attention op reads
them (per row [q heads | k heads | v heads], no RoPE): the ops take the
model's parameters as they are, with no copies. The parameters, the state
dict and the modules stay the model's.

The forward, its routing (a KV cache, use_cache=True or per-layer outputs
run the model's own blocks), the padding refusal, the shifted targets and
num_items_in_batch are apply_to_llama's (_hf_llama._coda_forward); this
module gives the family's embedding (token plus learned position, plus
token types where given), its block, its head and its refusals."""

import sys

import torch

from . import _hf_llama
from . import torch as ct

__all__ = ["apply_to_gpt2", "gpt2_block"]

# the tanh GELU, as Hugging Face names it (ACT2FN)
_TANH_GELU = ("gelu_new", "gelu_pytorch_tanh")
_DROPOUT = ("resid_pdrop", "embd_pdrop", "attn_pdrop")


def _gpt2_block(x, g1, b1, wqkv, bqkv, wo, bo, g2, b2, wfc, bfc, wp, bp, batch, heads, eps1, eps2):
    qkv, _, _ = torch.ops.coda.gpt2_ln_linear(x, g1, b1, wqkv, bqkv, eps1)
    o, _ = ct.attention(qkv, batch, heads, heads)
    x1, h2, mu2, rs2 = torch.ops.coda.gpt2_residual_ln(o, wo, bo, x, g2, eps2)
    y, _ = torch.ops.coda.gpt2_mlp(x1, h2, mu2, rs2, g2, b2, wfc, bfc, wp, bp)
    return y


# one nested compile region per block under torch.compile, as the Llama layer's
_nested = getattr(torch.compiler, "nested_compile_region", None)
_gpt2_block_compiled = _nested(_gpt2_block) if _nested is not None else _gpt2_block


def gpt2_block(block, x, batch, heads):
    """One GPT2Block on x ((batch*seq) x hidden) through the coda ops:
    LayerNorm + qkv (gpt2_ln_linear), causal attention, out-projection +
    bias + residual with the second LayerNorm's producer
    (gpt2_residual_ln), LayerNorm + fc + GELU and the projection + bias +
    residual (gpt2_mlp)."""
    att, mlp, n1, n2 = block.attn, block.mlp, block.ln_1, block.ln_2
    return _gpt2_block_compiled(x, n1.weight, n1.bias, att.c_attn.weight, att.c_attn.bias, att.c_proj.weight,
                                att.c_proj.bias, n2.weight, n2.bias, mlp.c_fc.weight, mlp.c_fc.bias,
                                mlp.c_proj.weight, mlp.c_proj.bias, batch, heads, n1.eps, n2.eps)


class _Gpt2(_hf_llama._Family):
    hf_class = "GPT2LMHeadModel"
    layer_name = "gpt2_block"

    def __init__(self):
        super().__init__("apply_to_gpt2")

    def check_call(self, model, kwargs):
        name = "coda.torch." + self.name
        for k in ("head_mask", "encoder_hidden_states", "encoder_attention_mask"):
            if kwargs.get(k) is not None:
                raise ValueError("%s: %s is not supported (the blocks run every head, without cross-attention)"
                                 % (name, k))
        cfg = model.config
        if model.training:
            on = ["%s %r" % (k, getattr(cfg, k)) for k in _DROPOUT if float(getattr(cfg, k, 0.0) or 0.0) > 0.0]
            if on:
                raise ValueError("%s: dropout is not supported in training: %s (set %s to 0 in the config, e.g. "
                                 "from_pretrained(..., resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0), or call "
                                 "model.eval())" % (name, ", ".join(on), " and ".join(_DROPOUT)))

    def embed_tokens(self, model):
        return model.transformer.wte

    def layers(self, model):
        return model.transformer.h

    def checkpointing(self, model):
        return bool(getattr(model.transformer, "gradient_checkpointing", False))

    def prepare(self, model, embeds, position_ids, kwargs):
        tr = model.transformer
        B, T, D = embeds.shape
        x = embeds + tr.wpe(position_ids)
        types_ = kwargs.get("token_type_ids")
        if types_ is not None:
            x = x + tr.wte(types_.reshape(B, T))   # Hugging Face's token types: rows of the token embedding
        return x.reshape(B * T, D), (B, model.config.n_head)

    def head_loss(self, model, x, tgt, keep_logits):
        nf = model.transformer.ln_f
        return ct.gpt2_lm_head_loss(x, nf.weight, nf.bias, model.lm_head.weight, tgt, nf.eps,
                                    keep_logits=keep_logits)

    def final_norm(self, model):
        return model.transformer.ln_f

    def output(self, **fields):
        from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions

        return CausalLMOutputWithCrossAttentions(**fields)


_FAMILY = _Gpt2()
_FAMILY.module = sys.modules[__name__]


def _check_supported(model):
    cfg = model.config
    problems = []
    act = getattr(cfg, "activation_function", "gelu_new")
    if act not in _TANH_GELU:
        problems.append("activation_function %r (the MLP's GELU is the tanh form: %s)" % (act, ", ".join(_TANH_GELU)))
    if getattr(cfg, "add_cross_attention", False):
        problems.append("add_cross_attention (the blocks are decoder-only: no cross-attention)")
    if getattr(cfg, "scale_attn_by_inverse_layer_idx", False):
        problems.append("scale_attn_by_inverse_layer_idx (the attention scale is 1/sqrt(head_dim) in every layer)")
    if getattr(cfg, "reorder_and_upcast_attn", False):
        problems.append("reorder_and_upcast_attn (the attention is coda's: leave it False)")
    if not getattr(cfg, "scale_attn_weights", True):
        problems.append("scale_attn_weights False (the attention scale is 1/sqrt(head_dim))")
    if cfg.n_embd % cfg.n_head:
        problems.append("n_embd %d is not a multiple of n_head %d" % (cfg.n_embd, cfg.n_head))
    if getattr(model.lm_head, "bias", None) is not None:
        problems.append("a bias on lm_head (the head has none)")
    if problems:
        raise ValueError("coda.torch.apply_to_gpt2: this model is not supported: %s" % "; ".join(problems))


def apply_to_gpt2(model, keep_logits=False):
    """Patches a transformers GPT2LMHeadModel in place (and returns it): its
    forward without a KV cache runs the blocks, the final LayerNorm, the
    head and the loss through the coda ops (loss without logits when
    labels are given; logits through the model's own ln_f and head when
    not); generation with a cache runs the model's own blocks. Parameters,
    state dict and modules stay the model's. Refuses (ValueError, naming
    the config key and what is allowed) what the ops do not cover: another
    activation than the tanh GELU (gelu_new, gelu_pytorch_tanh),
    cross-attention, scale_attn_by_inverse_layer_idx,
    reorder_and_upcast_attn, unscaled attention; and in a forward, padding
    masks with zeros, head_mask, and dropout (resid_pdrop, embd_pdrop,
    attn_pdrop above 0) in training. keep_logits: the loss stores the
    logits for its backward instead of recomputing them
    (coda.torch.gpt2_lm_head_loss); patching a patched model again sets
    it."""
    tr = getattr(model, "transformer", None)
    if tr is None or not hasattr(model, "lm_head") or not hasattr(tr, "h") or not hasattr(tr, "wpe"):
        raise TypeError("coda.torch.apply_to_gpt2: expects a transformers %s, got %s"
                        % (_FAMILY.hf_class, type(model).__name__))
    return _hf_llama._install(model, _FAMILY, keep_logits, _check_supported)
