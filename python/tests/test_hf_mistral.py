"""coda.torch.apply_to_llama on a tiny randomly initialized Hugging Face
MistralForCausalLM: Llama's layers with a sliding window on every layer
(query t sees keys t - sliding_window < j <= t), which the patched layers
pass to the attention op. Loss, logits and every gradient against the
unpatched model on the same weights (float64 on the CPU) with windows
shorter than the batch's 12 tokens, covering it, and none; greedy
generation unchanged (also without a KV cache, so the coda layers run on
prefixes longer than the window); one patched layer against
MistralDecoderLayer with Hugging Face's sliding mask; the window's edge;
and the tests every patched family runs (hf_patch_common.py). Skipped
where PyTorch or transformers is not installed."""

import pytest

import hf_needs

torch, transformers = hf_needs.torch_and_transformers("MistralForCausalLM")

import coda.torch as ct  # noqa: E402
from coda import _hf_llama  # noqa: E402

import hf_patch_common as common  # noqa: E402
from hf_patch_common import batch  # noqa: E402


def tiny_config(**kw):
    """A window of 4 of the batch's 12 tokens; 4 query heads on 2 kv heads."""
    return common.tiny_config(transformers.MistralConfig, kw, sliding_window=4, pad_token_id=0, bos_token_id=2,
                              eos_token_id=1)


make_pair = common.pair_maker(transformers.MistralForCausalLM, tiny_config, ct.apply_to_llama)


def run_unpatched_layer(ref, i, x, T):
    layer = ref.model.layers[i]
    pe = ref.model.rotary_emb(x, torch.arange(T)[None])
    out = layer(x, position_embeddings=pe, attention_mask=common.sliding_mask(T, ref.config.sliding_window, x.dtype))
    return out[0] if isinstance(out, tuple) else out


class TestMistral(common.LlamaPatchTests):
    """The tests every patched family runs, on a model whose window (4) is
    shorter than the batch's 12 tokens."""
    make_pair = staticmethod(make_pair)
    gpu_config = dict(common.LlamaPatchTests.gpu_config, sliding_window=64)

    def layer_args(self, pm, B, T, dtype):
        embeds = torch.zeros(B, T, pm.config.hidden_size, dtype=dtype)
        return _hf_llama._FAMILIES["apply_to_llama"].prepare(pm, embeds, torch.arange(T).expand(B, T), {})[1]

    def unpatched_layer(self, ref, x, B, T):
        return run_unpatched_layer(ref, 0, x, T)


CONFIGS = {
    "window4": {},
    "window2": {"sliding_window": 2},
    "window11-mha": {"sliding_window": 11, "num_key_value_heads": 4},
    "window-covers-seq": {"sliding_window": 12},
    "no-window": {"sliding_window": None},
    "tied-3-layers": {"tie_word_embeddings": True, "num_hidden_layers": 3},
}


@pytest.mark.parametrize("kw", list(CONFIGS.values()), ids=list(CONFIGS))
@pytest.mark.parametrize("keep_logits", [False, True])
def test_loss_logits_and_gradients_match_unpatched_f64(keep_logits, kw):
    ref, pm = make_pair(keep_logits=keep_logits, **kw)
    common.assert_matches_unpatched(ref, pm, *batch())


def test_window_is_used():
    """The window changes the loss (the comparisons above would pass a
    patch that ignored it only if it did not): window 4 against none."""
    ids, labels = batch()
    with torch.no_grad():
        a = make_pair()[1](input_ids=ids, labels=labels).loss
        b = make_pair(sliding_window=None)[1](input_ids=ids, labels=labels).loss
    assert abs(float(a) - float(b)) > 1e-3 * abs(float(b))
    assert _hf_llama._window(make_pair()[1].config) == 4


def test_layer_matches_unpatched_layer_f64():
    """One patched layer against MistralDecoderLayer with Hugging Face's
    sliding mask, forward and the gradient of its input and of every
    weight, in float64."""
    ref, pm = make_pair()
    B, T, D = 2, 12, 32
    args = TestMistral().layer_args(pm, B, T, torch.float64)
    assert args[-1] == 4
    x = torch.randn(B * T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    common.assert_layer_matches_unpatched(
        lambda a: _hf_llama.llama_decoder_layer(pm.model.layers[0], a, *args),
        lambda b: run_unpatched_layer(ref, 0, b.reshape(B, T, D), T).reshape(B * T, D),
        pm.model.layers[0], ref.model.layers[0], x)


def test_layer_window_changes_with_the_key_before_it():
    """Row t is unchanged by the key t - window (outside the window) and
    changed by t - window + 1, as Hugging Face's sliding mask."""
    _, pm = make_pair()
    B, T, D, w = 1, 12, 32, 4
    args = TestMistral().layer_args(pm, B, T, torch.float64)
    x = torch.randn(B * T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    common.assert_window_edge(lambda y: _hf_llama.llama_decoder_layer(pm.model.layers[0], y, *args), x, 9, w)


def test_position_ids():
    """Positions other than 0..T-1 (an offset, and a restart in a row): the
    window is over the rows as Hugging Face's mask, the RoPE per row."""
    common.assert_position_ids_match(*make_pair(sliding_window=16))


def test_llama_sliding_window_key_is_ignored():
    """LlamaForCausalLM does not read a sliding_window its config carries
    (transformers' Llama attention has no window): neither does the patch."""
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    cfg.sliding_window = 4
    ref = transformers.LlamaForCausalLM(cfg).double()
    pm = ct.apply_to_llama(__import__("copy").deepcopy(ref))
    assert _hf_llama._window(pm.config) == 0
    common.assert_matches_unpatched(ref, pm, *batch())
