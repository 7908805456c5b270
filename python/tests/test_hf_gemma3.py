"""coda.torch.apply_to_gemma3 on a tiny randomly initialized Hugging Face
Gemma3ForCausalLM (the text model: (1 + w) RMSNorms moved off zero,
QK-norm, post-attention and post-feedforward norms, GeGLU, two RoPE bases,
query_pre_attn_scalar other than head_dim, sliding-window layers whose
window is shorter than the sequence mixed with global ones, GQA, MHA, MQA,
head_dim other than hidden / heads, tied and untied heads, the logit soft
cap): loss, logits and every gradient against the unpatched model on the
same weights (float64 on the CPU), state dict unchanged, greedy generation
unchanged, a training loop and the Trainer, refusals by config key,
layers against Gemma3DecoderLayer, opcheck and gradcheck of the new ops,
torch.compile(fullgraph=True) of a patched layer (only coda ops traced)
and of the model with Inductor; on a GPU the same comparisons in bf16 and
a short training run. Skipped where PyTorch or transformers is not
installed."""

import math

import pytest

import hf_needs

torch, transformers = hf_needs.torch_and_transformers("Gemma3ForCausalLM")
try:
    _V5 = "rope_parameters" in transformers.Gemma3TextConfig().to_dict()
except Exception:  # noqa: BLE001
    _V5 = False
if not _V5:
    pytest.skip("these tests build Gemma 3 configs with transformers 5's rope_parameters", allow_module_level=True)

import coda.torch as ct  # noqa: E402
from coda import _hf_gemma3  # noqa: E402

import hf_patch_common as common  # noqa: E402
from hf_patch_common import F64_RTOL, batch  # noqa: E402

SLIDING, FULL = "sliding_attention", "full_attention"


def rope(full=None, sliding=None):
    """rope_parameters: the global layers' base 10000, the local layers' 100
    (different, so that a layer taking the other's frequencies fails)."""
    return {FULL: dict({"rope_type": "default", "rope_theta": 10000.0}, **(full or {})),
            SLIDING: dict({"rope_type": "default", "rope_theta": 100.0}, **(sliding or {}))}


def tiny_config(**kw):
    """Layers alternate local, global (layer 0 local); window 4 of the
    batch's 12 tokens; head_dim 16, not hidden / heads = 8; 4 query heads
    on 2 kv heads; the score scale 24^-1/2, not 16^-1/2."""
    n = kw.pop("num_hidden_layers", 2)
    return common.tiny_config(transformers.Gemma3TextConfig, kw, num_hidden_layers=n, head_dim=16,
                              query_pre_attn_scalar=24, sliding_window=4, rope_parameters=rope(),
                              layer_types=[SLIDING if (i + 1) % 2 else FULL for i in range(n)], pad_token_id=0,
                              bos_token_id=2, eos_token_id=1)


make_pair = common.pair_maker(transformers.Gemma3ForCausalLM, tiny_config, ct.apply_to_gemma3)


def layer_mask(layer, T, dtype):
    """The additive mask Hugging Face gives the layer: causal, and within
    the window on a local layer."""
    local = _hf_gemma3._layer_type(layer) == SLIDING
    return common.sliding_mask(T, layer.self_attn.sliding_window if local else None, dtype)


def run_unpatched_layer(ref, i, x, T):
    layer = ref.model.layers[i]
    pe = ref.model.rotary_emb(x, torch.arange(T)[None], _hf_gemma3._layer_type(layer))
    out = layer(x, position_embeddings=pe, attention_mask=layer_mask(layer, T, x.dtype))
    return out[0] if isinstance(out, tuple) else out


class TestGemma3(common.PatchTests):
    """The tests every patched family runs (hf_patch_common.py); the state
    dict, generate and GPU loss tests with tied and untied heads. Layer 0
    is a local layer with a window shorter than the sequence."""
    make_pair = staticmethod(make_pair)
    layer_module = _hf_gemma3
    decoder_layer = "gemma3_decoder_layer"
    rope_tables = None
    layer_ops = ["attention", "hf_gemma3_mlp", "hf_gemma3_post_attn", "hf_gemma3_qkv_norm_rope", "hf_gemma3_rmsnorm"]
    padding_error = "apply_to_gemma3: .*padding"
    # one column tile per head; the local layers' window shorter than the batch's 256 tokens
    gpu_config = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=128, query_pre_attn_scalar=96,
                      max_position_embeddings=512, sliding_window=64)

    @pytest.fixture(params=[True, False], ids=["tied", "untied"])
    def variant(self, request):
        return {"tie_word_embeddings": request.param}

    def layer_args(self, pm, B, T, dtype):
        embeds = torch.zeros(B, T, pm.config.hidden_size, dtype=dtype)
        return _hf_gemma3._FAMILY.prepare(pm, embeds, torch.arange(T).expand(B, T), {})[1]

    def unpatched_layer(self, ref, x, B, T):
        return run_unpatched_layer(ref, 0, x, T)


CONFIGS = {
    "gqa-hd16-window4": {},
    "softcap": {"final_logit_softcapping": 0.1},
    "untied": {"tie_word_embeddings": False},
    "mha": {"num_key_value_heads": 4},
    "mqa-hd32": {"num_key_value_heads": 1, "head_dim": 32},
    "hd8-scale-hd": {"head_dim": 8, "query_pre_attn_scalar": 8},
    "window-covers-seq": {"sliding_window": 16},
    "window2": {"sliding_window": 2},
    "4-layers-mixed": {"num_hidden_layers": 4, "layer_types": [SLIDING, FULL, SLIDING, SLIDING]},
    "all-global": {"layer_types": [FULL, FULL]},
    "linear-rope-global": {"rope_parameters": rope(full={"rope_type": "linear", "factor": 4.0})},
    "gelu_new": {"hidden_activation": "gelu_new"},
    "eps-softcap-untied": {"rms_norm_eps": 1e-3, "final_logit_softcapping": 0.05, "tie_word_embeddings": False},
}


@pytest.mark.parametrize("kw", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits, kw):
    if keep_logits and kw.get("final_logit_softcapping"):
        pytest.skip("keep_logits is refused with a soft cap (test_unsupported_models_refused)")
    ref, pm = make_pair(keep_logits=keep_logits, **kw)
    assert (pm.lm_head.weight is pm.model.embed_tokens.weight) == kw.get("tie_word_embeddings", True)
    names = [n for n, _ in ref.named_parameters()]
    assert any("post_feedforward_layernorm" in n for n in names) and any("q_norm" in n for n in names)
    common.assert_matches_unpatched(ref, pm, *batch())


def test_softcap_is_used():
    """The tiny models' logits are about 0.1 in size: a cap of 0.1 bends
    them (the soft-cap tests' configs take caps of that size). The patched
    model follows the cap when it is set and when it is not, and its
    logits (the forward without labels) are capped."""
    ref, pm = make_pair(final_logit_softcapping=0.1)
    ids, labels = batch()
    with torch.no_grad():
        capped = pm(input_ids=ids, labels=labels).loss
        capped_logits = pm(input_ids=ids).logits
        pm.config.final_logit_softcapping = None
        ref.config.final_logit_softcapping = None
        plain = pm(input_ids=ids, labels=labels).loss
        want = ref(input_ids=ids, labels=labels).loss
        logits = pm(input_ids=ids).logits
    assert abs(float(plain) - float(want)) <= F64_RTOL * abs(float(want))
    assert abs(float(capped) - float(plain)) > 1e-3 * abs(float(plain))
    assert float(capped_logits.abs().max()) < 0.1 < float(logits.abs().max())
    assert pm.model.embed_tokens.embed_scale.item() == pytest.approx(math.sqrt(32))


def test_position_ids():
    """Positions other than 0..T-1 (an offset, and a restart in a row): the
    RoPE of both layer types reads them per row."""
    common.assert_position_ids_match(*make_pair(sliding_window=16))


def test_inputs_embeds():
    """inputs_embeds are taken as given (Hugging Face scales only the
    embedding of input_ids)."""
    ref, pm = make_pair()
    ids, labels = batch()
    emb = torch.randn(2, 12, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    lr = ref(inputs_embeds=emb, labels=labels).loss
    lp = pm(inputs_embeds=emb, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())


@pytest.mark.parametrize("i", [0, 1], ids=["local", "global"])
def test_layer_matches_unpatched_layer_f64(i):
    """One patched layer against Gemma3DecoderLayer itself (with the mask
    Hugging Face builds for its type), forward and the gradient of its
    input and of every weight, in float64."""
    ref, pm = make_pair()
    B, T, D = 2, 12, 32
    args = TestGemma3().layer_args(pm, B, T, torch.float64)
    x = torch.randn(B * T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    common.assert_layer_matches_unpatched(
        lambda a: _hf_gemma3.gemma3_decoder_layer(pm.model.layers[i], a, *args),
        lambda b: run_unpatched_layer(ref, i, b.reshape(B, T, D), T).reshape(B * T, D),
        pm.model.layers[i], ref.model.layers[i], x)


def test_layer_window_changes_with_the_key_before_it():
    """A local layer's row t is unchanged by the key t - window (outside its
    window) and changed by t - window + 1, as Hugging Face's sliding mask."""
    _, pm = make_pair()
    B, T, D, w = 1, 12, 32, 4
    args = TestGemma3().layer_args(pm, B, T, torch.float64)
    x = torch.randn(B * T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    common.assert_window_edge(lambda y: _hf_gemma3.gemma3_decoder_layer(pm.model.layers[0], y, *args), x, 9, w)


@pytest.mark.parametrize("kw,words", [
    ({"hidden_activation": "gelu"}, ["hidden_activation 'gelu'", "gelu_pytorch_tanh"]),
    ({"hidden_activation": "silu"}, ["hidden_activation 'silu'"]),
    ({"attention_bias": True}, ["attention_bias"]),
    ({"attn_logit_softcapping": 50.0}, ["attn_logit_softcapping 50.0", "null"]),
    ({"use_bidirectional_attention": True}, ["use_bidirectional_attention", "causal"]),
    ({"rope_parameters": rope(full={"rope_type": "dynamic", "factor": 2.0})},
     ["rope_type 'dynamic' of the full_attention layers", "rope_parameters"]),
    ({"rope_parameters": rope(full={"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 32})},
     ["attention_scaling"]),
    ({"head_dim": 24}, ["head_dim 24"]),
])
def test_unsupported_models_refused(kw, words):
    torch.manual_seed(0)
    m = transformers.Gemma3ForCausalLM(tiny_config(**kw))
    with pytest.raises(ValueError) as e:
        ct.apply_to_gemma3(m)
    msg = str(e.value)
    assert msg.startswith("coda.torch.apply_to_gemma3: this model is not supported"), msg
    for w in words:
        assert w in msg, msg
    assert not getattr(m, "_coda_patched", False)


def test_keep_logits_with_softcap_refused():
    torch.manual_seed(0)
    m = transformers.Gemma3ForCausalLM(tiny_config(final_logit_softcapping=3.0))
    with pytest.raises(ValueError, match="keep_logits with final_logit_softcapping 3.0"):
        ct.apply_to_gemma3(m, keep_logits=True)
    ct.apply_to_gemma3(m)
    with pytest.raises(ValueError, match="keep_logits=False"):
        ct.apply_to_gemma3(m, keep_logits=True)
    assert m._coda_keep_logits is False


def test_attention_dropout_refused_in_training():
    ref, pm = make_pair(attention_dropout=0.1)
    ids, labels = batch()
    pm.train()
    with pytest.raises(ValueError, match="attention_dropout 0.1 is not supported in training"):
        pm(input_ids=ids, labels=labels)
    pm.eval()
    ref.eval()
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())


def test_other_families_refused():
    """apply_to_llama / apply_to_qwen3 do not take Gemma 3 (they would drop
    its post-norms), apply_to_gemma3 takes only Gemma 3."""
    torch.manual_seed(0)
    g = transformers.Gemma3ForCausalLM(tiny_config())
    for apply in (ct.apply_to_llama, ct.apply_to_qwen3):
        with pytest.raises(ValueError, match="use coda.torch.apply_to_gemma3"):
            apply(g)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4))
    with pytest.raises(TypeError, match="apply_to_gemma3: expects a transformers Gemma3ForCausalLM"):
        ct.apply_to_gemma3(llama)


def test_layer_saves_no_geglu_output():
    """What autograd keeps of a patched layer: of the M x F tensors only the
    MLP's pairs z (M x 2F), not y = gelu(g) u, which the backward recomputes."""
    _, pm = make_pair()
    B, T = 2, 12
    cfg = pm.config
    M, D, F = B * T, cfg.hidden_size, cfg.intermediate_size
    args = TestGemma3().layer_args(pm, B, T, torch.float64)
    layer = pm.model.layers[1]
    x = torch.randn(M, D, dtype=torch.float64, requires_grad=True)
    out, saved = common.saved_shapes(pm, lambda x: _hf_gemma3.gemma3_decoder_layer(layer, x, *args), x)
    assert (M, 2 * F) in saved and (M, F) not in saved, saved
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


UTILS = ("test_schema", "test_faketensor", "test_autograd_registration")


def _rnd(g):
    return lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731


def test_attention_op_window_and_scale():
    """coda::attention with a window and a scale (the local layers' call)
    against softmax attention written out with the sliding mask; the
    default window and scale are the plain call; opcheck and gradcheck."""
    rnd = _rnd(torch.Generator().manual_seed(7))
    B, T, hq, hkv, hd = 2, 7, 4, 2, 8
    qkv = rnd(B * T, (hq + 2 * hkv) * hd)
    for w, sc in ((1, 0.0), (3, 0.0), (3, 0.4), (7, 0.0)):
        o, lse = ct.attention(qkv, B, hq, hkv, w, sc)
        t = qkv.reshape(B, T, hq + 2 * hkv, hd).transpose(1, 2)
        q, k, v = t[:, :hq], t[:, hq:hq + hkv].repeat_interleave(2, 1), t[:, hq + hkv:].repeat_interleave(2, 1)
        i = torch.arange(T)
        mask = (i[None] <= i[:, None]) & (i[None] > i[:, None] - w)
        s = (q @ k.transpose(-1, -2) * (sc or 1 / math.sqrt(hd))).masked_fill(~mask, float("-inf"))
        want = (torch.softmax(s, -1) @ v).transpose(1, 2).reshape(B * T, hq * hd)
        torch.testing.assert_close(o, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(lse, torch.logsumexp(s, -1).transpose(1, 2).reshape(B * T, hq), rtol=1e-12,
                                   atol=1e-12)
    o2, lse2 = ct.attention(qkv, B, hq, hkv)   # window T covers the sequence: the plain call's
    torch.testing.assert_close(o, o2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lse, lse2, rtol=1e-12, atol=1e-12)
    for args in ((qkv, B, hq, hkv), (qkv, B, hq, hkv, 3), (qkv, B, hq, hkv, 3, 0.4)):
        torch.library.opcheck(torch.ops.coda.attention.default, args, test_utils=UTILS)
    o, lse = ct.attention(qkv, B, hq, hkv, 3, 0.4)
    torch.library.opcheck(torch.ops.coda.attention_backward.default,
                          (qkv, o, lse, torch.ones_like(o), B, hq, hkv, 3, 0.4), test_utils=UTILS)
    lq = qkv.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda a: ct.attention(a, B, hq, hkv, 3, 0.4)[0], (lq,))


def test_layer_ops_opcheck_and_gradcheck():
    """The layer's Gemma ops (stored weights w, scales 1 + w): schemas, fake
    implementations and autograd registration (opcheck), gradients in
    float64 of every differentiable input (gradcheck), and the post-norm
    ops against their math written out."""
    rnd = _rnd(torch.Generator().manual_seed(8))
    M, D, F, hq, hkv, hd, eps = 6, 8, 6, 2, 1, 8, 1e-6
    x, w, w2 = rnd(M, D), 0.3 * rnd(D), 0.3 * rnd(D)

    def rms(a, g):
        return a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + eps) * (1 + g)

    h, r = torch.ops.coda.hf_gemma3_rmsnorm(x, w, eps)
    torch.testing.assert_close(h * r[:, None], rms(x, w), rtol=1e-12, atol=1e-12)
    torch.library.opcheck(torch.ops.coda.hf_gemma3_rmsnorm.default, (x, w, eps), test_utils=UTILS)
    assert torch.autograd.gradcheck(lambda a, b: torch.ops.coda.hf_gemma3_rmsnorm(a, b, eps),
                                    (x.clone().requires_grad_(), w.clone().requires_grad_()))
    # out projection + post-norm + residual + the next norm's producer
    o, wo, res = rnd(M, hq * hd), 0.3 * rnd(D, hq * hd), rnd(M, D)
    x1, h2, r2, a1, rpa = torch.ops.coda.hf_gemma3_post_attn(o, wo, res, w, w2, eps)
    want = res + rms(o @ wo.T, w)
    torch.testing.assert_close(x1, want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(h2 * r2[:, None], rms(want, w2), rtol=1e-12, atol=1e-12)
    torch.library.opcheck(torch.ops.coda.hf_gemma3_post_attn.default, (o, wo, res, w, w2, eps), test_utils=UTILS)
    leaves = [t.clone().requires_grad_() for t in (o, wo, res, w, w2)]
    assert torch.autograd.gradcheck(lambda *a: torch.ops.coda.hf_gemma3_post_attn(*a, eps)[:3], leaves)
    # GeGLU MLP + post-norm + residual
    wg, wu, wd, wpf = 0.3 * rnd(F, D), 0.3 * rnd(F, D), 0.3 * rnd(D, F), 0.3 * rnd(D)
    rr = rnd(M).abs() + 0.5
    xo, z, a2, rpf = torch.ops.coda.hf_gemma3_mlp(h, wg, wu, rr, wd, wpf, res, eps)
    hn = h * rr[:, None]
    gelu = torch.nn.functional.gelu(hn @ wg.T, approximate="tanh") * (hn @ wu.T)
    torch.testing.assert_close(xo, res + rms(gelu @ wd.T, wpf), rtol=1e-12, atol=1e-12)
    torch.library.opcheck(torch.ops.coda.hf_gemma3_mlp.default, (h, wg, wu, rr, wd, wpf, res, eps), test_utils=UTILS)
    leaves = [t.clone().requires_grad_() for t in (h, wg, wu, rr, wd, wpf, res)]
    assert torch.autograd.gradcheck(lambda *a: torch.ops.coda.hf_gemma3_mlp(*a, eps)[0], leaves)
    # qkv with the (1 + w) QK-norm gains, the query's times the score factor
    wq, wk, wv = 0.3 * rnd(hq * hd, D), 0.3 * rnd(hkv * hd, D), 0.3 * rnd(hkv * hd, D)
    gq, gk = 0.3 * rnd(hd), 0.3 * rnd(hd)
    inv_freq = 1.0 / (100.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    pos, freq = ct.qk_norm_rope_tables(torch.arange(M) + 2, inv_freq, hq, hkv, torch.float64)
    qs = math.sqrt(hd / 24)
    qkv, pre, rq = torch.ops.coda.hf_gemma3_qkv_norm_rope(h, wq, wk, wv, rr, gq, gk, pos, freq, hq, hkv, eps, qs)
    qkv2, _, _ = torch.ops.coda.hf_qwen3_qkv_norm_rope(h, wq, wk, wv, rr, (1 + gq) * qs, 1 + gk, pos, freq, hq, hkv,
                                                       eps)
    torch.testing.assert_close(qkv, qkv2, rtol=1e-13, atol=1e-13)
    args = (h, wq, wk, wv, rr, gq, gk, pos, freq, hq, hkv, eps, qs)
    torch.library.opcheck(torch.ops.coda.hf_gemma3_qkv_norm_rope.default, args, test_utils=UTILS)
    leaves = [t.clone().requires_grad_() for t in (h, wq, wk, wv, rr, gq, gk)]
    assert torch.autograd.gradcheck(
        lambda *a: torch.ops.coda.hf_gemma3_qkv_norm_rope(*a, pos, freq, hq, hkv, eps, qs)[0], leaves)


def test_softcapped_head_loss_op():
    """coda.torch.gemma3_lm_head_loss against the capped loss written out;
    opcheck and gradcheck."""
    rnd = _rnd(torch.Generator().manual_seed(9))
    M, D, V, cap, eps = 6, 8, 11, 1.5, 1e-6
    x, wnf, wout = rnd(M, D), 1 + 0.3 * rnd(D), rnd(V, D)
    tgt = torch.tensor([1, 4, -100, 10, 0, 3])
    loss, cnt = ct.gemma3_lm_head_loss(x, wnf, wout, tgt, cap, eps)
    hn = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * wnf
    logits = cap * torch.tanh(hn @ wout.T / cap)
    want = torch.nn.functional.cross_entropy(logits, tgt, ignore_index=-100)
    torch.testing.assert_close(loss, want, rtol=1e-12, atol=1e-12)
    assert float(cnt) == 5
    torch.library.opcheck(torch.ops.coda.gemma3_lm_head_loss.default, (x, wnf, wout, tgt, cap, eps), test_utils=UTILS)
    leaves = [t.clone().requires_grad_() for t in (x, wnf, wout)]
    assert torch.autograd.gradcheck(lambda *a: ct.gemma3_lm_head_loss(*a, tgt, cap, eps)[0], leaves)
    with pytest.raises(ValueError, match="soft cap"):
        ct.gemma3_lm_head_loss(x, wnf, wout, tgt, 0.0, eps)


def test_generate_with_softcap_unchanged():
    ref, pm = make_pair(final_logit_softcapping=0.1)
    prompt = batch()[0][:, :4]
    mask = torch.ones_like(prompt)
    a = ref.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    b = pm.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0, use_cache=False)
    assert torch.equal(a, b)


def test_patched_again_keeps_the_patch():
    _, pm = make_pair()
    same = ct.apply_to_gemma3(pm, keep_logits=True)
    assert same is pm and pm._coda_keep_logits is True
