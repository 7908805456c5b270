"""coda.torch.apply_to_qwen3 on a tiny randomly initialized Hugging Face
Qwen3ForCausalLM (GQA, head_dim other than hidden / heads, tied and untied
embeddings): loss, logits and every gradient (the QK-norm weights
included) against the unpatched model on the same weights (float64 on the
CPU), state dict unchanged, greedy generation unchanged, a training loop,
refusals, torch.compile(fullgraph=True) of a patched decoder layer (only
coda ops traced) and of the model; on a GPU the same comparisons in bf16
and a short training run. Skipped where PyTorch or transformers is not
installed."""

import pytest

import hf_needs

torch, transformers = hf_needs.torch_and_transformers("Qwen3ForCausalLM")

import coda.torch as ct  # noqa: E402
from coda import _hf_llama  # noqa: E402

import hf_patch_common as common  # noqa: E402
from hf_patch_common import batch  # noqa: E402


def tiny_config(**kw):
    # head_dim 16, not hidden_size / heads = 8; 4 query heads on 2 kv heads
    return common.tiny_config(transformers.Qwen3Config, kw, head_dim=16, rope_theta=10000.0, tie_word_embeddings=False)


make_pair = common.pair_maker(transformers.Qwen3ForCausalLM, tiny_config, ct.apply_to_qwen3)


class TestQwen3(common.PatchTests):
    """The tests every patched family runs (hf_patch_common.py); the state
    dict, generate and GPU loss tests with tied and untied embeddings."""
    make_pair = staticmethod(make_pair)
    decoder_layer = "qwen3_decoder_layer"
    rope_tables = staticmethod(ct.qk_norm_rope_tables)
    layer_ops = ["attention", "hf_llama_mlp", "hf_qwen3_qkv_norm_rope", "llama_residual_norm", "llama_rmsnorm"]
    padding_error = "apply_to_qwen3: .*padding"
    # Qwen3's released head size (one column tile per head), GQA
    gpu_config = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=128, max_position_embeddings=512)

    @pytest.fixture(params=[False, True], ids=["untied", "tied"])
    def variant(self, request):
        return {"tie_word_embeddings": request.param}


CONFIGS = [{}, {"tie_word_embeddings": True}, {"head_dim": 8}, {"num_key_value_heads": 4},
           {"num_key_value_heads": 1, "head_dim": 32}]


@pytest.mark.parametrize("kw", CONFIGS, ids=["gqa-hd16", "tied", "hd8", "mha", "mqa-hd32"])
@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits, kw):
    ref, pm = make_pair(keep_logits=keep_logits, **kw)
    if kw.get("tie_word_embeddings"):
        assert pm.lm_head.weight is pm.model.embed_tokens.weight
    names = [n for n, _ in ref.named_parameters()]
    assert any("q_norm" in n for n in names) and any("k_norm" in n for n in names)
    common.assert_matches_unpatched(ref, pm, *batch())


def test_position_ids():
    """Positions other than 0..T-1 (an offset, and a second sequence packed
    into the first row): the RoPE of the QK-norm op reads them per row."""
    common.assert_position_ids_match(*make_pair())


@pytest.mark.parametrize("kw,word", [({"attention_bias": True}, "attention_bias"),
                                     ({"hidden_act": "gelu"}, "hidden_act"),
                                     ({"use_sliding_window": True, "max_window_layers": 1}, "sliding"),
                                     ({"head_dim": 24}, "head_dim 24")])
def test_unsupported_models_refused(kw, word):
    torch.manual_seed(0)
    m = transformers.Qwen3ForCausalLM(tiny_config(**kw))
    with pytest.raises(ValueError, match=word):
        ct.apply_to_qwen3(m)
    assert not getattr(m, "_coda_patched", False)


def test_other_family_refused():
    """apply_to_llama does not take a model with a QK-norm (it would drop
    it), apply_to_qwen3 not one without."""
    torch.manual_seed(0)
    q = transformers.Qwen3ForCausalLM(tiny_config())
    with pytest.raises(ValueError, match="apply_to_qwen3"):
        ct.apply_to_llama(q)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4))
    with pytest.raises(ValueError, match="has no QK-norm"):
        ct.apply_to_qwen3(llama)


def test_decoder_layer_saves():
    """What autograd keeps of a patched Qwen3 decoder layer: as Llama's (the
    MLP's pairs z, not the SwiGLU output y), and of the QK-norm the
    pre-norm qkv and the per-head statistics (M x heads)."""
    _, pm, dims, B, T, pos, freq = common.layer_setup(make_pair, ct.qk_norm_rope_tables, torch.float64)
    cfg = pm.config
    M, D, F = B * T, cfg.hidden_size, cfg.intermediate_size
    H = dims[0] + 2 * dims[1]
    layer = pm.model.layers[0]
    x = torch.randn(M, D, dtype=torch.float64, requires_grad=True)
    out, saved = common.saved_shapes(pm, lambda x: _hf_llama.qwen3_decoder_layer(layer, x, B, pos, freq, dims), x)
    assert (M, 2 * F) in saved and (M, H) in saved, saved
    assert (M, F) not in saved, saved
    # D; the qkv, its pre-norm z; the attention's output (heads_q head_dim) and lse; the MLP's pairs; rq
    assert all(s[1] in (D, H * dims[2], dims[0] * dims[2], dims[0], 2 * F, H) for s in saved), saved
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    assert layer.self_attn.q_norm.weight.grad is not None


def test_qk_norm_ops_opcheck_and_gradcheck():
    """The QK-norm op in coda's layout and in Hugging Face's: schemas, fake
    implementations and autograd registration (opcheck), and gradients in
    float64 (gradcheck) of every input; the HF-layout op against the coda
    one on permuted weights; the forward against the math written out."""
    g = torch.Generator().manual_seed(2)
    hq, hkv, hd, D, B, T = 4, 2, 8, 16, 2, 5
    M, H = B * T, hq + 2 * hkv
    eps = 1e-6
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    h, r = rnd(M, D), rnd(M).abs() + 0.5
    wq, wk, wv = 0.3 * rnd(hq * hd, D), 0.3 * rnd(hkv * hd, D), 0.3 * rnd(hkv * hd, D)
    gq, gk = 1 + 0.3 * rnd(hd), 1 + 0.3 * rnd(hd)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    positions = torch.arange(T).repeat(B) + 3
    pos, freq = ct.qk_norm_rope_tables(positions, inv_freq, hq, hkv, torch.float64)
    assert pos.shape == (M * H,) and freq.shape == (hd,)
    assert torch.equal(pos.reshape(M, H)[:, hq + hkv:], torch.zeros(M, hkv, dtype=torch.int32))
    # the HF-layout op is the coda one on the permuted weights
    perm = ct.rope_row_permutation(hq, hkv, hd)
    w = torch.cat([wq, wk, wv])[perm]
    cg = lambda v: v[perm[:hd]]  # noqa: E731  (one head's column permutation)
    assert torch.equal(_hf_llama._hf_g(gq), cg(gq))
    assert torch.equal(_hf_llama._hf_dg(cg(gq)), gq)
    qkv, pre, rq = ct.qwen3_qkv_norm_rope(h, w, r, cg(gq), cg(gk), pos, freq, hq, hkv, eps)
    qkv2, _, _ = torch.ops.coda.hf_qwen3_qkv_norm_rope(h, wq, wk, wv, r, gq, gk, pos, freq, hq, hkv, eps)
    assert torch.equal(qkv, qkv2)
    # the math: z = r (h w^T); per head, q = rope(z rq g) on adjacent pairs; v = z
    z = r[:, None] * (h @ w.T)
    torch.testing.assert_close(pre, z, rtol=1e-12, atol=1e-12)
    zh = z.reshape(M, H, hd)
    want_rq = torch.rsqrt(zh.pow(2).mean(-1) + eps)
    torch.testing.assert_close(rq, want_rq, rtol=1e-12, atol=1e-12)
    gam = torch.stack([cg(gq)] * hq + [cg(gk)] * hkv)
    n = zh[:, : hq + hkv] * want_rq[:, : hq + hkv, None] * gam
    ang = positions.double()[:, None] * inv_freq[None, :]
    c, s = torch.cos(ang)[:, None, :], torch.sin(ang)[:, None, :]
    a, b = n[..., 0::2], n[..., 1::2]
    rot = torch.stack([a * c - b * s, a * s + b * c], -1).reshape(M, hq + hkv, hd)
    want = torch.cat([rot, zh[:, hq + hkv:]], 1).reshape(M, -1)
    torch.testing.assert_close(qkv, want, rtol=1e-12, atol=1e-12)
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    for op, args in [(torch.ops.coda.qwen3_qkv_norm_rope.default, (h, w, r, cg(gq), cg(gk), pos, freq, hq, hkv, eps)),
                     (torch.ops.coda.qwen3_qkv_norm_rope_backward.default,
                      (h, w, r, cg(gq), cg(gk), pos, freq, qkv, pre, rq, torch.ones_like(qkv), hq, hkv)),
                     (torch.ops.coda.hf_qwen3_qkv_norm_rope.default, (h, wq, wk, wv, r, gq, gk, pos, freq, hq, hkv,
                                                                      eps)),
                     (torch.ops.coda.hf_qwen3_qkv_norm_rope_backward.default,
                      (h, wq, wk, wv, r, gq, gk, pos, freq, qkv, pre, rq, torch.ones_like(qkv), hq, hkv))]:
        torch.library.opcheck(op, args, test_utils=utils)
    lh, lw, lr, lgq, lgk = (t.clone().requires_grad_() for t in (h, w, r, cg(gq), cg(gk)))
    assert torch.autograd.gradcheck(
        lambda *a: ct.qwen3_qkv_norm_rope(*a, pos, freq, hq, hkv, eps)[0], (lh, lw, lr, lgq, lgk))
    leaves = [t.clone().requires_grad_() for t in (h, wq, wk, wv, r, gq, gk)]
    assert torch.autograd.gradcheck(
        lambda *a: torch.ops.coda.hf_qwen3_qkv_norm_rope(*a, pos, freq, hq, hkv, eps)[0], leaves)


def test_qk_norm_op_head_dim_segments():
    """head_dim 256 (two column tiles per head) and 32 (four heads per
    tile): the per-head statistics of the qkv GEMM's epilogue."""
    g = torch.Generator().manual_seed(4)
    for hd in (256, 32):
        hq, hkv, D, M = 2, 1, 24, 6
        H = hq + 2 * hkv
        h = torch.randn(M, D, generator=g, dtype=torch.float64)
        w = torch.randn(H * hd, D, generator=g, dtype=torch.float64)
        r = torch.ones(M, dtype=torch.float64)
        gq, gk = torch.ones(hd, dtype=torch.float64), torch.ones(hd, dtype=torch.float64)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
        pos, freq = ct.qk_norm_rope_tables(torch.zeros(M, dtype=torch.long), inv_freq, hq, hkv, torch.float64)
        qkv, pre, rq = ct.qwen3_qkv_norm_rope(h, w, r, gq, gk, pos, freq, hq, hkv, 1e-6)
        zh = (h @ w.T).reshape(M, H, hd)
        torch.testing.assert_close(rq, torch.rsqrt(zh.pow(2).mean(-1) + 1e-6), rtol=1e-12, atol=1e-12)
        # position 0: no rotation, so the q and k heads are z rq
        torch.testing.assert_close(qkv.reshape(M, H, hd)[:, :hq + hkv], zh[:, :hq + hkv] * rq[:, :hq + hkv, None],
                                   rtol=1e-12, atol=1e-12)
