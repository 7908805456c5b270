"""Hugging Face generate on the GPU, the rows beside `coda generate --bench`:
a LlamaForCausalLM of random bf16 weights (the decoder bench's shapes), random
512-token prompts, greedy, a fixed number of new tokens (no early stop), two
ways: eager with the dynamic cache, and the static cache (with which generate
compiles the forward itself). Prefill is timed as a forward of the prompts
(the same work generate does first); the decode rate is the new tokens after
the first over the generate time less that prefill. Events, one warm-up run.

    python3 bench/generate/hf_generate.py --shape 1.1b|8b --batches 1,16 \
        [--modes eager,static] [--prompt-len 512] [--tokens 256] [--out FILE.json]

Each (mode, batch) runs in its own process: compile caches and the
allocator start fresh. Prints one line per run and a Markdown table."""

import argparse
import json
import os
import subprocess
import sys

SHAPES = {
    "1.1b": dict(layers=16, dim=2048, heads=32, kv_heads=8, ffn=8192, vocab=32768),
    "8b": dict(layers=32, dim=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    "tiny": dict(layers=2, dim=128, heads=4, kv_heads=2, ffn=384, vocab=256),
}


def run_one(shape, mode, batch, prompt_len, tokens):
    import torch
    import transformers

    s = SHAPES[shape]
    cfg = transformers.LlamaConfig(vocab_size=s["vocab"], hidden_size=s["dim"], intermediate_size=s["ffn"],
                                   num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                                   num_key_value_heads=s["kv_heads"],
                                   max_position_embeddings=prompt_len + tokens + 8, rms_norm_eps=1e-5,
                                   rope_theta=500000.0, tie_word_embeddings=False)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, s["vocab"], (batch, prompt_len), device="cuda", generator=g)
    mask = torch.ones_like(ids)
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, eos_token_id=None,
              pad_token_id=0, attention_mask=mask)
    if mode == "static":
        model.generation_config.cache_implementation = "static"
    ev = lambda: torch.cuda.Event(enable_timing=True)
    with torch.no_grad():
        for _ in range(2):  # warm-up (compiles in static mode), then timed
            model.generate(ids, **kw)
        torch.cuda.synchronize()
        a, b = ev(), ev()
        a.record()
        out = model.generate(ids, **kw)
        b.record()
        torch.cuda.synchronize()
        total = a.elapsed_time(b) / 1e3
        pre = []
        for _ in range(3):
            a.record()
            model(ids, attention_mask=mask, use_cache=False, logits_to_keep=1)
            b.record()
            torch.cuda.synchronize()
            pre.append(a.elapsed_time(b) / 1e3)
        prefill = sorted(pre)[1]
    new = out.shape[1] - prompt_len
    dec = max(total - prefill, 1e-9)
    return dict(shape=shape, mode=mode, batch=batch, prompt_len=prompt_len, new_tokens=int(new),
                prefill_ms=prefill * 1e3, step_ms=dec * 1e3 / max(new - 1, 1),
                decode_tok_s=batch * max(new - 1, 1) / dec, peak_mib=torch.cuda.max_memory_allocated() / 2**20,
                torch=torch.__version__, transformers=transformers.__version__)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1.1b", choices=sorted(SHAPES))
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--modes", default="eager,static")
    ap.add_argument("--prompt-len", type=int, default=512)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--out")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        mode, batch = a.one.split(":")
        print(json.dumps(run_one(a.shape, mode, int(batch), a.prompt_len, a.tokens)))
        return
    rows = []
    for mode in a.modes.split(","):
        for batch in [int(x) for x in a.batches.split(",")]:
            cmd = [sys.executable, os.path.abspath(__file__), "--shape", a.shape, "--prompt-len",
                   str(a.prompt_len), "--tokens", str(a.tokens), "--one", "%s:%d" % (mode, batch)]
            p = subprocess.run(cmd, capture_output=True, text=True)
            last = p.stdout.strip().splitlines()[-1] if p.stdout.strip() else ""
            try:
                r = json.loads(last)
            except ValueError:
                r = dict(shape=a.shape, mode=mode, batch=batch, error=(p.stderr or "no output")[-600:])
            print(json.dumps(r), flush=True)
            rows.append(r)
    print("\n| shape | mode | batch | prefill ms | step ms | decode tok/s | peak MiB |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print("| %s | %s | %d | failed | | | |" % (r["shape"], r["mode"], r["batch"]))
        else:
            print("| %s | %s | %d | %.1f | %.2f | %.0f | %.0f |" % (r["shape"], r["mode"], r["batch"], r["prefill_ms"],
                                                               r["step_ms"], r["decode_tok_s"], r["peak_mib"]))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
