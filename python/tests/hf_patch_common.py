"""What the tests of coda.torch's Hugging Face patches (test_hf_llama.py,
test_hf_mistral.py, test_hf_qwen3.py, test_hf_gpt2.py, test_hf_gemma3.py)
share: the tiny configs, the pair of a tiny model and its patched copy, the
batch, the comparisons (of whole models and of one layer, with Hugging
Face's sliding mask), and PatchTests, the tests every family runs (each
test file subclasses it with the family's make_pair, layer and messages).
Not a test module: those files import it once they have found torch and
transformers (hf_needs.py)."""

import copy
import os
import shutil
import tempfile

import pytest
import torch
import transformers

import coda
import coda.torch as ct
from coda import _hf_llama

needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or not coda.cuda_available(),
                                reason="needs a CUDA GPU and libcoda built with CUDA")

# HF's RMSNorm computes in float32 and its loss upcasts the logits to
# float32, whatever the model's dtype: a float64 model agrees with the coda
# ops (fp64 throughout) to about float32 precision.
F64_RTOL = 2e-5


# The tiny models' shape (the batch's vocabulary 97); each family's
# tiny_config adds its own keys.
TINY = dict(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6)


def tiny_config(config_class, kw, **family):
    """config_class of TINY, the family's keys over it and kw over those."""
    return config_class(**{**TINY, **family, **kw})


def is_norm_weight(name):
    return name.endswith("norm.weight")


def make_pair(model, apply, dtype, device, keep_logits, perturbed=is_norm_weight):
    """(the model model() builds after seeding torch with 0, the parameters
    whose names perturbed(name) takes (by default the norm weights) moved
    by noise; apply(copy of it, keep_logits=...))"""
    torch.manual_seed(0)
    ref = model().to(device=device, dtype=dtype)
    with torch.no_grad():  # norm weights (QK-norms' too) away from 1, so their gradients and use are tested
        for n, p in ref.named_parameters():
            if perturbed(n):
                p.add_(0.2 * torch.randn_like(p))
    patched = apply(copy.deepcopy(ref), keep_logits=keep_logits)
    return ref, patched


def pair_maker(model_class, config, apply, perturbed=is_norm_weight):
    """A family's make_pair(dtype=float64, device="cpu", keep_logits=False,
    **kw): make_pair of model_class(config(**kw)) and apply."""
    def family_pair(dtype=torch.float64, device="cpu", keep_logits=False, **kw):
        return make_pair(lambda: model_class(config(**kw)), apply, dtype, device, keep_logits, perturbed)
    return family_pair


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


def assert_matches_unpatched(ref, pm, ids, labels, loss_rtol=F64_RTOL, grad_rtol=F64_RTOL, logits_rtol=F64_RTOL):
    """The patched model's loss, every gradient and the logits against the
    unpatched one's."""
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= loss_rtol * abs(lr.item())
    lr.backward()
    lp.backward()
    assert_grads_match(ref, pm, grad_rtol)
    with torch.no_grad():
        ll, lq = ref(input_ids=ids).logits, pm(input_ids=ids).logits
    assert rel_err(lq, ll) < logits_rtol


def assert_position_ids_match(ref, pm):
    """The loss and every gradient with positions other than 0..T-1 (an
    offset, and a restart in a row)."""
    ids, labels = batch()
    pos = torch.stack([torch.arange(12) + 5, torch.cat([torch.arange(7), torch.arange(5)])])
    lr = ref(input_ids=ids, position_ids=pos, labels=labels).loss
    lp = pm(input_ids=ids, position_ids=pos, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())
    lr.backward()
    lp.backward()
    assert_grads_match(ref, pm)


def sliding_mask(T, window, dtype):
    """The additive mask Hugging Face gives a layer: causal, and within the
    window (kv > q - window) where window is not 0 or None."""
    i = torch.arange(T)
    keep = i[None, :] <= i[:, None]
    if window:
        keep &= i[None, :] > i[:, None] - window
    return torch.zeros(T, T, dtype=dtype).masked_fill(~keep, torch.finfo(dtype).min)[None, None]


def assert_layer_matches_unpatched(patched, unpatched, layer, ref_layer, x):
    """patched(x) against unpatched(x) (x: float64 rows) and the gradients
    of x and of every weight of layer against ref_layer's."""
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = patched(a)
    want = unpatched(b)
    assert rel_err(out, want) < F64_RTOL
    dy = torch.randn_like(out)
    out.backward(dy)
    want.backward(dy)
    assert rel_err(a.grad, b.grad) < F64_RTOL
    mine = dict(layer.named_parameters())
    for n, p in ref_layer.named_parameters():
        assert rel_err(mine[n].grad, p.grad) < F64_RTOL, n


def assert_window_edge(f, x, t, w):
    """Row t of f(x) is unchanged by the key t - w (outside a window of w)
    and changed by t - w + 1, as Hugging Face's sliding mask."""
    with torch.no_grad():
        base = f(x)
        for j, changed in ((t - w, False), (t - w + 1, True)):
            y = x.clone()
            y[j] += 1.0
            out = f(y)
            assert bool((out[t] - base[t]).abs().max() > 1e-9) == changed, j


def train(m, ids, labels, steps, lr):
    """The losses of steps AdamW steps of m on one batch."""
    opt = torch.optim.AdamW(m.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = m(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def layer_setup(make_pair, rope_tables, dtype):
    """A pair in dtype, its layer dims, and a batch's shape and RoPE tables
    (rope_tables: ct.rope_tables or ct.qk_norm_rope_tables) for calling a
    patched decoder layer directly."""
    ref, pm = make_pair(dtype=dtype)
    dims = _hf_llama._dims(pm.config)
    B, T = 2, 12
    pos, freq = rope_tables(torch.arange(T).repeat(B), pm.model.rotary_emb.inv_freq, dims[0], dims[1], dtype)
    return ref, pm, dims, B, T, pos, freq


def saved_shapes(pm, f, x):
    """f(x), and the shapes of the 2-D tensors other than pm's parameters
    that autograd saves for its backward."""
    params = {p.data_ptr() for p in pm.parameters()}
    saved = []

    def pack(t):
        if t.data_ptr() not in params and t.dim() == 2:
            saved.append(tuple(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = f(x)
    return out, saved


def cxx_compiler():
    return any(shutil.which(c) for c in (os.environ.get("CXX") or "", "g++", "c++", "clang++") if c)


class PatchTests:
    """The tests of every patched family. A test file's subclass (named
    Test...) sets make_pair (a staticmethod: make_pair(dtype=float64,
    device="cpu", keep_logits=False, **config) -> (unpatched, patched)),
    decoder_layer (the name of layer_module's function of one patched
    layer), rope_tables, layer_ops (the coda ops of a traced layer,
    sorted), padding_error (a regex of the padding refusal) and gpu_config,
    and may parametrize the fixture variant. A family without RoPE or
    model.model.layers (GPT-2) sets layer_module and overrides layer_args,
    first_layer and unpatched_layer; Gemma 3 (its own layer module, two
    RoPE tables, a windowed first layer) overrides layer_args and
    unpatched_layer."""

    layer_module = _hf_llama

    @pytest.fixture
    def variant(self):
        """The config the state dict, generate and GPU loss tests add."""
        return {}

    def _layer_calls(self, run):
        """How many times run() calls the patched decoder layer."""
        calls = []
        mod = self.layer_module
        orig = getattr(mod, self.decoder_layer)

        def spy(*a, **k):
            calls.append(1)
            return orig(*a, **k)

        setattr(mod, self.decoder_layer, spy)
        try:
            run()
        finally:
            setattr(mod, self.decoder_layer, orig)
        return len(calls)

    def layer_args(self, pm, B, T, dtype):
        """The arguments of the patched layer function after (layer, x) for
        a batch of B sequences of T tokens."""
        dims = _hf_llama._dims(pm.config)
        pos, freq = self.rope_tables(torch.arange(T).repeat(B), pm.model.rotary_emb.inv_freq, dims[0], dims[1],
                                     dtype)
        return B, pos, freq, dims

    def first_layer(self, m):
        return m.model.layers[0]

    def unpatched_layer(self, ref, x, B, T):
        """The unpatched model's first layer on x (B x T x hidden)."""
        return self.first_layer(ref)(x, position_embeddings=ref.model.rotary_emb(x, torch.arange(T)[None]),
                                     attention_mask=None)

    def _layer(self, dtype):
        """The pair, the batch's shape and f(x): the patched model's first
        decoder layer on x (B * T rows)."""
        ref, pm = self.make_pair(dtype=dtype)
        B, T = 2, 12
        args = self.layer_args(pm, B, T, dtype)
        layer_fn = getattr(self.layer_module, self.decoder_layer)
        layer = self.first_layer(pm)

        def f(x):
            return layer_fn(layer, x, *args)

        return ref, pm, B, T, f

    def test_the_coda_path_runs(self):
        """The patched forward goes through the coda ops (not the HF layers)."""
        _, pm = self.make_pair()
        ids, labels = batch()
        assert self._layer_calls(lambda: pm(input_ids=ids, labels=labels)) == pm.config.num_hidden_layers

    def test_gradient_checkpointing(self):
        ref, pm = self.make_pair()
        pm.gradient_checkpointing_enable()
        pm.train()
        ref.train()
        ids, labels = batch()
        n = self._layer_calls(lambda: pm(input_ids=ids, labels=labels).loss.backward())
        assert n == 2 * pm.config.num_hidden_layers   # each layer run again in the backward
        ref(input_ids=ids, labels=labels).loss.backward()
        assert_grads_match(ref, pm)

    def test_state_dict_unchanged(self, variant):
        ref, pm = self.make_pair(**variant)
        before = {k: v.clone() for k, v in pm.state_dict().items()}
        pm(*batch()[:1], labels=batch()[1]).loss.backward()
        after = pm.state_dict()
        assert list(after) == list(ref.state_dict())
        for k, v in after.items():
            assert torch.equal(v, before[k]), k
        assert len(list(ref.parameters())) == len(list(pm.parameters()))

    def test_generate_unchanged(self, variant):
        ref, pm = self.make_pair(**variant)
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

    def test_training_loop_matches_unpatched(self):
        ref, pm = self.make_pair()
        ids, labels = batch()
        losses = [train(m, ids, labels, 5, 1e-2) for m in (ref, pm)]
        assert losses[0][-1] < losses[0][0]
        for a, b in zip(*losses):
            assert abs(a - b) <= 1e-4 * abs(a), losses

    def test_num_items_in_batch(self):
        ref, pm = self.make_pair()
        ids, labels = batch()
        a = ref(input_ids=ids, labels=labels, num_items_in_batch=40).loss
        b = pm(input_ids=ids, labels=labels, num_items_in_batch=40).loss
        assert abs(float(a) - float(b)) <= F64_RTOL * abs(float(a))

    def test_trainer(self):
        pytest.importorskip("accelerate", reason="the Hugging Face Trainer needs accelerate")
        ref, pm = self.make_pair(dtype=torch.float32)
        ids, labels = batch(B=8)
        data = [{"input_ids": ids[i], "labels": labels[i]} for i in range(8)]
        losses = []
        for m in (ref, pm):
            with tempfile.TemporaryDirectory() as d:
                args = transformers.TrainingArguments(
                    output_dir=d, per_device_train_batch_size=4, max_steps=4, learning_rate=1e-2, logging_steps=1,
                    report_to=[], use_cpu=True, save_strategy="no", seed=0, data_seed=0, dataloader_num_workers=0)
                tr = transformers.Trainer(model=m, args=args, train_dataset=data)
                tr.train()
                losses.append([h["loss"] for h in tr.state.log_history if "loss" in h])
        assert len(losses[1]) == 4
        for a, b in zip(*losses):
            assert abs(a - b) <= 1e-3 * abs(a), losses

    def test_padding_mask_refused_ones_taken(self):
        _, pm = self.make_pair()
        ids, labels = batch()
        mask = torch.ones_like(ids)
        pm(input_ids=ids, attention_mask=mask, labels=labels)
        mask[1, -3:] = 0
        with pytest.raises(ValueError, match=self.padding_error):
            pm(input_ids=ids, attention_mask=mask, labels=labels)

    def test_patched_decoder_layer_compiles_fullgraph(self):
        ref, pm, B, T, f = self._layer(torch.float32)
        x = torch.randn(B * T, pm.config.hidden_size)
        explain = torch._dynamo.explain(f)(x)
        assert explain.graph_break_count == 0 and explain.graph_count == 1
        torch._dynamo.reset()
        out = torch.compile(f, fullgraph=True, backend="aot_eager")(x)
        want = self.unpatched_layer(ref, x.reshape(B, T, -1), B, T)
        if isinstance(want, tuple):
            want = want[0]
        torch.testing.assert_close(out, want.reshape(B * T, -1), rtol=1e-4, atol=1e-5)

    def test_traced_decoder_layer_is_only_coda_ops(self):
        """What torch.compile captures of a patched decoder layer: the coda
        custom ops and the tuple indexing of their results, nothing that
        Inductor would generate a kernel for (the weight re-layouts, and
        Qwen3's QK-norm weights', happen inside the ops), so compiling a
        deeper model costs little more."""
        import operator

        _, pm, B, T, f = self._layer(torch.float32)
        explain = torch._dynamo.explain(f)(torch.randn(B * T, pm.config.hidden_size))
        assert explain.graph_break_count == 0 and explain.graph_count == 1
        # the layer is one nested compile region: its subgraph holds the ops
        graphs = [m for m in explain.graphs[0].modules() if isinstance(m, torch.fx.GraphModule)]
        calls = [n.target for g in graphs for n in g.graph.nodes if n.op in ("call_function", "call_method")]
        region = torch.ops.higher_order.invoke_subgraph
        others = [t for t in calls if t is not operator.getitem and t is not region and not str(t).startswith("coda.")]
        assert not others, others
        assert sum(str(t).startswith("coda.") for t in calls) >= len(self.layer_ops), calls
        names = sorted({str(t).split(".")[1] for t in calls if t is not operator.getitem and t is not region})
        assert names == self.layer_ops, names

    @pytest.mark.skipif(not cxx_compiler(), reason="Inductor's CPU backend needs a C++ compiler")
    def test_patched_model_inductor_matches_eager(self):
        """torch.compile(fullgraph=True) with Inductor on the CPU: one graph, no
        graph break, and the loss and every gradient of the uncompiled patched
        model."""
        from torch._dynamo.utils import counters

        _, pm = self.make_pair(dtype=torch.float32, num_hidden_layers=3)
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

    def test_patched_model_compiles_fullgraph(self):
        """The whole patched forward (embedding, layers, head + loss) in one
        graph, and its backward."""
        _, pm = self.make_pair(dtype=torch.float32)
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

    # ---------------------------------------------------------------- GPU

    @needs_cuda
    @pytest.mark.parametrize("keep_logits", [False, True])
    def test_cuda_bf16_loss_logits_gradients(self, keep_logits, variant):
        ref, pm = self.make_pair(dtype=torch.bfloat16, device="cuda", keep_logits=keep_logits, **variant,
                                 **self.gpu_config)
        ids, labels = batch(device="cuda", B=4, T=256, vocab=1024)
        assert_matches_unpatched(ref, pm, ids, labels, loss_rtol=2e-2, grad_rtol=5e-2, logits_rtol=3e-2)

    @needs_cuda
    @pytest.mark.parametrize("keep_logits", [False, True])
    def test_cuda_training_curve_matches(self, keep_logits):
        ref, pm = self.make_pair(dtype=torch.bfloat16, device="cuda", keep_logits=keep_logits, **self.gpu_config)
        g = torch.Generator().manual_seed(3)
        # a learnable stream: each token predicts the next through a fixed random map
        nxt = torch.randint(0, 1024, (1024,), generator=g)
        start = torch.randint(0, 1024, (4, 1), generator=g)
        seq = [start]
        for _ in range(127):
            seq.append(nxt[seq[-1]])
        ids = torch.cat(seq, 1).cuda()
        a, b = [train(m, ids, ids, 200, 3e-3) for m in (ref, pm)]
        assert b[-1] < 0.5 * b[0], b
        late_a, late_b = sum(a[-20:]) / 20, sum(b[-20:]) / 20
        assert abs(late_a - late_b) < 0.05 + 0.1 * late_a, (a[-5:], b[-5:])


class LlamaPatchTests(PatchTests):
    """PatchTests of a model apply_to_llama patches (Llama, Mistral): its
    layer, RoPE tables, ops and refusal; a subclass sets make_pair."""
    decoder_layer = "llama_decoder_layer"
    rope_tables = staticmethod(ct.rope_tables)
    layer_ops = ["attention", "hf_llama_mlp", "hf_llama_qkv_rope", "llama_residual_norm", "llama_rmsnorm"]
    padding_error = "padding"
    gpu_config = dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
