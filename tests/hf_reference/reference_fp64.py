#!/usr/bin/env python3
"""An independent fp64 forward of the fixtures of build_fixtures.py, written
from transformers' definitions of LlamaForCausalLM, MistralForCausalLM,
Qwen3ForCausalLM, GPT2LMHeadModel and Gemma3ForCausalLM with the Python
standard library
alone (no torch, no numpy), so coda's fp32 reference engine can be checked
on a machine without transformers (check_fp64.py, CTest hf_fp64).

    python3 tests/hf_reference/reference_fp64.py FIXTURE_DIR

prints the loss of the fixture's tokens and its greedy tokens. The model,
in transformers' layout (nothing of coda's is read or reused):
  x = embed[token];  per layer:
    h = x / sqrt(mean(x^2) + eps) * input_layernorm
    q, k, v = h q_projᵀ, h k_projᵀ, h v_projᵀ   (heads of head_dim)
    Qwen3: each q head and each k head RMS-normalized, times q_norm / k_norm
    RoPE on q and k: pairs (j, j + head_dim/2), angle pos * theta^(-2j/head_dim)
    o = causal softmax(q kᵀ / sqrt(head_dim)) v  (query head h reads key/value
        head h // (heads / kv_heads); Mistral: on every layer position t sees
        keys s > t - sliding_window only, 4096 where the key is absent, no
        window where it is null);  x += o o_projᵀ
    h = RMSNorm(x, post_attention_layernorm);  x += (silu(h gateᵀ) * h upᵀ) downᵀ
  logits = RMSNorm(x, norm) lm_headᵀ (tied: embedᵀ)
GPT-2 (GPT2LMHeadModel; its Conv1D weights are [in, out]):
  x = wte[token] + wpe[pos];  per layer:
    h = LN(x; ln_1)  (LN(x) = (x - mean) / sqrt(var + eps) * w + b)
    q | k | v = h c_attn + b  (heads of n_embd / n_head)
    o = causal softmax(q kᵀ / sqrt(head_dim)) v;  x += o c_proj + b
    x += gelu_new(LN(x; ln_2) c_fc + b) c_proj + b
  logits = LN(x; ln_f) wteᵀ
Gemma 3 (Gemma3ForCausalLM; N(x; w) = x / sqrt(mean(x^2) + eps) * (1 + w)):
  x = embed[token] * sqrt(hidden_size);  per layer:
    h = N(x; input_layernorm);  q, k, v as Llama's
    each q and k head N(.; q_norm / k_norm), then RoPE with rope_theta on
    full layers, rope_local_base_freq on sliding ones
    o = causal softmax(q kᵀ / sqrt(query_pre_attn_scalar)) v, on a sliding
        layer position t seeing keys s > t - sliding_window only
    x += N(o o_projᵀ; post_attention_layernorm)
    h = N(x; pre_feedforward_layernorm)
    x += N((gelu_tanh(h gateᵀ) * h upᵀ) downᵀ; post_feedforward_layernorm)
  logits = N(x; norm) embedᵀ, then cap * tanh(logits / cap) where
  final_logit_softcapping is set
Loss: the mean over positions t < n-1 of logsumexp(logits_t) - logits_t[token_{t+1}].
Greedy: argmax of the last logits (lowest id on ties), with a key/value
cache; the smallest gap between the two largest logits is reported.
"""
import json
import math
import os
import struct
import sys
from operator import mul


def read_safetensors(path):
    """{name: (shape, [float])} of an F32 or BF16 file."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        data = raw[base + a:base + b]
        if t["dtype"] == "F32":
            vals = list(struct.unpack("<%df" % (len(data) // 4), data))
        elif t["dtype"] == "BF16":
            halves = struct.unpack("<%dH" % (len(data) // 2), data)
            vals = list(struct.unpack("<%df" % len(halves),
                                      struct.pack("<%dI" % len(halves), *[h << 16 for h in halves])))
        else:
            raise SystemExit("%s: tensor %s has dtype %s (F32, BF16 only)" % (path, name, t["dtype"]))
        out[name] = (t["shape"], vals)
    return out


def rows(shape_vals):
    shape, vals = shape_vals
    if len(shape) == 1:
        return vals
    r, c = shape
    return [vals[i * c:(i + 1) * c] for i in range(r)]


def matvec(W, x):
    return [sum(map(mul, row, x)) for row in W]


def rmsnorm(x, w, eps):
    r = 1.0 / math.sqrt(sum(v * v for v in x) / len(x) + eps)
    return [v * r * g for v, g in zip(x, w)]


def layernorm(x, w, b, eps):
    m = sum(x) / len(x)
    var = sum((v - m) * (v - m) for v in x) / len(x)
    r = 1.0 / math.sqrt(var + eps)
    return [(v - m) * r * g + c for v, g, c in zip(x, w, b)]


def gelu_tanh(x):
    """transformers' gelu_new / gelu_pytorch_tanh."""
    return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)))


def transpose(m):
    return [list(col) for col in zip(*m)]


def add(a, b):
    return [x + y for x, y in zip(a, b)]


def gemma_layer_types(c):
    """layer_types, else the periodic list of sliding_window_pattern
    (transformers' default 6)."""
    if c.get("layer_types") is not None:
        return list(c["layer_types"])
    pat = c.get("sliding_window_pattern", 6)
    return ["full_attention" if (i + 1) % pat == 0 else "sliding_attention"
            for i in range(c["num_hidden_layers"])]


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.c = c
        if c.get("rope_scaling") or c.get("rope_parameters"):
            raise SystemExit("%s: RoPE scaling is not part of this reference" % d)
        self.kind = c.get("model_type")
        t = read_safetensors(os.path.join(d, "model.safetensors"))
        if self.kind == "gpt2":
            self.init_gpt2(c, t)
            return
        self.qwen3 = self.kind == "qwen3"
        self.gemma3 = self.kind == "gemma3_text"
        self.D, self.L = c["hidden_size"], c["num_hidden_layers"]
        self.H, self.Hk = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or self.D // self.H
        self.eps = c.get("rms_norm_eps", 1e-6)
        theta = c.get("rope_theta", 1000000.0 if self.gemma3 else 10000.0)
        self.inv_freq = [theta ** (-2.0 * j / self.hd) for j in range(self.hd // 2)]
        self.scale = 1.0 / math.sqrt(self.hd)
        self.window = [None] * self.L
        self.inv_freqs = [self.inv_freq] * self.L
        if self.kind == "mistral":  # MistralConfig's default window: 4096
            self.window = [c.get("sliding_window", 4096)] * self.L
        if self.gemma3:
            self.eps = c.get("rms_norm_eps", 1e-6)
            local = c.get("rope_local_base_freq", 10000.0)
            local_freq = [local ** (-2.0 * j / self.hd) for j in range(self.hd // 2)]
            types = gemma_layer_types(c)
            self.window = [c.get("sliding_window", 4096) if ty == "sliding_attention" else None
                           for ty in types]
            self.inv_freqs = [local_freq if ty == "sliding_attention" else self.inv_freq
                              for ty in types]
            self.scale = 1.0 / math.sqrt(c.get("query_pre_attn_scalar", 256))
            self.softcap = c.get("final_logit_softcapping")
        self.emb = rows(t["model.embed_tokens.weight"])
        self.head = self.emb if c.get("tie_word_embeddings") else rows(t["lm_head.weight"])
        self.norm = rows(t["model.norm.weight"])
        self.layers = []
        for i in range(self.L):
            p = "model.layers.%d." % i
            names = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj"]
            if self.qwen3 or self.gemma3:
                names += ["self_attn.q_norm", "self_attn.k_norm"]
            if self.gemma3:
                names += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
            self.layers.append({n: rows(t[p + n + ".weight"]) for n in names})
        if self.gemma3:  # (1 + w) norms
            one = lambda w: [1.0 + v for v in w]  # noqa: E731
            self.norm = one(self.norm)
            for w in self.layers:
                for n in w:
                    if n.endswith("norm"):
                        w[n] = one(w[n])

    def init_gpt2(self, c, t):
        self.D, self.L = c["n_embd"], c["n_layer"]
        self.H = self.Hk = c["n_head"]
        self.hd = self.D // self.H
        self.eps = c.get("layer_norm_epsilon", 1e-5)
        self.scale = 1.0 / math.sqrt(self.hd)
        self.window = [None] * self.L

        def g(name):
            return rows(t[name] if name in t else t[name[len("transformer."):]])
        self.emb = g("transformer.wte.weight")
        self.head = self.emb
        self.pos = g("transformer.wpe.weight")
        self.ln_f = (g("transformer.ln_f.weight"), g("transformer.ln_f.bias"))
        self.layers = []
        for i in range(self.L):
            p = "transformer.h.%d." % i
            w = {n: g(p + n) for n in ("ln_1.weight", "ln_1.bias", "ln_2.weight", "ln_2.bias",
                                       "attn.c_attn.bias", "attn.c_proj.bias", "mlp.c_fc.bias",
                                       "mlp.c_proj.bias")}
            for n in ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight",
                      "mlp.c_proj.weight"):
                w[n] = transpose(g(p + n))  # [in, out] -> rows of outputs
            self.layers.append(w)

    def rope(self, x, pos, inv_freq=None):
        hd, half = self.hd, self.hd // 2
        inv_freq = inv_freq or self.inv_freq
        out = list(x)
        for h in range(len(x) // hd):
            b = h * hd
            for j in range(half):
                a = pos * inv_freq[j]
                cs, sn = math.cos(a), math.sin(a)
                x0, x1 = x[b + j], x[b + j + half]
                out[b + j] = x0 * cs - x1 * sn
                out[b + j + half] = x1 * cs + x0 * sn
        return out

    def heads_norm(self, x, w):
        hd = self.hd
        out = []
        for h in range(len(x) // hd):
            out += rmsnorm(x[h * hd:(h + 1) * hd], w, self.eps)
        return out

    def attend(self, li, q, k, v, cache):
        """Appends k, v to layer li's cache; the attention output of q (causal,
        over the last `window` positions where the layer has a window)."""
        hd, grp = self.hd, self.H // self.Hk
        keys, vals = cache[li]
        keys.append(k)
        vals.append(v)
        first = 0 if self.window[li] is None else max(0, len(keys) - self.window[li])
        keys, vals = keys[first:], vals[first:]
        o = []
        for hh in range(self.H):
            kh = hh // grp
            qh = q[hh * hd:(hh + 1) * hd]
            s = [sum(map(mul, qh, kk[kh * hd:(kh + 1) * hd])) * self.scale for kk in keys]
            mx = max(s)
            e = [math.exp(z - mx) for z in s]
            tot = sum(e)
            oh = [0.0] * hd
            for p, vv in zip(e, vals):
                seg = vv[kh * hd:(kh + 1) * hd]
                for j in range(hd):
                    oh[j] += p / tot * seg[j]
            o += oh
        return o

    def step_gpt2(self, token, pos, cache):
        D = self.D
        x = add(self.emb[token], self.pos[pos])
        for li, w in enumerate(self.layers):
            h = layernorm(x, w["ln_1.weight"], w["ln_1.bias"], self.eps)
            qkv = add(matvec(w["attn.c_attn.weight"], h), w["attn.c_attn.bias"])
            o = self.attend(li, qkv[:D], qkv[D:2 * D], qkv[2 * D:], cache)
            x = add(x, add(matvec(w["attn.c_proj.weight"], o), w["attn.c_proj.bias"]))
            h = layernorm(x, w["ln_2.weight"], w["ln_2.bias"], self.eps)
            f = [gelu_tanh(z) for z in add(matvec(w["mlp.c_fc.weight"], h), w["mlp.c_fc.bias"])]
            x = add(x, add(matvec(w["mlp.c_proj.weight"], f), w["mlp.c_proj.bias"]))
        return matvec(self.head, layernorm(x, self.ln_f[0], self.ln_f[1], self.eps))

    def step_gemma3(self, token, pos, cache):
        x = [v * math.sqrt(self.D) for v in self.emb[token]]
        for li, w in enumerate(self.layers):
            h = rmsnorm(x, w["input_layernorm"], self.eps)
            q, k, v = (matvec(w["self_attn.%s_proj" % n], h) for n in "qkv")
            q = self.heads_norm(q, w["self_attn.q_norm"])
            k = self.heads_norm(k, w["self_attn.k_norm"])
            q, k = self.rope(q, pos, self.inv_freqs[li]), self.rope(k, pos, self.inv_freqs[li])
            o = matvec(w["self_attn.o_proj"], self.attend(li, q, k, v, cache))
            x = add(x, rmsnorm(o, w["post_attention_layernorm"], self.eps))
            h = rmsnorm(x, w["pre_feedforward_layernorm"], self.eps)
            g, u = matvec(w["mlp.gate_proj"], h), matvec(w["mlp.up_proj"], h)
            y = matvec(w["mlp.down_proj"], [gelu_tanh(gi) * ui for gi, ui in zip(g, u)])
            x = add(x, rmsnorm(y, w["post_feedforward_layernorm"], self.eps))
        lg = matvec(self.head, rmsnorm(x, self.norm, self.eps))
        if self.softcap:
            lg = [self.softcap * math.tanh(z / self.softcap) for z in lg]
        return lg

    def step(self, token, pos, cache):
        """The logits after token at position pos; cache: per layer (keys, values)."""
        if self.kind == "gpt2":
            return self.step_gpt2(token, pos, cache)
        if self.gemma3:
            return self.step_gemma3(token, pos, cache)
        x = list(self.emb[token])
        for li, w in enumerate(self.layers):
            h = rmsnorm(x, w["input_layernorm"], self.eps)
            q, k, v = (matvec(w["self_attn.%s_proj" % n], h) for n in "qkv")
            if self.qwen3:
                q = self.heads_norm(q, w["self_attn.q_norm"])
                k = self.heads_norm(k, w["self_attn.k_norm"])
            q, k = self.rope(q, pos), self.rope(k, pos)
            o = self.attend(li, q, k, v, cache)
            x = add(x, matvec(w["self_attn.o_proj"], o))
            h = rmsnorm(x, w["post_attention_layernorm"], self.eps)
            g, u = matvec(w["mlp.gate_proj"], h), matvec(w["mlp.up_proj"], h)
            y = [gi / (1.0 + math.exp(-gi)) * ui for gi, ui in zip(g, u)]
            x = add(x, matvec(w["mlp.down_proj"], y))
        return matvec(self.head, rmsnorm(x, self.norm, self.eps))

    def new_cache(self):
        return [([], []) for _ in range(self.L)]

    def loss(self, tokens):
        cache, total = self.new_cache(), 0.0
        for t in range(len(tokens) - 1):
            lg = self.step(tokens[t], t, cache)
            mx = max(lg)
            total += mx + math.log(sum(math.exp(z - mx) for z in lg)) - lg[tokens[t + 1]]
        return total / (len(tokens) - 1)

    def greedy(self, prompt, n_new):
        cache, lg = self.new_cache(), None
        for t, tok in enumerate(prompt):
            lg = self.step(tok, t, cache)
        out, margin = [], float("inf")
        for i in range(n_new):
            best = max(range(len(lg)), key=lambda v: (lg[v], -v))
            top2 = sorted(lg, reverse=True)[:2]
            margin = min(margin, top2[0] - top2[1])
            out.append(best)
            if i + 1 < n_new:
                lg = self.step(best, len(prompt) + i, cache)
        return out, margin


def main(argv):
    if len(argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    m = Model(argv[1])
    with open(os.path.join(argv[1], "inputs.json")) as f:
        inputs = json.load(f)
    print("loss %.17g" % m.loss(inputs["tokens"]))
    gen, margin = m.greedy(inputs["prompt"], int(inputs["new_tokens"]))
    print("greedy %s (smallest top-2 gap %.3g)" % (" ".join(map(str, gen)), margin))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
