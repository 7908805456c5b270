"""Where the time of the coda-patched Llama under torch.compile goes: for
models of 1, 2 and 4 layers at the 1.1 B widths (d 2048, 32/8 heads, ffn
8192, vocab 32768, 4 x 2048), each in its own process, the seconds of the
first three training steps (the first compiles forward and backward) and
of one step after them, with dynamo's counters (frames compiled, graph
breaks, recompiles). If the first step grows with the layers, the layers
are traced one by one; if later steps stay slow, something recompiles.

    python3 bench/hf_llama/diag_compile.py [--layers 1,2,4] [--timeout S] [--profile 1] [--small --device cpu]

--small: d 256, 4/2 heads, ffn 512, vocab 1024, 2 x 128 tokens, float32
(with --device cpu, Inductor's CPU backend: the same per-layer structure
without a GPU). Needs torch (with CUDA for --device cuda), transformers and
the coda package (PYTHONPATH to python/, CODA_LIBRARY to a libcoda.so built
for the device)."""

import argparse
import json
import subprocess
import sys
import time


SHAPES = {
    "1b": dict(vocab_size=32768, hidden_size=2048, intermediate_size=8192, num_attention_heads=32,
               num_key_value_heads=8, batch=4, seq=2048, dtype="bfloat16"),
    "small": dict(vocab_size=1024, hidden_size=256, intermediate_size=512, num_attention_heads=4,
                  num_key_value_heads=2, batch=2, seq=128, dtype="float32"),
}


def one(layers, shape, device, profile=0):
    import torch
    import transformers
    from torch._dynamo.utils import counters

    import coda.torch as ct

    sh = dict(SHAPES[shape])
    B, T, dtype = sh.pop("batch"), sh.pop("seq"), getattr(torch, sh.pop("dtype"))
    cfg = transformers.LlamaConfig(**sh, num_hidden_layers=layers, max_position_embeddings=T, rms_norm_eps=1e-5,
                                   tie_word_embeddings=False, use_cache=False)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.LlamaForCausalLM(cfg)
    model = model.to(dtype=dtype).train()
    ct.apply_to_llama(model)
    step_model = torch.compile(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device == "cuda")
    ids = torch.randint(0, cfg.vocab_size, (B, T), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times = []
    for i in range(4):
        t0 = time.perf_counter()
        loss = step_model(input_ids=ids, labels=ids, use_cache=False).loss
        t1 = time.perf_counter()
        if profile and i == 0:
            # where the first forward call (dynamo, AOT autograd, Inductor for
            # the forward and the backward) spent its time
            from torch._dynamo.utils import compile_times
            for line in str(compile_times(repr="str")).splitlines():
                if line.strip():
                    print("compile_times " + line, file=sys.stderr)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        times.append((t1 - t0, time.perf_counter() - t1))
        print("layers %d step %d: forward call %.2f s, backward + step %.2f s" % (layers, i, *times[-1]),
              file=sys.stderr, flush=True)
    c = {k: dict(v) for k, v in counters.items() if k in ("stats", "graph_break", "recompiles", "unimplemented")}
    return {"layers": layers, "steps_s": times, "counters": c}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", default="1,2,4")
    ap.add_argument("--timeout", type=float, default=150)
    ap.add_argument("--small", action="store_true", help="the small shape (see above) instead of 1.1 B")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--profile", type=int, default=0,
                    help="1: print dynamo's compile_times (seconds per compile phase) after the first step")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print("RESULT " + json.dumps(one(a.one, "small" if a.small else "1b", a.device, a.profile)), flush=True)
        return
    for n in [int(x) for x in a.layers.split(",")]:
        t0 = time.perf_counter()
        try:
            cmd = [sys.executable, __file__, "--one", str(n), "--device", a.device, "--profile", str(a.profile)] + \
                (["--small"] if a.small else [])
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout)
            out = p.stdout + p.stderr
        except subprocess.TimeoutExpired as e:
            out = "".join(x.decode() if isinstance(x, bytes) else (x or "") for x in (e.stdout, e.stderr))
            out += "\nnot finished in %g s" % a.timeout
        print("== %d layers (%.0f s)" % (n, time.perf_counter() - t0))
        lines = out.strip().splitlines()
        print("\n".join(l for l in lines if l.startswith(("layers", "RESULT", "not finished", "profile", "compile_times"))
                        or "Recompil" in l
                        or "Graph break" in l or "Error" in l)[-20000:])
        sys.stdout.flush()


if __name__ == "__main__":
    main()
