#!/usr/bin/env python3
"""Tiny Hugging Face checkpoints of the families coda imports (Llama,
Mistral, Qwen3, GPT-2, Gemma 3), built deterministically with the Python standard
library alone (no torch, no numpy, no safetensors package).

    python3 tests/hf_reference/build_fixtures.py OUT_DIR

writes OUT_DIR/fixtures.json (the fixture names, in order) and, per fixture,
OUT_DIR/NAME/ with
  config.json         a LlamaForCausalLM, MistralForCausalLM, Qwen3ForCausalLM,
                      GPT2LMHeadModel or Gemma3ForCausalLM configuration, with the keys
                      transformers reads
  model.safetensors   its weights, written by hand: an 8-byte little-endian
                      header length, the JSON header, then the raw
                      little-endian tensor data
  inputs.json         the fixed token sequence (loss), the greedy prompt and
                      the number of new tokens

The same command always writes the same bytes (the generator below is fully
specified), so the numbers record_transformers.py records from these files
hold for every later build of them.

Weights: splitmix64 seeded per fixture; draw k gives u = (x >> 11) / 2^53 in
[0, 1), and a tensor of amplitude a holds (2u - 1) * a, uniform in [-a, a),
in the row-major order of the tensor; tensors are drawn in the order of
TENSOR_ORDER, layer by layer. RMSNorm weights (Qwen3's q/k norms too) and
GPT-2's LayerNorm weights are 1 + (2u - 1) * 0.2; Gemma 3's norms scale by
1 + w, so w = (2u - 1) * 0.2, but after the attention and the MLP w =
3 + (2u - 1) * 0.2 (see POST_NORM). GPT-2's tensors have the names and
shapes GPT2LMHeadModel saves (transformer.*, Conv1D weights [in, out]),
no lm_head (tied). The existing fixtures' bytes never change when one is
added (recorded.json holds their SHA-256). The
amplitudes make the attention and the logits far from uniform (logit
standard deviation ~1.5 at hidden 64), so the greedy tokens do not hinge on
near ties and the loss is not log(vocab). Token sequences come from a
second splitmix64 stream (seed + 1): token = x % vocab.
"""
import json
import math
import os
import struct
import sys

MASK64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.state = seed & MASK64

    def next(self):
        self.state = (self.state + 0x9E3779B97F4A7C15) & MASK64
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    def uniform(self):
        """[0, 1) with 53 random bits."""
        return (self.next() >> 11) * (1.0 / (1 << 53))


# amplitude of each kind of tensor (uniform in [-a, a))
AMPLITUDE = {
    "embed": 0.3,
    "q": 0.25,
    "k": 0.25,
    "v": 0.15,
    "o": 0.15,
    "gate": 0.2,
    "up": 0.2,
    "down": 0.15,
    "lm_head": 0.3,
    # GPT-2: learned positions, the Conv1D weights ([in, out]) and biases
    "pos": 0.2,
    "qkv": 0.25,
    "fc": 0.2,
    "proj": 0.15,
    "norm_bias": 0.1,
    "qkv_bias": 0.1,
    "fc_bias": 0.1,
    "proj_bias": 0.05,
}
NORM_SPREAD = 0.2
# Gemma 3's post-attention and post-feedforward norm weights w scale by
# 1 + w = 4 +- 0.2: the branches then outweigh the embedding (times
# sqrt(hidden)) in the residual stream, else the tied head's largest logit
# is mostly the current token's own and greedy decoding repeats it
POST_NORM = 3.0

SEQ_TOKENS = 64      # tokens of the loss sequence
PROMPT_TOKENS = 6    # tokens of the greedy prompt
NEW_TOKENS = 24      # greedy tokens generated

# the last keys of every config: no special tokens (generation never stops
# early at an EOS), float32
CONFIG_TAIL = {
    "use_cache": True,
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": None,
    "torch_dtype": "float32",
}

BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "hidden_act": "silu",
    "attention_bias": False,
    "mlp_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    **CONFIG_TAIL,
}


# Qwen3ForCausalLM: Llama plus a per-head RMSNorm of q and k (q_norm,
# k_norm, head_dim wide) before RoPE, head_dim free of hidden / heads. The
# window keys as the released configs write them, switched off.
QWEN3_BASE = dict(BASE)
QWEN3_BASE.update({
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 2,
    "rope_theta": 1000000.0,
})
QWEN3_BASE.pop("mlp_bias")


# MistralForCausalLM: Llama's layers (and tensors) with a sliding window on
# every layer (query t sees keys t - sliding_window < j <= t); MistralConfig
# has no bias keys. A window of 8 tokens: the 64-token loss sequence and
# the 30 tokens of generation both run past it.
MISTRAL_BASE = dict(BASE)
MISTRAL_BASE.update({
    "architectures": ["MistralForCausalLM"],
    "model_type": "mistral",
    "sliding_window": 8,
})
MISTRAL_BASE.pop("mlp_bias")
MISTRAL_BASE.pop("attention_bias")


# GPT2LMHeadModel (GPT2Config's keys): learned positions (wpe), LayerNorm
# with a bias, Conv1D linears with biases, the tanh GELU (gelu_new), the
# head tied to wte; attention scaled by 1/sqrt(n_embd / n_head).
GPT2_BASE = {
    "architectures": ["GPT2LMHeadModel"],
    "model_type": "gpt2",
    "vocab_size": 256,
    "n_positions": 64,
    "n_embd": 64,
    "n_layer": 2,
    "n_head": 4,
    "n_inner": None,
    "activation_function": "gelu_new",
    "layer_norm_epsilon": 1e-5,
    "resid_pdrop": 0.0,
    "embd_pdrop": 0.0,
    "attn_pdrop": 0.0,
    "initializer_range": 0.02,
    "scale_attn_weights": True,
    "scale_attn_by_inverse_layer_idx": False,
    "reorder_and_upcast_attn": False,
    "tie_word_embeddings": True,
    **CONFIG_TAIL,
}


# Gemma3ForCausalLM (model_type gemma3_text): RMSNorms scaling by (1 + w)
# (input, post-attention, pre- and post-feedforward, per-head q/k norms,
# final), the embedding times sqrt(hidden_size), GeGLU with the tanh GELU,
# scores scaled by query_pre_attn_scalar^-1/2, sliding-window layers with
# their own RoPE base (rope_local_base_freq) beside full layers
# (rope_theta), the head tied. Windows of 8 and 12 tokens: the 64-token
# loss sequence and the 30 tokens of generation both run past them.
GEMMA3_BASE = {
    "architectures": ["Gemma3ForCausalLM"],
    "model_type": "gemma3_text",
    "vocab_size": 256,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_activation": "gelu_pytorch_tanh",
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": None,
    "query_pre_attn_scalar": 24,
    "sliding_window": 8,
    "final_logit_softcapping": None,
    "attn_logit_softcapping": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "tie_word_embeddings": True,
    **CONFIG_TAIL,
}


def fixture_configs():
    """(name, seed, dtype, config) of every fixture."""
    out = []

    def add(name, seed, dtype="F32", base=BASE, **changes):
        c = dict(base)
        c.update(changes)
        if dtype == "BF16":
            c["torch_dtype"] = "bfloat16"
        out.append((name, seed, dtype, c))

    # an untied head; eps 1e-5 written out
    add("untied", 101, rms_norm_eps=1e-5)
    # a tied head (no lm_head.weight in the file); rms_norm_eps left out, so
    # transformers' default (1e-6) applies
    add("tied", 202, tie_word_embeddings=True)
    out[-1][3].pop("rms_norm_eps")
    # grouped-query attention: 8 query heads of 8 dims share 2 key/value heads
    add("gqa", 303, num_attention_heads=8, num_key_value_heads=2, head_dim=8,
        rope_theta=500000.0)
    # llama3 RoPE scaling. head_dim 16, theta 10000: the wavelengths
    # 2*pi*theta^(2j/16) are 6.3, 19.9, 62.8, 199, 628, ... With
    # original_max_position_embeddings 32, low_freq_factor 1 and
    # high_freq_factor 4, pair 0 (wavelength < 8) keeps its frequency, pair 1
    # (8 <= 19.9 <= 32) is smoothed between scaled and unscaled, pairs 2..7
    # (> 32) are divided by factor 8. A vocabulary larger than the 256 bytes.
    add("llama3_rope", 404, vocab_size=300, max_position_embeddings=128,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})
    # bf16 weights in the file (transformers and coda both widen them to fp32)
    add("bf16", 505, dtype="BF16")
    # Qwen3, tied: 4 query heads of 24 over 2 key/value heads, so the
    # attention is 96 wide over hidden 64 (head_dim != hidden / heads)
    add("qwen3_tied", 606, base=QWEN3_BASE, tie_word_embeddings=True, num_attention_heads=4,
        num_key_value_heads=2, head_dim=24)
    # Qwen3, untied, head_dim = hidden / heads, eps 1e-5
    add("qwen3_untied", 707, base=QWEN3_BASE, num_attention_heads=4, num_key_value_heads=4,
        head_dim=16, rms_norm_eps=1e-5)
    # GPT-2, n_inner null (transformers' 4 * n_embd = 256), eps 1e-5
    add("gpt2", 808, base=GPT2_BASE)
    # GPT-2, n_inner set (96, not 4 * 48), 6 heads of 8, 3 layers, eps 1e-3,
    # more positions than tokens, a vocabulary larger than 256
    add("gpt2_inner", 909, base=GPT2_BASE, n_embd=48, n_head=6, n_layer=3, n_inner=96,
        layer_norm_epsilon=1e-3, n_positions=128, vocab_size=320)
    # Gemma 3, the layers as layer_types (sliding, full, sliding: every 2nd
    # global), the logits soft-capped at 5, 4 query heads over 2 key/value
    # heads, query_pre_attn_scalar 24 != head_dim 16
    add("gemma3", 1010, base=GEMMA3_BASE, final_logit_softcapping=5.0,
        layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    # Gemma 3, the layers as the older sliding_window_pattern 3 (sliding,
    # sliding, full), no soft cap, hidden 48 (sqrt(48) is not exact) under
    # 4 heads of 16, one key/value head, window 12, eps 1e-5, other bases
    add("gemma3_pattern", 1111, base=GEMMA3_BASE, hidden_size=48, intermediate_size=96,
        num_key_value_heads=1, sliding_window=12, sliding_window_pattern=3, rms_norm_eps=1e-5,
        query_pre_attn_scalar=16, rope_theta=500000.0, rope_local_base_freq=5000.0)
    # Mistral: every layer windowed (8 tokens), 4 query heads over 2
    # key/value heads, an untied head, theta 1e6
    add("mistral", 1212, base=MISTRAL_BASE, num_key_value_heads=2, rope_theta=1000000.0)
    return out


def llama3_pair_kinds(c):
    """How llama3 scaling treats each RoPE pair of config c: 'kept',
    'smoothed' or 'divided' (transformers' _compute_llama3_parameters)."""
    rs = c["rope_scaling"]
    hd, theta = c["head_dim"], c["rope_theta"]
    old = rs["original_max_position_embeddings"]
    low_wl, high_wl = old / rs["low_freq_factor"], old / rs["high_freq_factor"]
    kinds = []
    for j in range(hd // 2):
        wavelen = 2.0 * math.pi * theta ** (2.0 * j / hd)
        kinds.append("kept" if wavelen < high_wl else "divided" if wavelen > low_wl else "smoothed")
    return kinds


def gpt2_tensor_list(c):
    """GPT2LMHeadModel's tensors (name, kind, shape) in draw order; the
    Conv1D weights [in, out]."""
    D, L, V = c["n_embd"], c["n_layer"], c["vocab_size"]
    F = c["n_inner"] or 4 * D
    t = [("transformer.wte.weight", "embed", (V, D)),
         ("transformer.wpe.weight", "pos", (c["n_positions"], D))]
    for i in range(L):
        p = "transformer.h.%d." % i
        t += [
            (p + "ln_1.weight", "norm", (D,)),
            (p + "ln_1.bias", "norm_bias", (D,)),
            (p + "attn.c_attn.weight", "qkv", (D, 3 * D)),
            (p + "attn.c_attn.bias", "qkv_bias", (3 * D,)),
            (p + "attn.c_proj.weight", "proj", (D, D)),
            (p + "attn.c_proj.bias", "proj_bias", (D,)),
            (p + "ln_2.weight", "norm", (D,)),
            (p + "ln_2.bias", "norm_bias", (D,)),
            (p + "mlp.c_fc.weight", "fc", (D, F)),
            (p + "mlp.c_fc.bias", "fc_bias", (F,)),
            (p + "mlp.c_proj.weight", "proj", (F, D)),
            (p + "mlp.c_proj.bias", "proj_bias", (D,)),
        ]
    t += [("transformer.ln_f.weight", "norm", (D,)), ("transformer.ln_f.bias", "norm_bias", (D,))]
    return t


def decoder_tensor_list(c, layer_tensors, final_norm):
    """The tensors (name, kind, shape) of a Llama-like decoder (Llama, Mistral, Qwen3,
    Gemma 3) in draw order: the embedding, per layer layer_tensors(prefix,
    D, F, hd, nq, nk), the final norm (of kind final_norm), the lm_head
    unless tied."""
    D, F, L = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    hd = c["head_dim"]
    nq, nk = c["num_attention_heads"] * hd, c["num_key_value_heads"] * hd
    t = [("model.embed_tokens.weight", "embed", (c["vocab_size"], D))]
    for i in range(L):
        t += layer_tensors("model.layers.%d." % i, D, F, hd, nq, nk)
    t.append(("model.norm.weight", final_norm, (D,)))
    if not c["tie_word_embeddings"]:
        t.append(("lm_head.weight", "lm_head", (c["vocab_size"], D)))
    return t


def attention_tensors(p, D, nq, nk):
    return [
        (p + "self_attn.q_proj.weight", "q", (nq, D)),
        (p + "self_attn.k_proj.weight", "k", (nk, D)),
        (p + "self_attn.v_proj.weight", "v", (nk, D)),
        (p + "self_attn.o_proj.weight", "o", (D, nq)),
    ]


def qk_norm_tensors(p, hd, kind):
    return [(p + "self_attn.q_norm.weight", kind, (hd,)),
            (p + "self_attn.k_norm.weight", kind, (hd,))]


def mlp_tensors(p, D, F):
    return [
        (p + "mlp.gate_proj.weight", "gate", (F, D)),
        (p + "mlp.up_proj.weight", "up", (F, D)),
        (p + "mlp.down_proj.weight", "down", (D, F)),
    ]


def gemma3_tensor_list(c):
    """Gemma3ForCausalLM's tensors (name, kind, shape) in draw order; its
    norm weights w (scale 1 + w) are of kind znorm (postnorm after the
    attention and the MLP)."""
    def layer(p, D, F, hd, nq, nk):
        return ([(p + "input_layernorm.weight", "znorm", (D,))] + attention_tensors(p, D, nq, nk)
                + qk_norm_tensors(p, hd, "znorm")
                + [(p + "post_attention_layernorm.weight", "postnorm", (D,)),
                   (p + "pre_feedforward_layernorm.weight", "znorm", (D,))]
                + mlp_tensors(p, D, F) + [(p + "post_feedforward_layernorm.weight", "postnorm", (D,))])

    return decoder_tensor_list(c, layer, "znorm")


def tensor_list(c):
    """(name, kind, shape) in draw order."""
    if c["model_type"] == "gpt2":
        return gpt2_tensor_list(c)
    if c["model_type"] == "gemma3_text":
        return gemma3_tensor_list(c)

    def layer(p, D, F, hd, nq, nk):
        t = [(p + "input_layernorm.weight", "norm", (D,))] + attention_tensors(p, D, nq, nk)
        if c["model_type"] == "qwen3":
            t += qk_norm_tensors(p, hd, "norm")
        return t + [(p + "post_attention_layernorm.weight", "norm", (D,))] + mlp_tensors(p, D, F)

    return decoder_tensor_list(c, layer, "norm")


TENSOR_ORDER = ("Llama, Qwen3: embed, per layer (input norm, q, k, v, o, [Qwen3: q norm, "
                "k norm], post-attention norm, gate, up, down), final norm, lm_head; "
                "GPT-2: wte, wpe, per layer (ln_1 weight, bias, c_attn weight, bias, "
                "attn c_proj weight, bias, ln_2 weight, bias, c_fc weight, bias, mlp c_proj "
                "weight, bias), ln_f weight, bias; Gemma 3: embed, per layer (input norm, q, k, "
                "v, o, q norm, k norm, post-attention norm, pre-feedforward norm, gate, up, "
                "down, post-feedforward norm), final norm")


def f32_to_bf16_bits(x):
    """Round to nearest even (the values here are finite)."""
    b = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((b + 0x7FFF + ((b >> 16) & 1)) >> 16) & 0xFFFF


def tensor_bytes(rng, kind, shape, dtype):
    n = 1
    for s in shape:
        n *= s
    if kind == "norm":
        vals = [1.0 + (2.0 * rng.uniform() - 1.0) * NORM_SPREAD for _ in range(n)]
    elif kind == "znorm":
        vals = [(2.0 * rng.uniform() - 1.0) * NORM_SPREAD for _ in range(n)]
    elif kind == "postnorm":
        vals = [POST_NORM + (2.0 * rng.uniform() - 1.0) * NORM_SPREAD for _ in range(n)]
    else:
        a = AMPLITUDE[kind]
        vals = [(2.0 * rng.uniform() - 1.0) * a for _ in range(n)]
    f32 = struct.pack("<%df" % n, *vals)  # rounds each value to fp32
    if dtype == "F32":
        return f32
    floats = struct.unpack("<%df" % n, f32)
    return struct.pack("<%dH" % n, *[f32_to_bf16_bits(v) for v in floats])


def write_safetensors(path, tensors, dtype):
    """tensors: (name, shape, raw bytes) in file order."""
    header = {"__metadata__": {"format": "pt"}}
    off = 0
    for name, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)  # data aligned to 8 bytes, as the library writes
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for _, _, raw in tensors:
            f.write(raw)
    os.replace(tmp, path)


def write_json(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def build(out_dir):
    os.makedirs(out_dir, exist_ok=True)
    names = []
    for name, seed, dtype, cfg in fixture_configs():
        if cfg.get("rope_scaling") and set(llama3_pair_kinds(cfg)) != {"kept", "smoothed", "divided"}:
            raise SystemExit("%s: llama3 scaling must keep, smooth and divide some pairs: %s"
                             % (name, llama3_pair_kinds(cfg)))
        d = os.path.join(out_dir, name)
        os.makedirs(d, exist_ok=True)
        rng = SplitMix64(seed)
        tensors = [(n, shape, tensor_bytes(rng, kind, shape, dtype))
                   for n, kind, shape in tensor_list(cfg)]
        write_safetensors(os.path.join(d, "model.safetensors"), tensors, dtype)
        write_json(os.path.join(d, "config.json"), cfg)
        trng = SplitMix64(seed + 1)
        V = cfg["vocab_size"]
        seq = [trng.next() % V for _ in range(SEQ_TOKENS)]
        prompt = [trng.next() % V for _ in range(PROMPT_TOKENS)]
        write_json(os.path.join(d, "inputs.json"),
                   {"tokens": seq, "prompt": prompt, "new_tokens": NEW_TOKENS})
        names.append(name)
    write_json(os.path.join(out_dir, "fixtures.json"), {"fixtures": names})
    return names


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: build_fixtures.py OUT_DIR\n")
        return 2
    names = build(argv[1])
    print("wrote %d fixtures in %s: %s" % (len(names), argv[1], ", ".join(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
