#!/usr/bin/env python3
"""coda's Hugging Face import -> export round trip on every fixture of
build_fixtures.py, through the CLI, without torch: CTest hf_roundtrip.
Python standard library only.

    python3 tests/hf_reference/check_roundtrip.py CODA WORKDIR

Per fixture:
  1. `coda train --import-hf FIXTURE --out CK`, then `coda train --resume
     CK/checkpoint.safetensors --export-hf EXPORT`;
  2. EXPORT/model.safetensors holds exactly the fixture's tensor names, each
     with its shape and, bit for bit, its values (coda exports F32: a BF16
     fixture's values widened, which is exact);
  3. EXPORT/config.json says what the fixture's does: architectures,
     model_type, the shapes, head_dim, rms_norm_eps (transformers' default
     1e-6 where the fixture leaves it out), rope_theta, rope_scaling,
     tie_word_embeddings, and for Qwen3 use_sliding_window false, for
     Mistral sliding_window; for
     GPT-2 its own keys (n_embd, n_layer, n_head, n_positions, n_inner as
     4 n_embd where null, layer_norm_epsilon, activation_function); for
     Gemma 3 also rope_local_base_freq, query_pre_attn_scalar,
     sliding_window, the soft caps, hidden_activation and the layer kinds
     (layer_types, or the list sliding_window_pattern gives);
  4. the export imported and exported again gives the same bytes (both
     files).
"""
import json
import os
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_fixtures  # noqa: E402
from reference_fp64 import gemma_layer_types  # noqa: E402

KEYS = ["architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "vocab_size",
        "max_position_embeddings", "rope_theta", "rope_scaling", "tie_word_embeddings"]
GPT2_KEYS = ["architectures", "model_type", "n_embd", "n_layer", "n_head", "n_positions",
             "vocab_size", "activation_function", "tie_word_embeddings"]
GEMMA3_KEYS = ["architectures", "model_type", "hidden_size", "intermediate_size",
               "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
               "vocab_size", "max_position_embeddings", "rope_theta", "rope_local_base_freq",
               "query_pre_attn_scalar", "sliding_window", "final_logit_softcapping",
               "attn_logit_softcapping", "hidden_activation", "tie_word_embeddings"]


def derived(c):
    """What transformers derives where a config may leave a key out or write it
    another way: the norm eps (its default where absent), GPT-2's MLP width
    (n_inner null: 4 n_embd), Gemma 3's layer kinds (layer_types, else
    sliding_window_pattern)."""
    mt = c.get("model_type")
    if mt == "gpt2":
        return {"layer_norm_epsilon": c.get("layer_norm_epsilon", 1e-5),
                "n_inner": c.get("n_inner") or 4 * c["n_embd"]}
    out = {"rms_norm_eps": c.get("rms_norm_eps", 1e-6)}
    if mt == "gemma3_text":
        out["layer_types"] = gemma_layer_types(c)
    return out


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    return p.stdout


def tensors(path):
    """{name: (shape, f32 bytes)}: F32 as stored, BF16 widened exactly."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        a, b = t["data_offsets"]
        data = raw[8 + n + a:8 + n + b]
        if t["dtype"] == "BF16":
            h = struct.unpack("<%dH" % (len(data) // 2), data)
            data = struct.pack("<%dI" % len(h), *[x << 16 for x in h])
        elif t["dtype"] != "F32":
            raise RuntimeError("%s: tensor %s has dtype %s" % (path, name, t["dtype"]))
        out[name] = (t["shape"], data)
    return out


def export(coda, src, work, tag):
    ck, exp = os.path.join(work, "ck-" + tag), os.path.join(work, "export-" + tag)
    run([coda, "train", "--import-hf", src, "--out", ck])
    run([coda, "train", "--resume", os.path.join(ck, "checkpoint.safetensors"), "--export-hf", exp])
    return exp


def read(path):
    with open(path, "rb") as f:
        return f.read()


def check_one(coda, work, d, name):
    fails = []
    exp = export(coda, d, work, name)
    want, got = tensors(os.path.join(d, "model.safetensors")), tensors(
        os.path.join(exp, "model.safetensors"))
    if sorted(want) != sorted(got):
        fails.append("%s: the export's tensors differ from the fixture's by %s"
                     % (name, sorted(set(want) ^ set(got))))
    differ = [k for k in sorted(set(want) & set(got)) if want[k] != got[k]]
    if differ:
        fails.append("%s: tensors not bit for bit the fixture's: %s" % (name, ", ".join(differ)))
    with open(os.path.join(d, "config.json")) as f:
        cw = json.load(f)
    with open(os.path.join(exp, "config.json")) as f:
        cg = json.load(f)
    mt = cw.get("model_type")
    keys = GPT2_KEYS if mt == "gpt2" else GEMMA3_KEYS if mt == "gemma3_text" else \
        KEYS + (["use_sliding_window"] if mt == "qwen3" else ["sliding_window"] if mt == "mistral" else [])
    for k in keys:
        a, b = cg.get(k), cw.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            a, b = {x: float(y) if isinstance(y, (int, float)) else y for x, y in a.items()}, \
                {x: float(y) if isinstance(y, (int, float)) else y for x, y in b.items()}
        if a != b:
            fails.append("%s: config %s is %r in the export, %r in the fixture" % (name, k, a, b))
    dg, dw = derived(cg), derived(cw)
    for k in dw:
        if dg[k] != dw[k]:
            fails.append("%s: config %s is %r in the export, %r in the fixture"
                         % (name, k, dg[k], dw[k]))
    again = export(coda, exp, work, name + "-again")
    for f in ("model.safetensors", "config.json"):
        if read(os.path.join(exp, f)) != read(os.path.join(again, f)):
            fails.append("%s: %s of export -> import -> export is not byte for byte the first "
                         "export's" % (name, f))
    print("%-15s %d tensors  %s" % (name, len(got), "FAIL" if fails else "ok"))
    return fails


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    coda, work = argv[1], argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    fix_dir = os.path.join(work, "fixtures")
    names = build_fixtures.build(fix_dir)
    fails = []
    try:
        for name in names:
            fails += check_one(coda, work, os.path.join(fix_dir, name), name)
    except RuntimeError as e:
        print("hf_roundtrip: FAILED: %s" % e)
        return 1
    if fails:
        print("hf_roundtrip: FAILED:\n" + "\n".join(fails))
        return 1
    print("hf_roundtrip: ok (%d fixtures: import -> export bit for bit, export stable)" % len(names))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
