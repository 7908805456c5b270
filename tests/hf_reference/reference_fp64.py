#!/usr/bin/env python3
"""An independent fp64 forward of the fixtures of build_fixtures.py, written
from transformers' definitions of LlamaForCausalLM and Qwen3ForCausalLM with
the Python standard library alone (no torch, no numpy), so coda's fp32
reference engine can be checked on a machine without transformers
(check_fp64.py, CTest hf_fp64).

    python3 tests/hf_reference/reference_fp64.py FIXTURE_DIR

prints the loss of the fixture's tokens and its greedy tokens. The model,
in transformers' layout (nothing of coda's is read or reused):
  x = embed[token];  per layer:
    h = x / sqrt(mean(x^2) + eps) * input_layernorm
    q, k, v = h q_projᵀ, h k_projᵀ, h v_projᵀ   (heads of head_dim)
    Qwen3: each q head and each k head RMS-normalized, times q_norm / k_norm
    RoPE on q and k: pairs (j, j + head_dim/2), angle pos * theta^(-2j/head_dim)
    o = causal softmax(q kᵀ / sqrt(head_dim)) v  (query head h reads key/value
        head h // (heads / kv_heads));  x += o o_projᵀ
    h = RMSNorm(x, post_attention_layernorm);  x += (silu(h gateᵀ) * h upᵀ) downᵀ
  logits = RMSNorm(x, norm) lm_headᵀ (tied: embedᵀ)
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


class Model:
    def __init__(self, d):
        with open(os.path.join(d, "config.json")) as f:
            c = json.load(f)
        self.c = c
        if c.get("rope_scaling") or c.get("rope_parameters"):
            raise SystemExit("%s: RoPE scaling is not part of this reference" % d)
        self.qwen3 = c.get("model_type") == "qwen3"
        self.D, self.L = c["hidden_size"], c["num_hidden_layers"]
        self.H, self.Hk = c["num_attention_heads"], c["num_key_value_heads"]
        self.hd = c.get("head_dim") or self.D // self.H
        self.eps = c.get("rms_norm_eps", 1e-6)
        theta = c.get("rope_theta", 10000.0)
        self.inv_freq = [theta ** (-2.0 * j / self.hd) for j in range(self.hd // 2)]
        t = read_safetensors(os.path.join(d, "model.safetensors"))
        self.emb = rows(t["model.embed_tokens.weight"])
        self.head = self.emb if c.get("tie_word_embeddings") else rows(t["lm_head.weight"])
        self.norm = rows(t["model.norm.weight"])
        self.layers = []
        for i in range(self.L):
            p = "model.layers.%d." % i
            names = ["input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                     "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj",
                     "mlp.up_proj", "mlp.down_proj"]
            if self.qwen3:
                names += ["self_attn.q_norm", "self_attn.k_norm"]
            self.layers.append({n: rows(t[p + n + ".weight"]) for n in names})

    def rope(self, x, pos):
        hd, half = self.hd, self.hd // 2
        out = list(x)
        for h in range(len(x) // hd):
            b = h * hd
            for j in range(half):
                a = pos * self.inv_freq[j]
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

    def step(self, token, pos, cache):
        """The logits after token at position pos; cache: per layer (keys, values)."""
        hd, grp = self.hd, self.H // self.Hk
        x = list(self.emb[token])
        for li, w in enumerate(self.layers):
            h = rmsnorm(x, w["input_layernorm"], self.eps)
            q, k, v = (matvec(w["self_attn.%s_proj" % n], h) for n in "qkv")
            if self.qwen3:
                q = self.heads_norm(q, w["self_attn.q_norm"])
                k = self.heads_norm(k, w["self_attn.k_norm"])
            q, k = self.rope(q, pos), self.rope(k, pos)
            keys, vals = cache[li]
            keys.append(k)
            vals.append(v)
            o = []
            scale = 1.0 / math.sqrt(hd)
            for hh in range(self.H):
                kh = hh // grp
                qh = q[hh * hd:(hh + 1) * hd]
                s = [sum(map(mul, qh, kk[kh * hd:(kh + 1) * hd])) * scale for kk in keys]
                mx = max(s)
                e = [math.exp(z - mx) for z in s]
                tot = sum(e)
                oh = [0.0] * hd
                for p, vv in zip(e, vals):
                    seg = vv[kh * hd:(kh + 1) * hd]
                    for j in range(hd):
                        oh[j] += p / tot * seg[j]
                o += oh
            x = [a + b for a, b in zip(x, matvec(w["self_attn.o_proj"], o))]
            h = rmsnorm(x, w["post_attention_layernorm"], self.eps)
            g, u = matvec(w["mlp.gate_proj"], h), matvec(w["mlp.up_proj"], h)
            y = [gi / (1.0 + math.exp(-gi)) * ui for gi, ui in zip(g, u)]
            x = [a + b for a, b in zip(x, matvec(w["mlp.down_proj"], y))]
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
