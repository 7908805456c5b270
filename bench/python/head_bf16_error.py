"""The bf16 gradient error of coda.torch's LM head + cross-entropy against
its fp64 run, for both backward paths (logits recomputed, the default;
logits kept, keep_logits=True) and for eager PyTorch's bf16 head (logits
rounded to bf16, cross-entropy in fp32), on the same random values: 48 rows,
d 64, vocab 512, logits up to about 15, every seventh target ignored.
Max |g - g64| / max |g64| per gradient (dx, dwnf, dwout), CPU backend.

    CODA_LIBRARY=build/libcoda.so.0 PYTHONPATH=python python3 bench/python/head_bf16_error.py
"""

import torch

import coda.torch as ct

F = torch.nn.functional


def main():
    g = torch.Generator().manual_seed(3)
    M, D, V = 48, 64, 512
    base = (torch.randn(M, D, generator=g, dtype=torch.float64), torch.randn(D, generator=g, dtype=torch.float64),
            0.5 * torch.randn(V, D, generator=g, dtype=torch.float64))
    t = torch.randint(0, V, (M,), generator=g)
    t[::7] = -100

    def grads(dtype, f):
        ps = tuple(a.detach().clone().to(dtype).requires_grad_(True) for a in base)
        f(*ps).backward()
        return [p.grad.double() for p in ps]

    def coda_head(keep):
        return lambda x, w, o: ct.llama_lm_head_loss(x, w, o, t, 1e-6, keep_logits=keep)[0]

    def eager(x, w, o):
        h = x * torch.rsqrt((x.float() * x.float()).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w
        return F.cross_entropy((h @ o.T).float(), t, ignore_index=-100)

    x, w, o = base
    h = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w
    print("max |logit| %.2f; torch %s" % (float((h @ o.T).abs().max()), torch.__version__))
    ref = grads(torch.float64, coda_head(False))
    print("\n| bf16 path | dx | dwnf | dwout |\n| --- | ---: | ---: | ---: |")
    for name, f in (("coda, logits recomputed (default)", coda_head(False)),
                    ("coda, logits kept (keep_logits=True)", coda_head(True)),
                    ("eager PyTorch, bf16 logits", eager)):
        errs = [float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads(torch.bfloat16, f), ref)]
        print("| %s | %s |" % (name, " | ".join("%.2f %%" % (100 * e) for e in errs)))


if __name__ == "__main__":
    main()
