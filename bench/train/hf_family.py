"""The peers of the family shapes of bench/train/run.sh: Hugging Face's own
model class of each family at the same shape as `coda train --family ...`,
trained on one GPU with bf16 weights, fused AdamW and random tokens.

    python3 bench/train/hf_family.py SHAPE[,SHAPE] MODE[,MODE]

Shapes (layers, width, heads as run.sh's SHAPE table has them):
  qwen3-1.7b  Qwen3ForCausalLM, 28 layers, d 2048, ffn 6144, 16/8 heads of
              128, vocab 151936, tied, 4 x 2048
  gpt2-774m   GPT2LMHeadModel, 36 layers, d 1280, 20 heads, ffn 5120, vocab
              50304 (GPT-2's 50257 padded to a multiple of 64, as llm.c
              does), tied, 8 x 1024
  gemma3-1b   Gemma3ForCausalLM, Gemma 3 1B's layers, width, MLP, vocabulary
              262144 and layer pattern (26 layers, d 1152, ffn 6912, five
              local layers of window 512 to one global), tied, 4 x 2048,
              with its 1024-wide attention as 8/2 heads of 128 instead of
              4/1 of 256 (coda's training attention takes heads up to 128)
Modes: eager; compile (torch.compile of the model); liger (Liger's patch of
the same model class, where Liger has one: Qwen3 and Gemma 3; GPT-2 has
none and its row says so); coda_patch (coda.torch's patch of the same model,
apply_to_qwen3 / apply_to_gpt2 / apply_to_gemma3: needs PYTHONPATH to the
repository's python/ and CODA_LIBRARY to a CUDA build of libcoda.so).

Each run is a child process of its own (Liger's patches change the model
classes process-wide). Prints one line per run, `PEER SHAPE MODE {json}`
(what bench/train/table.py reads), and writes hf_family.json into $OUT. Timing: 3 warm-up
steps, then 20 steps between two CUDA events. MFU counts 6 flops per
parameter and token (a tied embedding once: its product is the head's;
GPT-2's position table not at all: a lookup) plus the causal attention's
6·L·(heads · head_dim)·T, at 989 TFLOP/s."""
import json
import os
import subprocess
import sys
import time

import torch
import transformers

DEV = "cuda"
SHAPES = {
    "qwen3-1.7b": dict(family="qwen3", L=28, d=2048, ffn=6144, heads=16, kv=8, hd=128,
                       V=151936, B=4, T=2048),
    "gpt2-774m": dict(family="gpt2", L=36, d=1280, ffn=5120, heads=20, kv=20, hd=64,
                      V=50304, B=8, T=1024),
    "gemma3-1b": dict(family="gemma3", L=26, d=1152, ffn=6912, heads=8, kv=2, hd=128,
                      V=262144, B=4, T=2048, window=512, pattern=6),
}


def build(s):
    if s["family"] == "qwen3":
        cfg = transformers.Qwen3Config(
            vocab_size=s["V"], hidden_size=s["d"], intermediate_size=s["ffn"],
            num_hidden_layers=s["L"], num_attention_heads=s["heads"],
            num_key_value_heads=s["kv"], head_dim=s["hd"], max_position_embeddings=s["T"],
            rms_norm_eps=1e-6, tie_word_embeddings=True, attn_implementation="sdpa")
        return transformers.Qwen3ForCausalLM(cfg)
    if s["family"] == "gemma3":
        types = ["full_attention" if (i + 1) % s["pattern"] == 0 else "sliding_attention"
                 for i in range(s["L"])]
        cfg = transformers.Gemma3TextConfig(
            vocab_size=s["V"], hidden_size=s["d"], intermediate_size=s["ffn"],
            num_hidden_layers=s["L"], num_attention_heads=s["heads"],
            num_key_value_heads=s["kv"], head_dim=s["hd"], query_pre_attn_scalar=s["hd"],
            sliding_window=s["window"], layer_types=types, max_position_embeddings=s["T"],
            rms_norm_eps=1e-6, tie_word_embeddings=True, final_logit_softcapping=None,
            attn_implementation="sdpa")
        return transformers.Gemma3ForCausalLM(cfg)
    cfg = transformers.GPT2Config(
        vocab_size=s["V"], n_embd=s["d"], n_inner=s["ffn"], n_layer=s["L"], n_head=s["heads"],
        n_positions=s["T"], activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, tie_word_embeddings=True, attn_implementation="sdpa")
    return transformers.GPT2LMHeadModel(cfg)


def liger_patch(s, model):
    if s["family"] == "qwen3":
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3
        apply_liger_kernel_to_qwen3(model=model)
    elif s["family"] == "gemma3":
        from liger_kernel.transformers import apply_liger_kernel_to_gemma3_text
        apply_liger_kernel_to_gemma3_text(model=model)
    else:
        raise RuntimeError("Liger has no patch of %s" % type(model).__name__)


def coda_patch(s, model):
    import coda.torch as ct
    getattr(ct, "apply_to_" + s["family"])(model)


def run(name, mode):
    s = SHAPES[name]
    torch.manual_seed(0)
    model = build(s).to(DEV, torch.bfloat16)
    model.train()
    if mode == "liger":
        liger_patch(s, model)
    elif mode == "coda_patch":
        coda_patch(s, model)
    nparams = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    fwd = torch.compile(model) if mode == "compile" else model
    B, T, V, L = s["B"], s["T"], s["V"], s["L"]
    x = torch.randint(0, V, (B, T), device=DEV)

    def step():
        out = fwd(input_ids=x, labels=x)
        out.loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return out.loss

    t0 = time.time()
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    warm = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    n = 20
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(n):
        loss = step()
    e1.record()
    torch.cuda.synchronize()
    ms = e0.elapsed_time(e1) / n
    tok = B * T / (ms * 1e-3)
    # the position table (GPT-2) is a lookup, not a matrix product
    lookup = s["T"] * s["d"] if s["family"] == "gpt2" else 0
    fpt = 6 * (nparams - lookup) + 6 * L * s["heads"] * s["hd"] * T
    del model, opt, fwd
    return {"ms_per_step": round(ms, 2), "tokens_per_s": round(tok),
            "mfu_989": round(tok * fpt / 989e12, 4),
            "peak_mem_GiB": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "warmup_s": round(warm, 1), "loss": round(float(loss.detach()), 4),
            "torch": torch.__version__, "transformers": transformers.__version__}


def run_isolated(name, mode):
    """One run in a child process: Liger's patches replace the model
    classes' modules for the whole process (a later build in the same
    process would get Liger's norms), so no run may see another's."""
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, mode]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    for line in p.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    return {"error": "child exited %d without a result" % p.returncode}


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--one":
        try:
            r = run(sys.argv[2], sys.argv[3])
        except Exception as e:  # the row says what failed
            r = {"error": repr(e)[:300]}
        print("RESULT " + json.dumps(r), flush=True)
        return
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    res = {}
    for name in sys.argv[1].split(","):
        if name not in SHAPES:
            sys.exit("hf_family.py: unknown shape %r (%s)" % (name, ", ".join(SHAPES)))
        for mode in sys.argv[2].split(","):
            r = run_isolated(name, mode)
            res["%s/%s" % (name, mode)] = r
            print("PEER", name, mode, json.dumps(r), flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), "hf_family.json"), "w") as f:
        json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
