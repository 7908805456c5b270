"""PyTorch baseline for the attention benchmark: scaled_dot_product_attention
(causal, grouped-query heads) on views of a packed qkv tensor, at the
shapes of bench_attention (read from its output when given), with the
ratios against its default-variant timings. CUDA events, 5 warm-up runs,
median of 25. The SDPA backward alone is taken as (forward+backward) -
forward."""
import sys

import torch
import torch.nn.functional as F

SHAPES = [
    ("d512 8h hd64 B16 T1024", 16, 1024, 8, 8, 64),
    ("d2048 32q/8kv hd64 B4 T2048", 4, 2048, 32, 8, 64),
    ("d4096 32q/8kv hd128 B2 T4096", 2, 4096, 32, 8, 128),
]


def median_ms(fn, warm=5, reps=25):
    times = []
    for r in range(warm + reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        if r >= warm:
            times.append(a.elapsed_time(b))
    times.sort()
    return times[len(times) // 2]


def coda_rows(path):
    """The CODA|name|B|T|Hq|Hkv|hd|fwd|bwd|fwd+bwd lines of bench_attention."""
    rows = []
    with open(path) as f:
        for line in f:
            if line.startswith("CODA|"):
                v = line.strip().split("|")[1:]
                rows.append((v[0], *map(int, v[1:6]), *map(float, v[6:9])))
    return rows


def main():
    """sdpa.py [bench.md]: with the bench_attention output, its shapes and
    the ratios SDPA ms / coda ms (above 1: coda is faster); else SHAPES."""
    coda = coda_rows(sys.argv[1]) if len(sys.argv) > 1 else []
    shapes = [r[:6] for r in coda] or SHAPES
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    print()
    print("| shape | sdpa fwd ms | sdpa fwd+bwd ms | sdpa bwd ms (difference) |")
    print("|---|---|---|---|")
    sd = []
    for name, B, T, Hq, Hkv, hd in shapes:
        qkv = (torch.rand(B, T, Hq + 2 * Hkv, hd, device="cuda") * 3 - 1.5).to(torch.bfloat16)
        qkv.requires_grad_(True)
        dout = (torch.rand(B, Hq, T, hd, device="cuda") * 2 - 1).to(torch.bfloat16)

        def split():
            q = qkv[:, :, :Hq].transpose(1, 2)
            k = qkv[:, :, Hq:Hq + Hkv].transpose(1, 2)
            v = qkv[:, :, Hq + Hkv:].transpose(1, 2)
            return q, k, v

        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(*split(), is_causal=True, enable_gqa=True)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(*split(), is_causal=True, enable_gqa=True)
            o.backward(dout)
            qkv.grad = None

        f, fb = median_ms(fwd), median_ms(fwd_bwd)
        sd.append((f, fb))
        print(f"| {name} | {f:.3f} | {fb:.3f} | {fb - f:.3f} |", flush=True)
    if coda:
        print()
        print("Ratios SDPA ms / coda ms (coda defaults; above 1: coda is faster):")
        print()
        print("| shape | coda fwd ms | SDPA/coda fwd | coda bwd ms | SDPA/coda bwd | "
              "coda fwd+bwd ms | SDPA/coda fwd+bwd |")
        print("|---|---|---|---|---|---|---|")
        for r, (f, fb) in zip(coda, sd):
            cf, cb, cfb = r[6], r[7], r[8]
            print(f"| {r[0]} | {cf:.3f} | {f / cf:.2f} | {cb:.3f} | {(fb - f) / cb:.2f} | "
                  f"{cfb:.3f} | {fb / cfb:.2f} |")


if __name__ == "__main__":
    main()
