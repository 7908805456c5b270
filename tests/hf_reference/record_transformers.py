#!/usr/bin/env python3
"""Records Hugging Face transformers' numbers on the fixtures of
build_fixtures.py: the reference that check_coda.py (CTest hf_reference)
holds coda to, on machines without torch.

    python3 tests/hf_reference/build_fixtures.py FIXTURE_DIR
    python3 tests/hf_reference/record_transformers.py FIXTURE_DIR OUT_JSON [--only NAME,...]

With --only, only the fixtures named are recorded and merged into OUT_JSON
(which must exist): the other fixtures keep their records as they are.

Needs torch and transformers. Each fixture is loaded by the class of its
config.json's model_type (LlamaForCausalLM, MistralForCausalLM,
Qwen3ForCausalLM, GPT2LMHeadModel, Gemma3ForCausalLM) with the eager
attention (checked: the masks, Gemma 3's and Mistral's sliding windows
among them, applied as written), and the config transformers builds is
checked against the fixture's: for Mistral its sliding_window and no
projection biases; for Qwen3
head_dim, no attention bias, no sliding window, every layer full
attention, the RoPE base under rope_theta (transformers 4) or
rope_parameters (5), the tie, q_norm / k_norm one head wide; for GPT-2 its
sizes under GPT2Config's keys, n_inner (null: 4 n_embd), the eps, gelu_new,
1/sqrt(head_dim) scaling, Conv1D weights [in, out], the head tied to wte;
for Gemma 3 the layer kinds (layer_types or sliding_window_pattern) and
each layer's window, the two RoPE bases, query_pre_attn_scalar, the soft
caps, the embedding scale sqrt(hidden_size), q_norm / k_norm one head
wide. Per fixture, on the CPU in fp32:
  loss       the mean next-token cross-entropy of the fixed tokens
             (model(input_ids, labels=input_ids).loss: transformers shifts
             the labels, so 63 predictions for 64 tokens)
  generated  greedy generate() from the prompt: do_sample=False, one beam,
             new_tokens tokens, no EOS (the configs have none, and none is
             passed), so it never stops early
and, as checks on the record itself, the greedy tokens recomputed by full
forwards without a cache (greedy_recompute) and the smallest gap between
the two largest logits along that path (greedy_min_margin: a tiny gap
would make the greedy tokens depend on rounding). The SHA-256 of each
fixture file is recorded, so the check can tell when the generator's output
has changed since the record was made.
"""
import datetime
import hashlib
import json
import os
import platform
import sys

import torch
import transformers
from transformers import GenerationConfig

# model_type -> the transformers class that runs it
MODEL_CLASSES = {"llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "qwen3": "Qwen3ForCausalLM",
                 "gpt2": "GPT2LMHeadModel", "gemma3_text": "Gemma3ForCausalLM"}


def sha256(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def version_tuple(v):
    out = []
    for part in v.split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits) if digits else 0)
    return tuple(out)


def load_fp32(d):
    # transformers 4.56 renamed torch_dtype to dtype; older versions would
    # take an unknown dtype= as a config attribute and ignore it
    kw = {"attn_implementation": "eager"}
    if version_tuple(transformers.__version__) >= (4, 56):
        kw["dtype"] = torch.float32
    else:
        kw["torch_dtype"] = torch.float32
    with open(os.path.join(d, "config.json")) as f:
        fixture_cfg = json.load(f)
    name = MODEL_CLASSES.get(fixture_cfg.get("model_type"))
    if name is None:
        raise SystemExit("%s: model_type %r has no class here (%s)"
                         % (d, fixture_cfg.get("model_type"), ", ".join(sorted(MODEL_CLASSES))))
    cls = getattr(transformers, name, None)
    if cls is None:
        raise SystemExit("%s: transformers %s has no %s" % (d, transformers.__version__, name))
    model = cls.from_pretrained(d, **kw)
    model.eval()
    if type(model).__name__ != name:
        raise SystemExit("%s: loaded %s, not %s" % (d, type(model).__name__, name))
    # eager attention: the masks (Gemma 3's sliding window among them) are
    # applied as written, not by a fused kernel
    impl = getattr(model.config, "_attn_implementation", None)
    if impl != "eager":
        raise SystemExit("%s: attention implementation %r, not eager" % (d, impl))
    check_config(d, model, fixture_cfg)
    for name, p in model.named_parameters():
        if p.dtype != torch.float32 or p.device.type != "cpu":
            raise SystemExit("%s: parameter %s is %s on %s, not float32 on the CPU"
                             % (d, name, p.dtype, p.device))
    return model


def rope_theta_of(cfg):
    """The RoPE base transformers uses: rope_parameters (5) or rope_theta (4)."""
    rp = getattr(cfg, "rope_parameters", None)
    if isinstance(rp, dict) and "rope_theta" in rp:
        return float(rp["rope_theta"])
    return float(getattr(cfg, "rope_theta"))


def gemma3_layer_types(fc):
    """Gemma 3's layer kinds: layer_types, else sliding_window_pattern (layer i
    full when (i + 1) % pattern == 0; transformers' default 6)."""
    if fc.get("layer_types") is not None:
        return list(fc["layer_types"])
    pat = fc.get("sliding_window_pattern", 6)
    return ["full_attention" if (i + 1) % pat == 0 else "sliding_attention"
            for i in range(fc["num_hidden_layers"])]


def check_gpt2(model, fc):
    """GPT-2: sizes under GPT2Config's own keys, the MLP width (n_inner, null:
    4 n_embd), eps, the tanh GELU, plain 1/sqrt(head_dim) scaling, Conv1D
    weights [in, out], the head tied to wte."""
    cfg, bad = model.config, []
    for key in ("n_embd", "n_layer", "n_head", "n_positions", "vocab_size", "n_inner",
                "layer_norm_epsilon", "activation_function"):
        if key in fc and getattr(cfg, key, None) != fc[key]:
            bad.append("%s %r (config.json %r)" % (key, getattr(cfg, key, None), fc[key]))
    for key, want in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                      ("reorder_and_upcast_attn", False), ("add_cross_attention", False)):
        if bool(getattr(cfg, key, want)) != want:
            bad.append("%s %r" % (key, getattr(cfg, key, None)))
    D = fc["n_embd"]
    F = fc.get("n_inner") or 4 * D
    blk = model.transformer.h[0]
    for nm, mod, shape in (("attn.c_attn", blk.attn.c_attn, (D, 3 * D)),
                           ("mlp.c_fc", blk.mlp.c_fc, (D, F)),
                           ("mlp.c_proj", blk.mlp.c_proj, (F, D))):
        if type(mod).__name__ != "Conv1D" or tuple(mod.weight.shape) != shape:
            bad.append("%s is %s %s, not Conv1D %s" % (nm, type(mod).__name__,
                                                        tuple(mod.weight.shape), shape))
    if model.lm_head.weight.data_ptr() != model.transformer.wte.weight.data_ptr():
        bad.append("lm_head is not wte")
    return bad


def check_gemma3(model, fc):
    """Gemma 3: the layer kinds and each attention's window (None on full
    layers), the two RoPE bases under rope_parameters, the score scale
    query_pre_attn_scalar^-1/2, the soft caps, the embedding scale
    sqrt(hidden_size), the tanh GELU, q_norm / k_norm one head wide."""
    cfg, bad = model.config, []
    for key in ("rms_norm_eps", "query_pre_attn_scalar", "sliding_window",
                "final_logit_softcapping", "attn_logit_softcapping", "hidden_activation"):
        if getattr(cfg, key, None) != fc.get(key, getattr(cfg, key, None)):
            bad.append("%s %r (config.json %r)" % (key, getattr(cfg, key, None), fc.get(key)))
    if getattr(cfg, "attn_logit_softcapping", None) is not None:
        bad.append("attn_logit_softcapping %r" % cfg.attn_logit_softcapping)
    if getattr(cfg, "use_bidirectional_attention", False):
        bad.append("use_bidirectional_attention true")
    want_types = gemma3_layer_types(fc)
    if list(cfg.layer_types) != want_types:
        bad.append("layer_types %r (expected %r)" % (cfg.layer_types, want_types))
    rp = getattr(cfg, "rope_parameters", None) or {}
    for kind, key in (("full_attention", "rope_theta"), ("sliding_attention", "rope_local_base_freq")):
        p = rp.get(kind) or {}
        if p.get("rope_type", "default") != "default" or float(p.get("rope_theta", -1)) != \
                float(fc[key]):
            bad.append("rope_parameters.%s %r (config.json %s %r)" % (kind, p, key, fc[key]))
    for li, layer in enumerate(model.model.layers):
        attn = layer.self_attn
        win = fc["sliding_window"] if want_types[li] == "sliding_attention" else None
        if attn.sliding_window != win:
            bad.append("layer %d attends over window %r, not %r" % (li, attn.sliding_window, win))
        if abs(attn.scaling - fc["query_pre_attn_scalar"] ** -0.5) > 1e-12:
            bad.append("layer %d scales scores by %r" % (li, attn.scaling))
        for nm in ("q_norm", "k_norm"):
            w = getattr(getattr(attn, nm, None), "weight", None)
            if w is None or tuple(w.shape) != (fc["head_dim"],):
                bad.append("layer %d %s %s" % (li, nm, "missing" if w is None else tuple(w.shape)))
    emb = model.model.embed_tokens
    if abs(float(emb.embed_scale) - fc["hidden_size"] ** 0.5) > 1e-5:
        bad.append("embedding scale %r" % float(emb.embed_scale))
    return bad


def check_config(d, model, fc):
    """The config transformers built says what the fixture's config.json says."""
    cfg = model.config
    bad = []
    for key in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                "head_dim", "intermediate_size", "vocab_size"):
        if key in fc and getattr(cfg, key, None) != fc[key]:
            bad.append("%s %r (config.json %r)" % (key, getattr(cfg, key, None), fc[key]))
    if bool(getattr(cfg, "tie_word_embeddings", False)) != bool(fc.get("tie_word_embeddings")):
        bad.append("tie_word_embeddings %r" % getattr(cfg, "tie_word_embeddings", None))
    # (Gemma 3's two bases: check_gemma3)
    if "rope_theta" in fc and fc.get("model_type") != "gemma3_text" and \
            rope_theta_of(cfg) != float(fc["rope_theta"]):
        bad.append("RoPE base %r (config.json %r)" % (rope_theta_of(cfg), fc["rope_theta"]))
    if fc.get("model_type") == "gpt2":
        bad += check_gpt2(model, fc)
    if fc.get("model_type") == "gemma3_text":
        bad += check_gemma3(model, fc)
    if fc.get("model_type") == "mistral":
        # every layer windowed: the mask is the sliding one when sliding_window is set
        if getattr(cfg, "sliding_window", None) != fc.get("sliding_window", 4096):
            bad.append("sliding_window %r (config.json %r)" % (getattr(cfg, "sliding_window", None),
                                                               fc.get("sliding_window")))
        attn = model.model.layers[0].self_attn
        for nm in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if getattr(getattr(attn, nm), "bias", None) is not None:
                bad.append("%s has a bias" % nm)
    if fc.get("model_type") == "qwen3":
        if getattr(cfg, "attention_bias", False):
            bad.append("attention_bias true")
        if getattr(cfg, "use_sliding_window", False) or getattr(cfg, "sliding_window", None):
            bad.append("a sliding window (use_sliding_window %r, sliding_window %r)"
                       % (getattr(cfg, "use_sliding_window", None),
                          getattr(cfg, "sliding_window", None)))
        lt = getattr(cfg, "layer_types", None)
        if lt is not None and any(t != "full_attention" for t in lt):
            bad.append("layer_types %r" % (lt,))
        attn = model.model.layers[0].self_attn
        for nm in ("q_norm", "k_norm"):
            w = getattr(getattr(attn, nm, None), "weight", None)
            if w is None or tuple(w.shape) != (fc["head_dim"],):
                bad.append("%s %s" % (nm, "missing" if w is None else tuple(w.shape)))
    if bad:
        raise SystemExit("%s: transformers' config differs from the fixture's: %s"
                         % (d, "; ".join(bad)))


def record_one(d):
    with open(os.path.join(d, "inputs.json")) as f:
        inputs = json.load(f)
    model = load_fp32(d)
    cfg = model.config
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    if tied and model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        raise SystemExit("%s: tie_word_embeddings is true but lm_head is not the embedding" % d)
    ids = torch.tensor([inputs["tokens"]], dtype=torch.long)
    prompt = torch.tensor([inputs["prompt"]], dtype=torch.long)
    n_new = int(inputs["new_tokens"])
    with torch.no_grad():
        out = model(input_ids=ids, labels=ids)
        loss = float(out.loss)
        # the same loss from the logits in fp64 (a check of the record)
        lg = out.logits[0, :-1].double()
        loss64 = float(torch.nn.functional.cross_entropy(lg, ids[0, 1:]))

        gc = GenerationConfig(max_new_tokens=n_new, do_sample=False, num_beams=1,
                              eos_token_id=None, bos_token_id=None, pad_token_id=0,
                              use_cache=True)
        model.generation_config.eos_token_id = None
        seq = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                             generation_config=gc)
        generated = seq[0, prompt.shape[1]:].tolist()
        if len(generated) != n_new:
            raise SystemExit("%s: generate returned %d new tokens, %d were asked for"
                             % (d, len(generated), n_new))

        cur = prompt
        recompute, margin = [], float("inf")
        for _ in range(n_new):
            logits = model(input_ids=cur).logits[0, -1]
            top2 = torch.topk(logits, 2)
            margin = min(margin, float(top2.values[0] - top2.values[1]))
            nxt = int(torch.argmax(logits))
            recompute.append(nxt)
            cur = torch.cat([cur, torch.tensor([[nxt]], dtype=torch.long)], dim=1)
    rec = {
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "model_type": cfg.model_type,
        "model_class": type(model).__name__,
        "loss": loss,
        "loss_fp64_from_logits": loss64,
        "loss_predictions": int(ids.shape[1] - 1),
        "prompt": inputs["prompt"],
        "generated": generated,
        "greedy_recompute": recompute,
        "greedy_min_margin": margin,
        "sha256": {n: sha256(os.path.join(d, n))
                   for n in ("config.json", "model.safetensors", "inputs.json")},
    }
    return rec


def main(argv):
    only = None
    if len(argv) == 5 and argv[3] == "--only":
        only = [n for n in argv[4].split(",") if n]
        argv = argv[:3]
    if len(argv) != 3:
        sys.stderr.write("usage: record_transformers.py FIXTURE_DIR OUT_JSON [--only NAME,...]\n"
                         "  (FIXTURE_DIR as written by build_fixtures.py)\n")
        return 2
    fixture_dir, out_path = argv[1], argv[2]
    with open(os.path.join(fixture_dir, "fixtures.json")) as f:
        names = json.load(f)["fixtures"]
    old = None
    if only is not None:
        unknown = [n for n in only if n not in names]
        if unknown:
            raise SystemExit("--only: %s not among the fixtures (%s)"
                             % (", ".join(unknown), ", ".join(names)))
        with open(out_path) as f:  # --only merges into an existing record
            old = json.load(f)
        names = only
    torch.manual_seed(0)
    fixtures, warnings = {}, []
    for name in names:
        rec = record_one(os.path.join(fixture_dir, name))
        if rec["generated"] != rec["greedy_recompute"]:
            warnings.append("%s: generate() and the full recompute disagree" % name)
        if rec["greedy_min_margin"] < 1e-4:
            warnings.append("%s: a greedy step has a logit gap of %.3g (near tie)"
                            % (name, rec["greedy_min_margin"]))
        fixtures[name] = rec
        print("%-14s loss %r  margin %.3g  generated %s"
              % (name, rec["loss"], rec["greedy_min_margin"], rec["generated"]))
    if old is not None:
        # the other fixtures' records stay as they were, in build order
        merged = dict(old.get("fixtures", {}))
        merged.update(fixtures)
        with open(os.path.join(fixture_dir, "fixtures.json")) as f:
            order = json.load(f)["fixtures"]
        fixtures = {n: merged[n] for n in order if n in merged}
        warnings = list(old.get("warnings", [])) + warnings
    doc = {
        "what": "transformers' loss and greedy tokens on the fixtures of build_fixtures.py "
                "(fp32, CPU, eager attention)",
        "recorder": "tests/hf_reference/record_transformers.py",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "transformers": transformers.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "warnings": warnings,
        "fixtures": fixtures,
    }
    tmp = out_path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    os.replace(tmp, out_path)
    for w in warnings:
        print("WARNING: " + w)
    print("wrote %s (%d fixtures, transformers %s, torch %s)"
          % (out_path, len(fixtures), transformers.__version__, torch.__version__))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
