"""coda.torch.apply_to_gpt2 on a tiny randomly initialized Hugging Face
GPT2LMHeadModel (LayerNorms with bias, fused qkv in Conv1D's in x out
layout, tanh GELU MLP, biases on every linear, learned positions, tied
and untied heads): loss, logits and every gradient against the unpatched
model on the same weights (float64 on the CPU), state dict unchanged,
greedy generation unchanged, a training loop and the Trainer, refusals
by name, a block against GPT2Block, torch.compile(fullgraph=True) of a patched block
(only coda ops traced) and of the model with Inductor; on a GPU the same
comparisons in bf16 and a short training run. Skipped where PyTorch or
transformers is not installed."""

import copy

import pytest

import hf_needs

torch, transformers = hf_needs.torch_and_transformers("GPT2LMHeadModel")

import coda.torch as ct  # noqa: E402
from coda import _hf_gpt2  # noqa: E402

import hf_patch_common as common  # noqa: E402
from hf_patch_common import F64_RTOL, batch  # noqa: E402

NO_DROPOUT = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)


def tiny_config(**kw):
    # n_inner null: the MLP is 4 * n_embd wide
    base = dict(vocab_size=97, n_embd=32, n_layer=2, n_head=4, n_positions=64, n_inner=None,
                activation_function="gelu_new", layer_norm_epsilon=1e-5, bos_token_id=0, eos_token_id=0, **NO_DROPOUT)
    base.update(kw)
    return transformers.GPT2Config(**base)


def perturbed(name):
    """GPT-2 starts its LayerNorms at (1, 0) and its biases at 0: all of
    them are moved, so that their use and gradients are tested."""
    return ".ln_" in name or name.endswith("bias")


make_pair = common.pair_maker(transformers.GPT2LMHeadModel, tiny_config, ct.apply_to_gpt2, perturbed)


class TestGpt2(common.PatchTests):
    """The tests every patched family runs (hf_patch_common.py); the state
    dict, generate and GPU loss tests with the tied and an untied head."""
    make_pair = staticmethod(make_pair)
    layer_module = _hf_gpt2
    decoder_layer = "gpt2_block"
    rope_tables = None
    layer_ops = ["attention", "gpt2_ln_linear", "gpt2_mlp", "gpt2_residual_ln"]
    padding_error = "apply_to_gpt2: .*padding"
    gpu_config = dict(vocab_size=1024, n_embd=256, n_layer=2, n_head=4, n_positions=512)

    @pytest.fixture(params=[True, False], ids=["tied", "untied"])
    def variant(self, request):
        return {"tie_word_embeddings": request.param}

    def layer_args(self, pm, B, T, dtype):
        return B, pm.config.n_head

    def first_layer(self, m):
        return m.transformer.h[0]

    def unpatched_layer(self, ref, x, B, T):
        return self.first_layer(ref)(x)


CONFIGS = [{}, {"n_inner": 40}, {"n_layer": 3, "n_head": 2}, {"activation_function": "gelu_pytorch_tanh"},
           {"layer_norm_epsilon": 1e-3}, {"tie_word_embeddings": False}]


@pytest.mark.parametrize("kw", CONFIGS, ids=["tied", "n_inner", "3-layers", "gelu_pytorch_tanh", "eps", "untied"])
@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits, kw):
    ref, pm = make_pair(keep_logits=keep_logits, **kw)
    assert (pm.lm_head.weight is pm.transformer.wte.weight) == kw.get("tie_word_embeddings", True)
    names = [n for n, _ in ref.named_parameters()]
    assert any("c_attn.bias" in n for n in names) and any("wpe" in n for n in names)
    assert pm.transformer.h[0].mlp.c_fc.weight.shape == (32, kw.get("n_inner") or 128)
    common.assert_matches_unpatched(ref, pm, *batch())


def test_position_and_token_type_ids():
    """Positions other than 0..T-1 (learned: any within n_positions) and
    token types (rows of the token embedding added), as Hugging Face's."""
    ref, pm = make_pair()
    ids, labels = batch()
    pos = torch.stack([torch.arange(12) + 5, torch.cat([torch.arange(7), torch.arange(5)])])
    types = (ids % 3).flip(1)
    for kw in ({"position_ids": pos}, {"token_type_ids": types}, {"position_ids": pos, "token_type_ids": types}):
        lr = ref(input_ids=ids, labels=labels, **kw).loss
        lp = pm(input_ids=ids, labels=labels, **kw).loss
        assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item()), kw
        with torch.no_grad():
            assert common.rel_err(pm(input_ids=ids, **kw).logits, ref(input_ids=ids, **kw).logits) < F64_RTOL


def test_inputs_embeds():
    ref, pm = make_pair()
    ids, labels = batch()
    emb = ref.transformer.wte(ids).detach()
    lr = ref(inputs_embeds=emb, labels=labels).loss
    lp = pm(inputs_embeds=emb, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        pm(input_ids=ids, inputs_embeds=emb, labels=labels)


@pytest.mark.parametrize("kw,words", [
    ({"add_cross_attention": True}, ["add_cross_attention"]),
    ({"scale_attn_by_inverse_layer_idx": True}, ["scale_attn_by_inverse_layer_idx", "1/sqrt"]),
    ({"reorder_and_upcast_attn": True}, ["reorder_and_upcast_attn"]),
    ({"scale_attn_weights": False}, ["scale_attn_weights", "1/sqrt"]),
    ({"activation_function": "relu"}, ["activation_function 'relu'", "gelu_new, gelu_pytorch_tanh"]),
    ({"activation_function": "gelu"}, ["activation_function 'gelu'", "gelu_new, gelu_pytorch_tanh"]),
])
def test_unsupported_models_refused(kw, words):
    torch.manual_seed(0)
    m = transformers.GPT2LMHeadModel(tiny_config(**kw))
    with pytest.raises(ValueError) as e:
        ct.apply_to_gpt2(m)
    msg = str(e.value)
    assert msg.startswith("coda.torch.apply_to_gpt2: this model is not supported"), msg
    for w in words:
        assert w in msg, msg
    assert not getattr(m, "_coda_patched", False)


def test_dropout_refused_in_training_by_config_key():
    """GPT-2's configs default to dropout 0.1: training refuses it, naming
    the keys and the values to set; in eval (no dropout) the patched model
    is the unpatched one."""
    torch.manual_seed(0)
    ref = transformers.GPT2LMHeadModel(tiny_config(resid_pdrop=0.1, attn_pdrop=0.1)).double()
    pm = ct.apply_to_gpt2(copy.deepcopy(ref))
    ids, labels = batch()
    pm.train()
    with pytest.raises(ValueError) as e:
        pm(input_ids=ids, labels=labels)
    msg = str(e.value)
    assert "resid_pdrop 0.1" in msg and "attn_pdrop 0.1" in msg and "embd_pdrop 0.0" not in msg, msg
    assert "set resid_pdrop and embd_pdrop and attn_pdrop to 0" in msg, msg
    ref.eval()
    pm.eval()
    lr, lp = ref(input_ids=ids, labels=labels).loss, pm(input_ids=ids, labels=labels).loss
    assert abs(lr.item() - lp.item()) <= F64_RTOL * abs(lr.item())


def test_other_models_refused():
    torch.manual_seed(0)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=4))
    with pytest.raises(TypeError, match="apply_to_gpt2: expects a transformers GPT2LMHeadModel, got LlamaForCausalLM"):
        ct.apply_to_gpt2(llama)
    with pytest.raises(TypeError, match="apply_to_llama: expects a transformers LlamaForCausalLM, got GPT2LMHeadModel"):
        ct.apply_to_llama(transformers.GPT2LMHeadModel(tiny_config()))


def test_cross_attention_inputs_refused():
    _, pm = make_pair()
    ids, labels = batch()
    enc = torch.zeros(2, 3, 32, dtype=torch.float64)
    with pytest.raises(ValueError, match="encoder_hidden_states is not supported"):
        pm(input_ids=ids, labels=labels, encoder_hidden_states=enc)


def test_block_saves_no_gelu_output():
    """What autograd keeps of a patched block for its backward: of the
    M x F tensors only the MLP's pre-activation u, not gelu(u), which the
    backward recomputes (the unpatched block keeps both); the rest M x D,
    M x 3D (qkv) and the attention's M x heads lse."""
    _, pm = make_pair(n_inner=40)
    B, T = 2, 12
    cfg = pm.config
    M, D, F = B * T, cfg.n_embd, 40
    block = pm.transformer.h[0]
    x = torch.randn(M, D, dtype=torch.float64, requires_grad=True)
    out, saved = common.saved_shapes(pm, lambda x: _hf_gpt2.gpt2_block(block, x, B, cfg.n_head), x)
    assert saved.count((M, F)) == 1, saved
    assert all(s[1] in (D, 3 * D, F, cfg.n_head) for s in saved), saved
    out.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_block_matches_unpatched_layer_f64():
    """One patched block against GPT2Block itself, forward and the gradient
    of its input, in float64."""
    ref, pm = make_pair()
    B, T, D = 2, 12, pm.config.n_embd
    x = torch.randn(B * T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    a, b = x.clone().requires_grad_(), x.clone().requires_grad_()
    out = _hf_gpt2.gpt2_block(pm.transformer.h[0], a, B, pm.config.n_head)
    want = ref.transformer.h[0](b.reshape(B, T, D))
    want = (want[0] if isinstance(want, tuple) else want).reshape(B * T, D)
    assert common.rel_err(out, want) < 1e-12
    dy = torch.randn_like(out)
    out.backward(dy)
    want.backward(dy)
    assert common.rel_err(a.grad, b.grad) < 1e-12
