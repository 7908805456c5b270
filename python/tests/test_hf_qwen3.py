"""coda.torch.apply_to_qwen3 on a tiny randomly initialized Hugging Face
Qwen3ForCausalLM (GQA, head_dim other than hidden / heads, tied and untied
embeddings): loss, logits and every gradient (the QK-norm weights
included) against the unpatched model on the same weights (float64 on the
CPU), state dict unchanged, greedy generation unchanged, a training loop,
refusals, torch.compile(fullgraph=True) of a patched decoder layer (only
coda ops traced) and of the model; on a GPU the same comparisons in bf16
and a short training run. Skipped where PyTorch or transformers is not
installed."""

import copy

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (scripts/install-deps.sh installs it with CODA_PYTHON_TORCH=1)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")
if not hasattr(transformers, "Qwen3ForCausalLM"):
    pytest.skip("this transformers has no Qwen3ForCausalLM", allow_module_level=True)

import coda  # noqa: E402
import coda.torch as ct  # noqa: E402
from coda import _hf_llama  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or not coda.cuda_available(),
                                reason="needs a CUDA GPU and libcoda built with CUDA")

# as in test_hf_llama: HF's RMSNorms (the QK-norm's too) compute in float32
# whatever the model's dtype, so a float64 model agrees with the coda ops
# (fp64 throughout) to about float32 precision
F64_RTOL = 2e-5


def tiny_config(**kw):
    # head_dim 16, not hidden_size / heads = 8; 4 query heads on 2 kv heads
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6,
                rope_theta=10000.0, tie_word_embeddings=False)
    base.update(kw)
    return transformers.Qwen3Config(**base)


def make_pair(dtype=torch.float64, device="cpu", keep_logits=False, **kw):
    torch.manual_seed(0)
    ref = transformers.Qwen3ForCausalLM(tiny_config(**kw)).to(device=device, dtype=dtype)
    with torch.no_grad():  # norm weights (the QK-norm's too) away from 1, so their gradients and use are tested
        for n, p in ref.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(0.2 * torch.randn_like(p))
    patched = ct.apply_to_qwen3(copy.deepcopy(ref), keep_logits=keep_logits)
    return ref, patched


def batch(device="cpu", B=2, T=12, vocab=97):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    labels = ids.clone()
    labels[0, 3] = -100
    return ids.to(device), labels.to(device)


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


def assert_grads_match(ref, pm, rtol=F64_RTOL):
    mine = dict(pm.named_parameters())
    names = [n for n, _ in ref.named_parameters()]
    assert len(names) == len(mine)
    for n, p in ref.named_parameters():
        assert mine[n].grad is not None, n
        assert rel_err(mine[n].grad, p.grad) < rtol, "%s: %.3g" % (n, rel_err(mine[n].grad, p.grad))


CONFIGS = [{}, {"tie_word_embeddings": True}, {"head_dim": 8}, {"num_key_value_heads": 4},
           {"num_key_value_heads": 1, "head_dim": 32}]


@pytest.mark.parametrize("kw", CONFIGS, ids=["gqa-hd16", "tied", "hd8", "mha", "mqa-hd32"])
@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits, kw):
    ref, pm = make_pair(keep_logits=keep_logits, **kw)
    if kw.get("tie_word_embeddings"):
        assert pm.lm_head.weight is pm.model.embed_tokens.weight
    ids, labels = batch()
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())
    lr.backward()
    lp.backward()
    names = [n for n, _ in ref.named_parameters()]
    assert any("q_norm" in n for n in names) and any("k_norm" in n for n in names)
    assert_grads_match(ref, pm)
    with torch.no_grad():
        ll, lq = ref(input_ids=ids).logits, pm(input_ids=ids).logits
    assert rel_err(lq, ll) < F64_RTOL


def test_position_ids():
    """Positions other than 0..T-1 (an offset, and a second sequence packed
    into the first row): the RoPE of the QK-norm op reads them per row."""
    ref, pm = make_pair()
    ids, labels = batch()
    pos = torch.stack([torch.arange(12) + 5, torch.cat([torch.arange(7), torch.arange(5)])])
    lr = ref(input_ids=ids, position_ids=pos, labels=labels).loss
    lp = pm(input_ids=ids, position_ids=pos, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())
    lr.backward()
    lp.backward()
    assert_grads_match(ref, pm)


def test_the_coda_path_runs():
    """The patched forward goes through the coda ops (not the HF layers)."""
    ref, pm = make_pair()
    ids, labels = batch()
    calls = []
    orig = _hf_llama.qwen3_decoder_layer

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    _hf_llama.qwen3_decoder_layer = spy
    try:
        pm(input_ids=ids, labels=labels)
    finally:
        _hf_llama.qwen3_decoder_layer = orig
    assert len(calls) == pm.config.num_hidden_layers


def test_gradient_checkpointing():
    ref, pm = make_pair()
    pm.gradient_checkpointing_enable()
    pm.train()
    ref.train()
    ids, labels = batch()
    calls = []
    orig = _hf_llama.qwen3_decoder_layer

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    _hf_llama.qwen3_decoder_layer = spy
    try:
        pm(input_ids=ids, labels=labels).loss.backward()
    finally:
        _hf_llama.qwen3_decoder_layer = orig
    assert len(calls) == 2 * pm.config.num_hidden_layers   # each layer run again in the backward
    ref(input_ids=ids, labels=labels).loss.backward()
    assert_grads_match(ref, pm)


@pytest.mark.parametrize("tied", [False, True])
def test_state_dict_unchanged(tied):
    ref, pm = make_pair(tie_word_embeddings=tied)
    before = {k: v.clone() for k, v in pm.state_dict().items()}
    pm(*batch()[:1], labels=batch()[1]).loss.backward()
    after = pm.state_dict()
    assert list(after) == list(ref.state_dict())
    for k, v in after.items():
        assert torch.equal(v, before[k]), k
    assert len(list(ref.parameters())) == len(list(pm.parameters()))


@pytest.mark.parametrize("tied", [False, True])
def test_generate_unchanged(tied):
    ref, pm = make_pair(tie_word_embeddings=tied)
    ids, _ = batch()
    prompt = ids[:, :4]
    mask = torch.ones_like(prompt)
    a = ref.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    b = pm.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0)
    assert a.shape == (2, 10)
    assert torch.equal(a, b)
    # without a KV cache every step runs the coda layers on the whole prefix
    c = pm.generate(prompt, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0,
                    use_cache=False)
    assert torch.equal(a, c)


def test_training_loop_matches_unpatched():
    ref, pm = make_pair()
    ids, labels = batch()
    losses = []
    for m in (ref, pm):
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        run = []
        for _ in range(5):
            loss = m(input_ids=ids, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            run.append(float(loss))
        losses.append(run)
    assert losses[0][-1] < losses[0][0]
    for a, b in zip(*losses):
        assert abs(a - b) <= 1e-4 * abs(a), losses


def test_num_items_in_batch():
    ref, pm = make_pair()
    ids, labels = batch()
    a = ref(input_ids=ids, labels=labels, num_items_in_batch=40).loss
    b = pm(input_ids=ids, labels=labels, num_items_in_batch=40).loss
    assert abs(float(a) - float(b)) <= F64_RTOL * abs(float(a))


def test_trainer():
    pytest.importorskip("accelerate", reason="the Hugging Face Trainer needs accelerate")
    import tempfile

    ref, pm = make_pair(dtype=torch.float32)
    ids, labels = batch(B=8)
    data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(8)]
    losses = []
    for m in (ref, pm):
        with tempfile.TemporaryDirectory() as d:
            args = transformers.TrainingArguments(output_dir=d, per_device_train_batch_size=4, max_steps=4,
                                                  learning_rate=1e-2, logging_steps=1, report_to=[], use_cpu=True,
                                                  save_strategy="no", seed=0, data_seed=0, dataloader_num_workers=0)
            tr = transformers.Trainer(model=m, args=args, train_dataset=data)
            tr.train()
            losses.append([h["loss"] for h in tr.state.log_history if "loss" in h])
    assert len(losses[1]) == 4
    for a, b in zip(*losses):
        assert abs(a - b) <= 1e-3 * abs(a), losses


def test_padding_mask_refused_ones_taken():
    _, pm = make_pair()
    ids, labels = batch()
    mask = torch.ones_like(ids)
    pm(input_ids=ids, attention_mask=mask, labels=labels)
    mask[1, -3:] = 0
    with pytest.raises(ValueError, match="apply_to_qwen3: .*padding"):
        pm(input_ids=ids, attention_mask=mask, labels=labels)


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


def _layer_setup(dtype):
    ref, pm = make_pair(dtype=dtype)
    dims = _hf_llama._dims(pm.config)
    B, T = 2, 12
    pos, freq = ct.qk_norm_rope_tables(torch.arange(T).repeat(B), pm.model.rotary_emb.inv_freq, dims[0], dims[1],
                                       dtype)
    return ref, pm, dims, B, T, pos, freq


def test_patched_decoder_layer_compiles_fullgraph():
    ref, pm, dims, B, T, pos, freq = _layer_setup(torch.float32)
    layer = pm.model.layers[0]
    x = torch.randn(B * T, pm.config.hidden_size)

    def f(x):
        return _hf_llama.qwen3_decoder_layer(layer, x, B, pos, freq, dims)

    explain = torch._dynamo.explain(f)(x)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    torch._dynamo.reset()
    out = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
    want = ref.model.layers[0](x.reshape(B, T, -1), position_embeddings=ref.model.rotary_emb(
        x.reshape(B, T, -1), torch.arange(T)[None]), attention_mask=None)
    if isinstance(want, tuple):
        want = want[0]
    torch.testing.assert_close(out, want.reshape(B * T, -1), rtol=1e-4, atol=1e-5)


def test_traced_decoder_layer_is_only_coda_ops():
    """What torch.compile captures of a patched decoder layer: the coda
    custom ops and the tuple indexing of their results (the weight and
    QK-norm weight re-layouts happen inside the ops)."""
    import operator

    _, pm, dims, B, T, pos, freq = _layer_setup(torch.float32)
    layer = pm.model.layers[0]

    def f(x):
        return _hf_llama.qwen3_decoder_layer(layer, x, B, pos, freq, dims)

    explain = torch._dynamo.explain(f)(torch.randn(B * T, pm.config.hidden_size))
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    graphs = [m for m in explain.graphs[0].modules() if isinstance(m, torch.fx.GraphModule)]
    calls = [n.target for g in graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")]
    region = torch.ops.higher_order.invoke_subgraph
    others = [t for t in calls if t is not operator.getitem and t is not region and not str(t).startswith("coda.")]
    assert not others, others
    names = sorted({str(t).split(".")[1] for t in calls if t is not operator.getitem and t is not region})
    assert names == ["attention", "hf_llama_mlp", "hf_qwen3_qkv_norm_rope", "llama_residual_norm",
                     "llama_rmsnorm"], names


def test_decoder_layer_saves():
    """What autograd keeps of a patched Qwen3 decoder layer: as Llama's (the
    MLP's pairs z, not the SwiGLU output y), and of the QK-norm the
    pre-norm qkv and the per-head statistics (M x heads)."""
    _, pm, dims, B, T, pos, freq = _layer_setup(torch.float64)
    cfg = pm.config
    M, D, F = B * T, cfg.hidden_size, cfg.intermediate_size
    H = dims[0] + 2 * dims[1]
    layer = pm.model.layers[0]
    params = {p.data_ptr() for p in pm.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in params and t.dim() == 2:
            saved.append(tuple(t.shape))
        return t

    x = torch.randn(M, D, dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _hf_llama.qwen3_decoder_layer(layer, x, B, pos, freq, dims)
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


def _cxx_compiler():
    import os
    import shutil

    return any(shutil.which(c) for c in (os.environ.get("CXX") or "", "g++", "c++", "clang++") if c)


@pytest.mark.skipif(not _cxx_compiler(), reason="Inductor's CPU backend needs a C++ compiler")
def test_patched_model_inductor_matches_eager():
    """torch.compile(fullgraph=True) with Inductor on the CPU: one graph, no
    graph break, and the loss and every gradient of the uncompiled patched
    model."""
    from torch._dynamo.utils import counters

    _, pm = make_pair(dtype=torch.float32, num_hidden_layers=3)
    ids, labels = batch()
    eager = pm(input_ids=ids, labels=labels).loss
    eager.backward()
    want = {n: p.grad.clone() for n, p in pm.named_parameters()}
    pm.zero_grad()
    torch._dynamo.reset()
    counters.clear()
    loss = torch.compile(pm, fullgraph=True)(input_ids=ids, labels=labels).loss
    assert not counters["graph_break"], dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
    torch.testing.assert_close(loss, eager, rtol=1e-6, atol=0)
    loss.backward()
    for n, p in pm.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-5, atol=1e-7, msg=n)


def test_patched_model_compiles_fullgraph():
    """The whole patched forward (embedding, layers, head + loss) in one
    graph, and its backward."""
    _, pm = make_pair(dtype=torch.float32)
    ids, labels = batch()
    eager = pm(input_ids=ids, labels=labels).loss
    eager.backward()
    want = {n: p.grad.clone() for n, p in pm.named_parameters()}
    pm.zero_grad()
    explain = torch._dynamo.explain(pm)(input_ids=ids, labels=labels)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    torch._dynamo.reset()
    loss = torch.compile(pm, fullgraph=True, backend="aot_eager")(input_ids=ids, labels=labels).loss
    torch.testing.assert_close(loss, eager)
    loss.backward()
    for n, p in pm.named_parameters():
        torch.testing.assert_close(p.grad, want[n], rtol=1e-5, atol=1e-7)


# -------------------------------------------------------------------- GPU

def _gpu_config():
    # Qwen3's released head size (one column tile per head), GQA
    return dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, head_dim=128, max_position_embeddings=512)


@needs_cuda
@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("keep_logits", [False, True])
def test_cuda_bf16_loss_logits_gradients(keep_logits, tied):
    ref, pm = make_pair(dtype=torch.bfloat16, device="cuda", keep_logits=keep_logits, tie_word_embeddings=tied,
                        **_gpu_config())
    ids, labels = batch(device="cuda", B=4, T=256, vocab=1024)
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(float(lr) - float(lp)) < 2e-2 * abs(float(lr))
    lr.backward()
    lp.backward()
    assert_grads_match(ref, pm, rtol=5e-2)
    with torch.no_grad():
        assert rel_err(pm(input_ids=ids).logits, ref(input_ids=ids).logits) < 3e-2


@needs_cuda
@pytest.mark.parametrize("keep_logits", [False, True])
def test_cuda_training_curve_matches(keep_logits):
    ref, pm = make_pair(dtype=torch.bfloat16, device="cuda", keep_logits=keep_logits, **_gpu_config())
    g = torch.Generator().manual_seed(3)
    # a learnable stream: each token predicts the next through a fixed random map
    nxt = torch.randint(0, 1024, (1024,), generator=g)
    start = torch.randint(0, 1024, (4, 1), generator=g)
    seq = [start]
    for _ in range(127):
        seq.append(nxt[seq[-1]])
    ids = torch.cat(seq, 1).cuda()
    curves = []
    for m in (ref, pm):
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        curve = []
        for _ in range(200):
            loss = m(input_ids=ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
            curve.append(float(loss))
        curves.append(curve)
    a, b = curves
    assert b[-1] < 0.5 * b[0], b
    late_a, late_b = sum(a[-20:]) / 20, sum(b[-20:]) / 20
    assert abs(late_a - late_b) < 0.05 + 0.1 * late_a, (a[-5:], b[-5:])
