"""PyTorch's peak device memory (and, for GPT-2, time) of one block
forward + backward, for the rows of `coda bench block`.

    python3 bench/block/torch_peak.py [--baseline PATH] [NAME ...]

Llama rows (seed-6L-512, gpt2s-768, llama1b-2048, llama8b-4096) use the
block class and configuration table of the benchmark environment's
baseline_torch.py (default: next to this file). Only those two
definitions are taken from it (read with `ast` and executed alone), so its
module-level benchmark does not run and nothing of it is copied here.
GPT-2 rows (gpt2-768, gpt2-1600) use the GPT-2 block below, written from
coda's definition in include/coda.h (pre-LayerNorm, GELU tanh, causal
SDPA), since the baseline has none; for them eager and torch.compile
fwd+bwd times are measured here too (triton's do_bench median, as in the
baseline script).

Peak = torch.cuda.max_memory_allocated during one fwd+bwd after
reset_peak_memory_stats, once a warm-up step has created the gradients
(the same state in which coda's peak is taken). Writes torch_peak.json
into $OUT (or the current directory) and prints one JSON line per row.
"""
import ast
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

GPT2 = {  # name: d, ffn, heads, batch, seq (as in coda bench block)
    "gpt2-768": (768, 3072, 12, 8, 1024),
    "gpt2-1600": (1600, 6400, 25, 8, 1024),
}


class GPT2Block(torch.nn.Module):
    def __init__(self, d, ffn, nh):
        super().__init__()
        self.nh, self.hd = nh, d // nh
        self.ln1 = torch.nn.LayerNorm(d, eps=1e-5)
        self.ln2 = torch.nn.LayerNorm(d, eps=1e-5)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.o = torch.nn.Linear(d, d)
        self.fc = torch.nn.Linear(d, ffn)
        self.proj = torch.nn.Linear(ffn, d)

    def forward(self, x):
        B, T, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, -1)
        q = q.view(B, T, self.nh, self.hd).transpose(1, 2)
        k = k.view(B, T, self.nh, self.hd).transpose(1, 2)
        v = v.view(B, T, self.nh, self.hd).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x1 = x + self.o(a.transpose(1, 2).reshape(B, T, d))
        return x1 + self.proj(F.gelu(self.fc(self.ln2(x1)), approximate="tanh"))


def load_baseline(path):
    """The Block class and the configs table of baseline_torch.py, alone."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    keep = [n for n in tree.body
            if (isinstance(n, ast.ClassDef) and n.name == "Block")
            or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "configs" for t in n.targets))]
    if len(keep) != 2:
        sys.exit(f"{path}: expected a Block class and a configs table")
    ns = {"torch": torch, "F": F, "__name__": "baseline_defs"}
    exec(compile(ast.Module(body=keep, type_ignores=[]), path, "exec"), ns)
    return ns["Block"], ns["configs"]


def median_ms(fn):
    """Median time of fn in ms, measured the way the baseline script measures
    its Llama rows (triton's do_bench: warm-up, L2 flushed before each run),
    so the GPT-2 rows compare like with like; plain CUDA events without
    triton."""
    try:
        from triton.testing import do_bench
        return do_bench(fn, warmup=50, rep=200, return_mode="median")
    except ImportError:
        pass
    for _ in range(5):
        fn()
    times = []
    for _ in range(20):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record(); fn(); b.record(); b.synchronize()
        times.append(a.elapsed_time(b))
    times.sort()
    return 0.5 * (times[9] + times[10])


def peak_mib(fn):
    fn()  # creates the gradients
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 2**20


def main():
    args = sys.argv[1:]
    here = os.path.dirname(os.path.abspath(__file__))
    baseline = os.path.join(here, "baseline_torch.py")
    if "--baseline" in args:
        i = args.index("--baseline")
        baseline = args[i + 1]
        del args[i:i + 2]
    Block = configs = None
    if os.path.exists(baseline):
        Block, configs = load_baseline(baseline)
    names = args or (list(configs) if configs else []) + list(GPT2)
    dev, bf = "cuda", torch.bfloat16
    res = {}
    for name in names:
        torch.manual_seed(0)
        r = {}
        if name in GPT2:
            d, ffn, nh, Bt, T = GPT2[name]
            blk = GPT2Block(d, ffn, nh).to(dev, bf)
            call = lambda m, x: m(x)
        elif configs and name in configs:
            d, ffn, nh, nkv, Bt, T = configs[name]
            blk = Block(d, ffn, nh, nkv).to(dev, bf)
            hd = d // nh
            ang = torch.arange(T, device=dev)[:, None] * (10000 ** (-torch.arange(0, hd // 2, device=dev) / (hd // 2)))[None]
            cos = ang.cos()[None, :, None, :].to(bf)
            sin = ang.sin()[None, :, None, :].to(bf)
            call = lambda m, x: m(x, cos, sin)
        else:
            print(f"{name}: unknown (baseline {'found' if configs else 'missing'} at {baseline})", file=sys.stderr)
            continue
        x = torch.randn(Bt, T, d, dtype=bf, device=dev, requires_grad=True)
        gy = torch.randn(Bt, T, d, dtype=bf, device=dev)

        def step(m):
            def f():
                call(m, x).backward(gy)
            return f
        r["eager_peak_mib"] = peak_mib(step(blk))
        if name in GPT2:
            r["eager_ms"] = median_ms(step(blk))
        t0 = time.time()
        cblk = torch.compile(blk)
        step(cblk)()
        torch.cuda.synchronize()
        r["compile_s"] = time.time() - t0
        r["compiled_peak_mib"] = peak_mib(step(cblk))
        if name in GPT2:
            r["compiled_ms"] = median_ms(step(cblk))
        res[name] = r
        print(name, json.dumps(r), flush=True)
        del blk, cblk, x, gy
        torch.cuda.empty_cache()
    out = os.environ.get("OUT", ".")
    json.dump(res, open(os.path.join(out, "torch_peak.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
