#!/usr/bin/env python3
"""coda's Hugging Face export, read back by transformers: CTest
hf_export_transformers. Needs torch and transformers; without them it
exits 77 (CTest skip).

    python3 tests/hf_reference/check_export.py CODA WORKDIR [RECORDED_JSON] [--perturbed]

When the interpreter running this script cannot import torch and
transformers, the environment variable CODA_HF_PYTHON may name one that can
(for example the python of a virtual environment holding them); the script
then runs itself again with it. So, with the CPU build:

    CODA_HF_PYTHON=/path/to/venv/bin/python ctest -R hf_export --output-on-failure

Per fixture of build_fixtures.py, built in WORKDIR:
  1. `coda train --import-hf FIXTURE --out CK` (a weights-only checkpoint),
     then `coda train --resume CK/checkpoint.safetensors --export-hf EXPORT`:
     the pure import -> export round trip of the CLI;
  2. the fixture's class (LlamaForCausalLM, MistralForCausalLM,
     Qwen3ForCausalLM, GPT2LMHeadModel, Gemma3ForCausalLM, by its config's
     model_type).from_pretrained(EXPORT, dtype float32,
     eager attention) with every Python warning recorded (filter "always",
     so none is hidden by an earlier one), every record of transformers'
     loggers at WARNING or above collected (their warning_once cache
     cleared first), and stdout/stderr captured: any of them fails the
     fixture, with the text printed;
  3. the exported config, as transformers reads it, against the fixture's
     own config as transformers reads it (so transformers' defaults apply
     to both alike): hidden size, layers, heads, kv heads, head_dim,
     intermediate size, vocabulary, rms_norm_eps, rope theta and scaling
     (rope_parameters, or rope_scaling on transformers 4),
     tie_word_embeddings, hidden_act, max_position_embeddings, and the
     window keys (use_sliding_window, sliding_window, max_window_layers,
     layer_types: absent from Llama, switched off in Qwen3, Mistral's
     sliding_window on every layer); for GPT-2
     GPT2Config's own keys (n_embd, n_layer, n_head, n_inner as the MLP
     width, null being 4 n_embd, n_positions, layer_norm_epsilon,
     activation_function, the attention-scaling switches); for Gemma 3
     Gemma3TextConfig's (sizes, rms_norm_eps, hidden_activation,
     query_pre_attn_scalar, sliding_window, layer_types, both soft caps,
     use_bidirectional_attention) and the two RoPE bases
     (rope_parameters);
  4. every parameter transformers loaded from the export equal, bit for
     bit, to the one it loads from the fixture (tied heads: lm_head is the
     input embedding);
  5. the loss of the fixture's tokens (model(ids, labels=ids).loss, fp32
     on the CPU) within 1e-5 relative of recorded.json's (printed beside
     it: the loss of the fixture itself with the transformers installed,
     which a later transformers may round differently from the record).

A fixture that recorded.json has no entry for fails the run, naming it and
the command that records it.

--perturbed checks the check: each fixture's export is damaged in one way
before it is loaded (an unexpected tensor, a changed rms_norm_eps, two
swapped q_proj rows, the RoPE scaling dropped, a missing tensor, two
swapped entries of a Qwen3 q_norm / k_norm, a changed GPT-2
layer_norm_epsilon, two swapped input rows of a GPT-2 c_attn, a doubled
Gemma 3 sliding_window, Gemma 3's layer_types reversed, a halved Mistral
sliding_window), and the run
passes only if every fixture then fails for the reason its damage should
cause.

coda's export always writes F32 tensors (config torch_dtype float32): the
bf16 fixture comes back as the fp32 widening of its bf16 values, which is
exactly what transformers computes with when it loads the bf16 fixture in
fp32, so its loss is compared with its own recorded value, as the others.
"""
import contextlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import build_fixtures  # noqa: E402

LOSS_RTOL = 1e-5
SKIP = 77
REEXEC_MARK = "CODA_HF_EXPORT_REEXEC"

# LlamaConfig attributes the export must carry over (as transformers reads them)
CONFIG_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads",
                 "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                 "rms_norm_eps", "tie_word_embeddings", "hidden_act",
                 "max_position_embeddings", "attention_bias", "mlp_bias",
                 "use_sliding_window", "sliding_window", "max_window_layers", "layer_types"]
# GPT2Config's (n_inner compared as the MLP width: null is 4 n_embd)
GPT2_CONFIG_FIELDS = ["n_embd", "n_layer", "n_head", "n_inner", "n_positions", "vocab_size",
                      "layer_norm_epsilon", "activation_function", "tie_word_embeddings",
                      "scale_attn_weights", "scale_attn_by_inverse_layer_idx",
                      "reorder_and_upcast_attn", "add_cross_attention"]
# Gemma3TextConfig's
GEMMA3_CONFIG_FIELDS = ["hidden_size", "num_hidden_layers", "num_attention_heads",
                        "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size",
                        "rms_norm_eps", "tie_word_embeddings", "hidden_activation",
                        "max_position_embeddings", "attention_bias", "query_pre_attn_scalar",
                        "sliding_window", "layer_types", "final_logit_softcapping",
                        "attn_logit_softcapping", "use_bidirectional_attention"]


def config_fields(cfg):
    """{field: value} of a config transformers built, per family."""
    mt = cfg.model_type
    fields = GPT2_CONFIG_FIELDS if mt == "gpt2" else GEMMA3_CONFIG_FIELDS \
        if mt == "gemma3_text" else CONFIG_FIELDS
    out = {f: getattr(cfg, f, None) for f in fields}
    if mt == "gpt2":
        out["n_inner"] = out["n_inner"] or 4 * cfg.n_embd
    return out


def import_torch():
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        return True
    except ImportError:
        return False


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stdout))
    return p.stdout


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.records = []

    def emit(self, record):
        text = re.sub(r"\x1b\[[0-9;]*m", "", record.getMessage())  # the load report's bold
        self.records.append("%s: %s" % (record.levelname, text))


def load_quietly(d, cls_of):
    """(model, [warning texts]) of CLS.from_pretrained(d) in fp32, CLS the class of
    the config.json at cls_of (the fixture's: the export must load as it)."""
    import torch
    import transformers
    # they need torch: imported here, not at the top
    from record_transformers import MODEL_CLASSES, version_tuple
    with open(os.path.join(cls_of, "config.json")) as f:
        cls = getattr(transformers, MODEL_CLASSES[json.load(f)["model_type"]])
    tlog = transformers.utils.logging
    tlog.set_verbosity_warning()
    tlog.disable_progress_bar()
    tlog.warning_once.cache_clear()  # a warning given for an earlier folder counts again
    root = tlog.get_logger()  # the "transformers" logger, parent of all of its loggers
    handler = Collect()
    root.addHandler(handler)
    kw = {"attn_implementation": "eager"}
    # transformers 4.56 renamed torch_dtype to dtype; older versions would
    # take an unknown dtype= as a config attribute and ignore it
    kw["dtype" if version_tuple(transformers.__version__) >= (4, 56) else "torch_dtype"] = \
        torch.float32
    out, err = io.StringIO(), io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, \
                contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            model = cls.from_pretrained(d, **kw)
    finally:
        root.removeHandler(handler)
    said = ["%s: %s" % (w.category.__name__, w.message) for w in caught]
    said += handler.records
    said += ["stdout: " + ln for ln in out.getvalue().splitlines() if ln.strip()]
    said += ["stderr: " + ln for ln in err.getvalue().splitlines() if ln.strip()]
    model.eval()
    return model, said


def rope_of(cfg):
    """The RoPE settings transformers will use, comparable across folders."""
    rp = getattr(cfg, "rope_parameters", None)
    if rp is None:  # transformers 4
        rp = {"rope_theta": getattr(cfg, "rope_theta", None),
              "rope_scaling": getattr(cfg, "rope_scaling", None)}
    rp = dict(rp)
    if rp.get("rope_type") == "default" or rp.get("type") == "default":
        rp = {k: v for k, v in rp.items() if k in ("rope_type", "type", "rope_theta")}
    return {k: (float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
            for k, v in rp.items()}


# --perturbed: fixture -> (damage done to its export, text its failure must hold)
PERTURBATIONS = {
    "untied": ("extra", "transformers warned"),
    "tied": ("eps", "config rms_norm_eps"),
    "gqa": ("rows", "parameters differ"),
    "llama3_rope": ("rope", "RoPE is"),
    "bf16": ("missing", "transformers warned"),
    "qwen3_tied": ("qnorm", "parameters differ"),
    "qwen3_untied": ("knorm", "parameters differ"),
    "gpt2": ("lneps", "config layer_norm_epsilon"),
    "gpt2_inner": ("cattn", "parameters differ"),
    "gemma3": ("window", "config sliding_window"),
    "gemma3_pattern": ("layers", "config layer_types"),
    "mistral": ("halfwindow", "config sliding_window"),
}


def damage(exp, kind):
    import torch
    from safetensors.torch import load_file, save_file
    cfg_path, st_path = os.path.join(exp, "config.json"), os.path.join(exp, "model.safetensors")
    if kind in ("eps", "rope", "lneps", "window", "halfwindow", "layers"):
        with open(cfg_path) as f:
            cfg = json.load(f)
        if kind == "eps":
            cfg["rms_norm_eps"] *= 10.0
        elif kind == "lneps":
            cfg["layer_norm_epsilon"] *= 10.0
        elif kind == "window":
            cfg["sliding_window"] *= 2
        elif kind == "halfwindow":
            cfg["sliding_window"] //= 2
        elif kind == "layers":  # the same kinds, in another order
            cfg["layer_types"] = cfg["layer_types"][::-1]
            cfg.pop("sliding_window_pattern", None)
        else:
            cfg.pop("rope_scaling")
        with open(cfg_path, "w") as f:
            json.dump(cfg, f)
        return
    t = load_file(st_path)
    if kind == "extra":
        t["model.layers.0.self_attn.q_proj.bias"] = torch.zeros(t["model.norm.weight"].shape)
    elif kind == "missing":
        del t["model.layers.1.mlp.up_proj.weight"]
    elif kind == "rows":
        q = t["model.layers.0.self_attn.q_proj.weight"]
        q[[0, 1]] = q[[1, 0]]
    elif kind == "cattn":  # two inputs of GPT-2's Conv1D [in, out]
        q = t["transformer.h.1.attn.c_attn.weight"]
        q[[0, 1]] = q[[1, 0]]
    elif kind in ("qnorm", "knorm"):
        w = t["model.layers.1.self_attn.%s_norm.weight" % kind[0]]
        w[[0, 1]] = w[[1, 0]]
    save_file(t, st_path, metadata={"format": "pt"})


def check_one(coda, work, fix_dir, name, rec, perturbation=None):
    import torch
    fails = []
    d = os.path.join(fix_dir, name)
    ck = os.path.join(work, "ck-" + name)
    exp = os.path.join(work, "export-" + name)
    run([coda, "train", "--import-hf", d, "--out", ck])
    run([coda, "train", "--resume", os.path.join(ck, "checkpoint.safetensors"), "--export-hf", exp])
    if perturbation:
        damage(exp, perturbation)
    with open(os.path.join(d, "inputs.json")) as f:
        inputs = json.load(f)

    ref, ref_said = load_quietly(d, d)
    model, said = load_quietly(exp, d)
    if ref_said:
        fails.append("%s: transformers warned on the fixture itself (not coda's doing, but the "
                     "check cannot tell the export's warnings apart):\n  %s"
                     % (name, "\n  ".join(ref_said)))
    if said:
        fails.append("%s: transformers warned %d times loading coda's export:\n  %s"
                     % (name, len(said), "\n  ".join(said)))

    fa, fb = config_fields(model.config), config_fields(ref.config)
    for field in fb:
        a, b = fa.get(field), fb[field]
        if a != b:
            fails.append("%s: config %s is %r in the export, %r in the fixture"
                         % (name, field, a, b))
    ra, rb = rope_of(model.config), rope_of(ref.config)
    if ra != rb:
        fails.append("%s: RoPE is %r in the export, %r in the fixture" % (name, ra, rb))

    pa, pb = dict(model.state_dict()), dict(ref.state_dict())
    if sorted(pa) != sorted(pb):
        fails.append("%s: the export's parameters %s are not the fixture's %s"
                     % (name, sorted(set(pa) ^ set(pb)), ""))
    differing = []
    for k in sorted(set(pa) & set(pb)):
        ta, tb = pa[k], pb[k]
        if ta.dtype != torch.float32:
            differing.append("%s is %s" % (k, ta.dtype))
        elif ta.shape != tb.shape or not torch.equal(ta, tb.to(torch.float32)):
            differing.append(k)
    if differing:
        fails.append("%s: parameters differ between export and fixture: %s"
                     % (name, ", ".join(differing)))
    if model.config.tie_word_embeddings and \
            model.lm_head.weight.data_ptr() != model.get_input_embeddings().weight.data_ptr():
        fails.append("%s: tied config, but transformers' lm_head is not the embedding" % name)

    ids = torch.tensor([inputs["tokens"]], dtype=torch.long)
    with torch.no_grad():
        loss = float(model(input_ids=ids, labels=ids).loss)
        loss_fixture = float(ref(input_ids=ids, labels=ids).loss)
    want = rec["loss"]
    rel = abs(loss - want) / abs(want)
    if not rel <= LOSS_RTOL:
        fails.append("%s: transformers' loss on coda's export is %r, recorded %r (relative "
                     "difference %.3g > %g)" % (name, loss, want, rel, LOSS_RTOL))
    print("%-14s %8d %18.9f %18.9f %18.9f %10.2e  %s"
          % (name, len(said), loss, loss_fixture, want, rel, "FAIL" if fails else "ok"))
    return fails


def main(argv):
    perturbed = "--perturbed" in argv[1:]
    argv = [a for a in argv if a != "--perturbed"]
    if len(argv) not in (3, 4):
        sys.stderr.write(__doc__)
        return 2
    if not import_torch():
        alt = os.environ.get("CODA_HF_PYTHON")
        if alt and not os.environ.get(REEXEC_MARK):
            env = dict(os.environ)
            env[REEXEC_MARK] = "1"
            return subprocess.call([alt, os.path.abspath(__file__)] + argv[1:] +
                                   (["--perturbed"] if perturbed else []), env=env)
        print("hf_export_transformers: skipped: torch and transformers are not importable "
              "by %s%s" % (sys.executable, " (nor by CODA_HF_PYTHON)" if alt else
                           "; CODA_HF_PYTHON may name an interpreter that has them"))
        return SKIP
    import torch
    import transformers
    coda, work = argv[1], argv[2]
    rec_path = argv[3] if len(argv) == 4 else os.path.join(HERE, "recorded.json")
    with open(rec_path) as f:
        recorded = json.load(f)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    torch.manual_seed(0)
    fix_dir = os.path.join(work, "fixtures")
    names = build_fixtures.build(fix_dir)
    print("transformers %s, torch %s; losses recorded with transformers %s, torch %s"
          % (transformers.__version__, torch.__version__, recorded.get("transformers"),
             recorded.get("torch")))
    print("%-14s %8s %18s %18s %18s %10s" % ("fixture", "warnings", "loss (export)",
                                             "loss (fixture)", "loss (recorded)", "rel"))
    fails, missed = [], []
    for name in names:
        rec = recorded.get("fixtures", {}).get(name)
        if rec is None:
            from check_coda import record_missing_howto
            (missed if perturbed else fails).append(
                "%s: no transformers record in %s (not recorded yet).\nTo record it, %s"
                % (name, rec_path, record_missing_howto([name])))
            continue
        kind, expect = PERTURBATIONS.get(name, (None, None)) if perturbed else (None, None)
        if perturbed and kind is None:
            missed.append("%s: no perturbation is defined for this fixture" % name)
            continue
        try:
            got = check_one(coda, work, fix_dir, name, rec, kind)
        except RuntimeError as e:
            got = ["%s: %s" % (name, e)]
            if perturbed:
                missed.append(got[0])
        if perturbed:
            if not any(expect in f for f in got):
                missed.append("%s: damage '%s' was not caught as '%s' (failures: %s)"
                              % (name, kind, expect, got or "none"))
        else:
            fails += got
    if perturbed:
        if missed:
            print("hf_export_transformers (perturbed): FAILED:\n" + "\n".join(missed + fails))
            return 1
        print("hf_export_transformers (perturbed): ok: every damaged export was caught")
        return 0
    if fails:
        print("hf_export_transformers: FAILED:\n" + "\n".join(fails))
        return 1
    print("hf_export_transformers: ok (%d fixtures: no warnings, configs and weights as the "
          "fixtures', losses within %g of transformers' recorded ones)" % (len(names), LOSS_RTOL))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
