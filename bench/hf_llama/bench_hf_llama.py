"""One training step of a Hugging Face LlamaForCausalLM on the GPU, six ways:
the model as it is (eager, SDPA attention), under torch.compile, patched with
Liger's kernels (when liger_kernel is importable), patched with
coda.torch.apply_to_llama, coda-patched under torch.compile, and
coda-patched with the loss keeping its logits (coda_keep: keep_logits=True,
three vocabulary-wide GEMMs a step instead of four). bf16
weights, AdamW (fused), random tokens; tokens/s over the timed steps and the
peak memory torch's allocator saw (the coda ops allocate their outputs and
temporaries as torch tensors; what libcoda allocates itself, such as its
workspaces, is not in that figure).

    python3 bench/hf_llama/bench_hf_llama.py [--shape 1b|d512|tiny] [--modes eager,compile,liger,coda,coda_compile,coda_keep]
        [--steps 10] [--warmup 3] [--out DIR] [--profile]

Each mode runs in its own process (fresh allocator and compile caches).
Needs torch with CUDA, transformers, and the coda package (PYTHONPATH to
python/ and CODA_LIBRARY to a CUDA build of libcoda.so). Writes DIR/hf_llama.json
and prints a Markdown table. With --profile each mode then runs one more
step under torch.profiler and writes DIR/profile-SHAPE-MODE.txt: the step's
device time by kernel family and by kernel, and the time the device sat
idle inside the step (the union of kernel intervals against the step's
span: launch-bound stretches show there)."""

import argparse
import json
import os
import subprocess
import sys
import time

SHAPES = {
    # the training benchmark's 1.1 B shape (bench/train/run.sh)
    "1b": dict(layers=16, dim=2048, heads=32, kv_heads=8, ffn=8192, vocab=32768, batch=4, seq=2048),
    "d512": dict(layers=6, dim=512, heads=8, kv_heads=8, ffn=2048, vocab=32768, batch=16, seq=1024),
    "tiny": dict(layers=2, dim=256, heads=4, kv_heads=2, ffn=512, vocab=1024, batch=4, seq=256),
}
MODES = ["eager", "compile", "liger", "coda", "coda_compile", "coda_keep"]


FAMILIES = [  # (family, substrings of a kernel name, lower case); the first match wins
    ("attention", ("attn", "flash", "fmha", "sdpa", "cudnn", "attention")),
    ("optimizer", ("adam", "multi_tensor", "fused_optim")),
    ("cross-entropy", ("cross_entropy", "nll", "log_softmax", "ce_", "lse")),
    ("GEMM", ("gemm", "wgmma", "sm90", "cutlass", "nvjet", "cublas", "xmma", "coda_epi", "splitk")),
    ("copy/fill", ("memcpy", "memset", "copy", "fill", "cat", "index")),
    ("norm/activation/elementwise", ("norm", "swiglu", "silu", "rope", "rotary", "elementwise", "vectorized",
                                     "reduce", "triton", "kernel")),
]


def kernel_family(name):
    n = name.lower()
    for fam, keys in FAMILIES:
        if any(k in n for k in keys):
            return fam
    return "other"


def profile_table(events, step_ms):
    """events: (name, start_us, duration_us) of every device kernel, memcpy
    and memset of one step. Returns the report's text: time by family and by
    kernel, and the step's idle device time (span less the union of the
    intervals)."""
    if not events:
        return "no device events recorded\n"
    by_fam, by_name = {}, {}
    for name, _, d in events:
        f = kernel_family(name)
        by_fam[f] = by_fam.get(f, 0.0) + d
        c, t = by_name.get(name, (0, 0.0))
        by_name[name] = (c + 1, t + d)
    busy, end = 0.0, None
    for _, s0, d in sorted(events, key=lambda e: e[1]):
        s1 = s0 + d
        if end is None or s0 >= end:
            busy += d
            end = s1
        elif s1 > end:
            busy += s1 - end
            end = s1
    span = max(e[1] + e[2] for e in events) - min(e[1] for e in events)
    total = sum(by_fam.values())
    out = ["step %.2f ms (events); device span %.2f ms, busy %.2f ms, idle inside the span %.2f ms (%.1f %%)"
           % (step_ms, span / 1e3, busy / 1e3, (span - busy) / 1e3, 100.0 * (span - busy) / max(span, 1e-9)),
           "", "| family | ms | share |", "| --- | ---: | ---: |"]
    for f, t in sorted(by_fam.items(), key=lambda x: -x[1]):
        out.append("| %s | %.2f | %.1f %% |" % (f, t / 1e3, 100.0 * t / total))
    out += ["", "| kernel | calls | ms | family |", "| --- | ---: | ---: | --- |"]
    for n, (c, t) in sorted(by_name.items(), key=lambda x: -x[1][1])[:40]:
        out.append("| `%s` | %d | %.3f | %s |" % (n[:100].replace("|", "/"), c, t / 1e3, kernel_family(n)))
    return "\n".join(out) + "\n"


def profile_step(step, path):
    """One step under torch.profiler; writes profile_table's report to path."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
    events = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.elapsed_us() > 0:
            events.append((e.name, e.time_range.start, e.time_range.elapsed_us()))
    with open(path, "w") as f:
        f.write(profile_table(events, start.elapsed_time(end)))


def run_one(shape, mode, steps, warmup, profile_path=None):
    import torch
    import transformers

    s = SHAPES[shape]
    cfg = transformers.LlamaConfig(vocab_size=s["vocab"], hidden_size=s["dim"], intermediate_size=s["ffn"],
                                   num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                                   num_key_value_heads=s["kv_heads"], max_position_embeddings=s["seq"],
                                   rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    if mode == "liger":
        try:
            from liger_kernel.transformers import apply_liger_kernel_to_llama
        except ImportError as e:
            return {"mode": mode, "skipped": "liger_kernel not importable: %s" % e}
        apply_liger_kernel_to_llama()
    with torch.device("cuda"):  # initialized on the GPU: a 1.1 B model's CPU init takes minutes
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to(dtype=torch.bfloat16)
    model.train()
    if mode in ("coda", "coda_compile", "coda_keep"):
        import coda.torch as ct

        ct.apply_to_llama(model, keep_logits=mode == "coda_keep")
    step_model = torch.compile(model) if mode in ("compile", "coda_compile") else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    g = torch.Generator(device="cuda").manual_seed(1)
    ids = torch.randint(0, s["vocab"], (s["batch"], s["seq"]), device="cuda", generator=g)
    losses = []

    def step():
        loss = step_model(input_ids=ids, labels=ids, use_cache=False).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for _ in range(warmup):
        losses.append(float(step()))
    torch.cuda.synchronize()
    first = time.perf_counter() - t0
    torch.cuda.reset_peak_memory_stats()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(steps):
        loss = step()
    end.record()
    torch.cuda.synchronize()
    losses.append(float(loss))
    ms = start.elapsed_time(end) / steps
    peak = torch.cuda.max_memory_allocated() / 2**20
    if profile_path:
        profile_step(step, profile_path)
    tokens = s["batch"] * s["seq"]
    return {"mode": mode, "shape": shape, "ms_per_step": ms, "tokens_per_s": tokens / (ms / 1e3),
            "peak_mib": peak, "warmup_s": first, "losses": losses,
            "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "transformers": transformers.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="1b", choices=sorted(SHAPES))
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out", default=os.environ.get("OUT", "hf-llama-logs"))
    ap.add_argument("--mode-timeout", type=float, default=None,
                    help="seconds one mode may take (its row then says so); default: no limit")
    ap.add_argument("--profile", action="store_true",
                    help="one more step per mode under torch.profiler: DIR/profile-SHAPE-MODE.txt")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        prof = os.path.join(a.out, "profile-%s-%s.txt" % (a.shape, a.one)) if a.profile else None
        print("RESULT " + json.dumps(run_one(a.shape, a.one, a.steps, a.warmup, prof)))
        return
    os.makedirs(a.out, exist_ok=True)
    results = []
    for mode in a.modes.split(","):
        if mode not in MODES:
            sys.exit("unknown mode %r (modes: %s)" % (mode, ", ".join(MODES)))
        cmd = [sys.executable, __file__, "--shape", a.shape, "--steps", str(a.steps), "--warmup",
               str(a.warmup), "--out", a.out, "--one", mode] + (["--profile"] if a.profile else [])
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.mode_timeout)
            out, code = p.stdout + p.stderr, p.returncode
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
        except subprocess.TimeoutExpired as e:
            out = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
            code, line = None, []
        with open(os.path.join(a.out, "hf_llama-%s-%s.log" % (a.shape, mode)), "w") as f:
            f.write(out)
        if code is None:
            results.append({"mode": mode, "shape": a.shape, "failed": "not finished in %g s" % a.mode_timeout})
        elif code or not line:
            tail = out.strip().splitlines()[-1:] or ["no output"]
            results.append({"mode": mode, "shape": a.shape, "failed": "exit %d: %s" % (code, tail[0])})
        else:
            results.append(json.loads(line[0][7:]))
        print("mode %s: %s" % (mode, json.dumps(results[-1])), file=sys.stderr, flush=True)
        with open(os.path.join(a.out, "hf_llama.json"), "w") as f: # after every mode: a cut run keeps its rows
            json.dump(results, f, indent=1)
    s = SHAPES[a.shape]
    print("HF LlamaForCausalLM training step, shape %s (%d layers, d %d, %d/%d heads, ffn %d, vocab %d, %d x %d)"
          % (a.shape, s["layers"], s["dim"], s["heads"], s["kv_heads"], s["ffn"], s["vocab"], s["batch"], s["seq"]))
    print("\n| mode | ms/step | tokens/s | peak MiB | warm-up s | first / last loss |\n| --- | ---: | ---: | ---: | ---: | --- |")
    for r in results:
        if "tokens_per_s" in r:
            print("| %s | %.1f | %.0f | %.0f | %.1f | %.3f / %.3f |" % (r["mode"], r["ms_per_step"], r["tokens_per_s"],
                                                                  r["peak_mib"], r["warmup_s"], r["losses"][0],
                                                                  r["losses"][-1]))
        else:
            print("| %s | %s | | | | |" % (r["mode"], r.get("skipped") or r.get("failed")))


if __name__ == "__main__":
    main()
