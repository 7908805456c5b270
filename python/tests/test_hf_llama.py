"""coda.torch.apply_to_llama on a tiny randomly initialized Hugging Face
LlamaForCausalLM: loss, logits and every gradient against the unpatched
model on the same weights (float64 on the CPU), state dict unchanged,
greedy generation unchanged, a training loop and the Trainer, refusals,
torch.compile(fullgraph=True) of a patched decoder layer (only coda ops
traced) and of the model with Inductor; on a GPU the same
comparisons in bf16 and a short training run. Skipped where PyTorch or
transformers is not installed."""

import copy

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (scripts/install-deps.sh installs it with CODA_PYTHON_TORCH=1)")
transformers = pytest.importorskip("transformers", reason="transformers is not installed")

import coda  # noqa: E402
import coda.torch as ct  # noqa: E402
from coda import _hf_llama  # noqa: E402

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or not coda.cuda_available(),
                                reason="needs a CUDA GPU and libcoda built with CUDA")

# HF's RMSNorm computes in float32 and its loss upcasts the logits to
# float32, whatever the model's dtype: a float64 model agrees with the coda
# ops (fp64 throughout) to about float32 precision.
F64_RTOL = 2e-5


def tiny_config(**kw):
    base = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=10000.0)
    base.update(kw)
    return transformers.LlamaConfig(**base)


def make_pair(dtype=torch.float64, device="cpu", keep_logits=False, **kw):
    torch.manual_seed(0)
    ref = transformers.LlamaForCausalLM(tiny_config(**kw)).to(device=device, dtype=dtype)
    with torch.no_grad():  # norm weights away from 1, so their gradients and use are tested
        for n, p in ref.named_parameters():
            if n.endswith("norm.weight"):
                p.add_(0.2 * torch.randn_like(p))
    patched = ct.apply_to_llama(copy.deepcopy(ref), keep_logits=keep_logits)
    return ref, patched


def batch(device="cpu", B=2, T=12, vocab=97):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, vocab, (B, T), generator=g)
    labels = ids.clone()
    labels[0, 3] = -100
    return ids.to(device), labels.to(device)


def rel_err(a, b):
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits):
    ref, pm = make_pair(keep_logits=keep_logits)
    ids, labels = batch()
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())
    lr.backward()
    lp.backward()
    mine = dict(pm.named_parameters())
    names = [n for n, _ in ref.named_parameters()]
    assert any("q_proj" in n for n in names) and any("lm_head" in n or "embed" in n for n in names)
    for n, p in ref.named_parameters():
        assert mine[n].grad is not None, n
        assert rel_err(mine[n].grad, p.grad) < F64_RTOL, "%s: %.3g" % (n, rel_err(mine[n].grad, p.grad))
    with torch.no_grad():
        ll, lq = ref(input_ids=ids).logits, pm(input_ids=ids).logits
    assert rel_err(lq, ll) < F64_RTOL


def test_the_coda_path_runs():
    """The patched forward goes through the coda ops (not the HF layers)."""
    ref, pm = make_pair()
    ids, labels = batch()
    calls = []
    orig = _hf_llama.llama_decoder_layer

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    _hf_llama.llama_decoder_layer = spy
    try:
        pm(input_ids=ids, labels=labels)
    finally:
        _hf_llama.llama_decoder_layer = orig
    assert len(calls) == pm.config.num_hidden_layers


def test_gradient_checkpointing():
    ref, pm = make_pair()
    pm.gradient_checkpointing_enable()
    pm.train()
    ref.train()
    ids, labels = batch()
    calls = []
    orig = _hf_llama.llama_decoder_layer

    def spy(*a, **k):
        calls.append(1)
        return orig(*a, **k)

    _hf_llama.llama_decoder_layer = spy
    try:
        pm(input_ids=ids, labels=labels).loss.backward()
    finally:
        _hf_llama.llama_decoder_layer = orig
    assert len(calls) == 2 * pm.config.num_hidden_layers   # each layer run again in the backward
    ref(input_ids=ids, labels=labels).loss.backward()
    mine = dict(pm.named_parameters())
    for n, p in ref.named_parameters():
        assert rel_err(mine[n].grad, p.grad) < F64_RTOL, n


def test_state_dict_unchanged():
    ref, pm = make_pair()
    before = {k: v.clone() for k, v in pm.state_dict().items()}
    pm(*batch()[:1], labels=batch()[1]).loss.backward()
    after = pm.state_dict()
    assert list(after) == list(ref.state_dict())
    for k, v in after.items():
        assert torch.equal(v, before[k]), k
    params_before = [id(p) for p in ref.parameters()]
    assert len(params_before) == len(list(pm.parameters()))


def test_generate_unchanged():
    ref, pm = make_pair()
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
    with pytest.raises(ValueError, match="padding"):
        pm(input_ids=ids, attention_mask=mask, labels=labels)


@pytest.mark.parametrize("kw,word", [({"mlp_bias": True}, "mlp_bias"), ({"attention_bias": True}, "attention_bias"),
                                     ({"hidden_act": "gelu"}, "hidden_act")])
def test_unsupported_models_refused(kw, word):
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(tiny_config(**kw))
    with pytest.raises(ValueError, match=word):
        ct.apply_to_llama(m)


def test_patched_decoder_layer_compiles_fullgraph():
    ref, pm = make_pair(dtype=torch.float32)
    cfg = pm.config
    dims = _hf_llama._dims(cfg)
    B, T = 2, 12
    pos, freq = ct.rope_tables(torch.arange(T).repeat(B), pm.model.rotary_emb.inv_freq, dims[0], dims[1],
                               torch.float32)
    layer = pm.model.layers[0]
    x = torch.randn(B * T, cfg.hidden_size)

    def f(x):
        return _hf_llama.llama_decoder_layer(layer, x, B, pos, freq, dims)

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
    custom ops and the tuple indexing of their results, nothing that
    Inductor would generate a kernel for (the weight re-layouts happen
    inside the ops), so compiling a deeper model costs little more."""
    import operator

    _, pm = make_pair(dtype=torch.float32)
    dims = _hf_llama._dims(pm.config)
    B, T = 2, 12
    pos, freq = ct.rope_tables(torch.arange(T).repeat(B), pm.model.rotary_emb.inv_freq, dims[0], dims[1],
                               torch.float32)
    layer = pm.model.layers[0]

    def f(x):
        return _hf_llama.llama_decoder_layer(layer, x, B, pos, freq, dims)

    explain = torch._dynamo.explain(f)(torch.randn(B * T, pm.config.hidden_size))
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    # the layer is one nested compile region: its subgraph holds the ops
    graphs = [m for m in explain.graphs[0].modules() if isinstance(m, torch.fx.GraphModule)]
    calls = [n.target for g in graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")]
    region = torch.ops.higher_order.invoke_subgraph
    others = [t for t in calls if t is not operator.getitem and t is not region and not str(t).startswith("coda.")]
    assert not others, others
    assert sum(str(t).startswith("coda.") for t in calls) >= 5, calls
    names = sorted({str(t).split(".")[1] for t in calls if t is not operator.getitem and t is not region})
    assert names == ["attention", "hf_llama_mlp", "hf_llama_qkv_rope", "llama_residual_norm", "llama_rmsnorm"], names


def test_decoder_layer_saves_no_swiglu_output():
    """What autograd keeps of a patched decoder layer for its backward: of
    the M x F tensors only the M x 2F pre-activation pairs z, not the SwiGLU
    output y, which the backward recomputes from z (Liger and the unpatched
    layer keep y as the down projection's input); every other saved
    activation M x D, M x (q, k, v), or the attention's M x heads lse."""
    _, pm = make_pair(dtype=torch.float64)
    cfg = pm.config
    dims = _hf_llama._dims(cfg)
    B, T = 2, 12
    M, D, F = B * T, cfg.hidden_size, cfg.intermediate_size
    nqkv = (dims[0] + 2 * dims[1]) * dims[2]
    pos, freq = ct.rope_tables(torch.arange(T).repeat(B), pm.model.rotary_emb.inv_freq, dims[0], dims[1],
                               torch.float64)
    layer = pm.model.layers[0]
    params = {p.data_ptr() for p in pm.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in params and t.dim() == 2:
            saved.append(tuple(t.shape))
        return t

    x = torch.randn(M, D, dtype=torch.float64, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = _hf_llama.llama_decoder_layer(layer, x, B, pos, freq, dims)
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


# -------------------------------------------------------------------- GPU

def _gpu_config():
    return dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)


@needs_cuda
@pytest.mark.parametrize("keep_logits", [False, True])
def test_cuda_bf16_loss_logits_gradients(keep_logits):
    ref, pm = make_pair(dtype=torch.bfloat16, device="cuda", keep_logits=keep_logits, **_gpu_config())
    ids, labels = batch(device="cuda", B=4, T=256, vocab=1024)
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(float(lr) - float(lp)) < 2e-2 * abs(float(lr))
    lr.backward()
    lp.backward()
    mine = dict(pm.named_parameters())
    for n, p in ref.named_parameters():
        assert rel_err(mine[n].grad, p.grad) < 5e-2, "%s: %.3g" % (n, rel_err(mine[n].grad, p.grad))
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
