"""coda.torch.apply_to_llama on a tiny randomly initialized Hugging Face
LlamaForCausalLM: loss, logits and every gradient against the unpatched
model on the same weights (float64 on the CPU), state dict unchanged,
greedy generation unchanged, a training loop and the Trainer, refusals,
torch.compile(fullgraph=True) of a patched decoder layer (only coda ops
traced) and of the model with Inductor; on a GPU the same
comparisons in bf16 and a short training run. Skipped where PyTorch or
transformers is not installed."""

import pytest

import hf_needs

torch, transformers = hf_needs.torch_and_transformers("LlamaForCausalLM")

import coda.torch as ct  # noqa: E402
from coda import _hf_llama  # noqa: E402

import hf_patch_common as common  # noqa: E402
from hf_patch_common import batch  # noqa: E402


def tiny_config(**kw):
    return common.tiny_config(transformers.LlamaConfig, kw, rope_theta=10000.0)


make_pair = common.pair_maker(transformers.LlamaForCausalLM, tiny_config, ct.apply_to_llama)


class TestLlama(common.LlamaPatchTests):
    """The tests every patched family runs (hf_patch_common.py)."""
    make_pair = staticmethod(make_pair)


@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits):
    ref, pm = make_pair(keep_logits=keep_logits)
    names = [n for n, _ in ref.named_parameters()]
    assert any("q_proj" in n for n in names) and any("lm_head" in n or "embed" in n for n in names)
    common.assert_matches_unpatched(ref, pm, *batch())


@pytest.mark.parametrize("kw,word", [({"mlp_bias": True}, "mlp_bias"), ({"attention_bias": True}, "attention_bias"),
                                     ({"hidden_act": "gelu"}, "hidden_act")])
def test_unsupported_models_refused(kw, word):
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(tiny_config(**kw))
    with pytest.raises(ValueError, match=word):
        ct.apply_to_llama(m)


def test_decoder_layer_saves_no_swiglu_output():
    """What autograd keeps of a patched decoder layer for its backward: of
    the M x F tensors only the M x 2F pre-activation pairs z, not the SwiGLU
    output y, which the backward recomputes from z (Liger and the unpatched
    layer keep y as the down projection's input); every other saved
    activation M x D, M x (q, k, v), or the attention's M x heads lse."""
    _, pm, dims, B, T, pos, freq = common.layer_setup(make_pair, ct.rope_tables, torch.float64)
    cfg = pm.config
    M, D, F = B * T, cfg.hidden_size, cfg.intermediate_size
    nqkv = (dims[0] + 2 * dims[1]) * dims[2]
    layer = pm.model.layers[0]
    x = torch.randn(M, D, dtype=torch.float64, requires_grad=True)
    out, saved = common.saved_shapes(pm, lambda x: _hf_llama.llama_decoder_layer(layer, x, B, pos, freq, dims), x)
    assert (M, 2 * F) in saved, saved
    assert (M, F) not in saved, saved
    assert all(s[1] in (D, nqkv, 2 * F, dims[0]) for s in saved), saved   # dims[0]: the attention's lse
    out.sum().backward()   # and the backward still runs from what was kept
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_hf_layout_ops_opcheck_and_gradcheck():
    """The two ops that take Hugging Face's weights: schemas, fake
    implementations and autograd registration (opcheck), and gradients in
    float64 (gradcheck) of every input, the weights in the model's layout."""
    g = torch.Generator().manual_seed(2)
    hq, hkv, hd, D, F, B, T = 4, 2, 8, 16, 12, 2, 5
    M = B * T
    rnd = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    h, r = rnd(M, D), rnd(M).abs() + 0.5
    wq, wk, wv = 0.3 * rnd(hq * hd, D), 0.3 * rnd(hkv * hd, D), 0.3 * rnd(hkv * hd, D)
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    pos, freq = ct.rope_tables(torch.arange(T).repeat(B), inv_freq, hq, hkv, torch.float64)
    perm = ct.rope_row_permutation(hq, hkv, hd)
    # the ops reorder the rows by a reshape: the same as the index, and the
    # gradient's map back its inverse
    w = torch.cat([wq, wk, wv])
    assert torch.equal(_hf_llama._hf_wqkv(wq, wk, wv, hq, hkv), w[perm])
    back = _hf_llama._hf_dwqkv(w[perm], hq, hkv, wq.shape[0], wk.shape[0])
    assert all(torch.equal(a, b) for a, b in zip(back, (wq, wk, wv)))
    wg, wu = 0.3 * rnd(F, D), 0.3 * rnd(F, D)
    qkv = torch.ops.coda.hf_llama_qkv_rope(h, wq, wk, wv, r, pos, freq, hq, hkv)
    z, _ = torch.ops.coda.hf_llama_swiglu(h, wg, wu, r)
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    for op, args in [(torch.ops.coda.hf_llama_qkv_rope.default, (h, wq, wk, wv, r, pos, freq, hq, hkv)),
                     (torch.ops.coda.hf_llama_qkv_rope_backward.default,
                      (h, wq, wk, wv, r, pos, freq, qkv, torch.ones_like(qkv), hq, hkv)),
                     (torch.ops.coda.hf_llama_swiglu.default, (h, wg, wu, r)),
                     (torch.ops.coda.hf_llama_swiglu_backward.default,
                      (h, wg, wu, r, z, torch.ones(M, F, dtype=torch.float64)))]:
        torch.library.opcheck(op, args, test_utils=utils)
    leaves = [t.clone().requires_grad_() for t in (h, wq, wk, wv, r, wg, wu)]
    lh, lq, lk, lv, lr, lg, lu = leaves
    assert torch.autograd.gradcheck(
        lambda *a: torch.ops.coda.hf_llama_qkv_rope(a[0], a[1], a[2], a[3], a[4], pos, freq, hq, hkv),
        (lh, lq, lk, lv, lr))
    assert torch.autograd.gradcheck(lambda *a: torch.ops.coda.hf_llama_swiglu(*a)[1], (lh, lg, lu, lr))
    # the MLP op: gate/up + SwiGLU + down projection + residual, y not kept
    wd, res = 0.3 * rnd(D, F), rnd(M, D)
    x2, z2 = torch.ops.coda.hf_llama_mlp(h, wg, wu, r, wd, res)
    for op, args in [(torch.ops.coda.hf_llama_mlp.default, (h, wg, wu, r, wd, res)),
                     (torch.ops.coda.hf_llama_mlp_backward.default, (h, wg, wu, r, wd, z2, torch.ones_like(x2)))]:
        torch.library.opcheck(op, args, test_utils=utils)
    ld, lres = wd.clone().requires_grad_(), res.clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda *a: torch.ops.coda.hf_llama_mlp(*a)[0], (lh, lg, lu, lr, ld, lres))
    # against the two ops it replaces
    _, y = torch.ops.coda.hf_llama_swiglu(h, wg, wu, r)
    assert torch.allclose(x2, y @ wd.T + res, rtol=1e-12, atol=1e-12)
