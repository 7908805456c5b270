"""PyTorch baseline for the attention benchmark: scaled_dot_product_attention
(causal, grouped-query heads) on views of a packed qkv tensor, at the
shapes of bench_attention (read from its output when given), with the
ratios against its default-variant timings. CUDA events, 5 warm-up runs,
median of 25. The SDPA backward alone is taken as (forward+backward) -
forward.

    sdpa.py [--backend default|flash] [--json OUT] [bench.md ...]

--backend flash forces SDPA's FlashAttention-2 kernels
(torch.nn.attention.sdpa_kernel(SDPBackend.FLASH_ATTENTION)); default
leaves the choice to PyTorch. Each bench.md is one bench_attention output
(its first line names the path it ran: sm90 or sm80); the shapes are those
of the first, and every file gets its ratio columns. --json OUT writes the
SDPA timings and the ratios as JSON too."""
import json
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


def coda_path(path):
    """The path bench_attention names on its first line ("path: sm80 (...)")."""
    with open(path) as f:
        for line in f:
            if "path: " in line:
                return line.split("path: ", 1)[1].split()[0]
    return "coda"


def parse_args(argv):
    backend, out, files = "default", None, []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--backend" and i + 1 < len(argv) and argv[i + 1] in ("default", "flash"):
            backend = argv[i + 1]
            i += 1
        elif a == "--json" and i + 1 < len(argv):
            out = argv[i + 1]
            i += 1
        elif a in ("-h", "--help"):
            print(__doc__)
            sys.exit(0)
        elif a.startswith("-"):
            sys.exit(f"sdpa.py: unknown option {a!r} (--backend default|flash, --json OUT)")
        else:
            files.append(a)
        i += 1
    return backend, out, files


def time_shape(B, T, Hq, Hkv, hd, *timing):
    """SDPA's forward and forward + backward ms at one shape (causal, GQA),
    under whatever backend the caller selected; timing: median_ms's
    warm-up and repetitions."""
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

    return median_ms(fwd, *timing), median_ms(fwd_bwd, *timing)


def main():
    """With bench_attention outputs: their shapes and the ratios SDPA ms /
    coda ms (above 1: coda is faster); else SHAPES."""
    backend, out, files = parse_args(sys.argv[1:])
    coda = [(coda_path(p), coda_rows(p)) for p in files]
    shapes = [r[:6] for r in coda[0][1]] if coda and coda[0][1] else SHAPES
    label = "SDPA flash" if backend == "flash" else "SDPA"
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}, "
          f"backend: {'FLASH_ATTENTION (forced)' if backend == 'flash' else 'PyTorch default'}")
    print()
    print(f"| shape | {label} fwd ms | {label} fwd+bwd ms | {label} bwd ms (difference) |")
    print("|---|---|---|---|")
    sd = {}
    for name, B, T, Hq, Hkv, hd in shapes:
        try:
            if backend == "flash":
                from torch.nn.attention import SDPBackend, sdpa_kernel
                with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
                    f, fb = time_shape(B, T, Hq, Hkv, hd)
            else:
                f, fb = time_shape(B, T, Hq, Hkv, hd)
        except RuntimeError as e:
            print(f"| {name} | error: {str(e).splitlines()[0]} | | |", flush=True)
            continue
        sd[name] = (f, fb)
        print(f"| {name} | {f:.3f} | {fb:.3f} | {fb - f:.3f} |", flush=True)
    ratios = []
    for path, rows in coda:
        print()
        print(f"Ratios {label} ms / coda ms (coda {path} defaults; above 1: coda is faster):")
        print()
        print(f"| shape | coda {path} fwd ms | {label}/coda fwd | coda bwd ms | {label}/coda bwd | "
              f"coda fwd+bwd ms | {label}/coda fwd+bwd |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            if r[0] not in sd:
                continue
            f, fb = sd[r[0]]
            cf, cb, cfb = r[6], r[7], r[8]
            print(f"| {r[0]} | {cf:.3f} | {f / cf:.2f} | {cb:.3f} | {(fb - f) / cb:.2f} | "
                  f"{cfb:.3f} | {fb / cfb:.2f} |")
            ratios.append({"shape": r[0], "coda_path": path, "coda_fwd_ms": cf, "coda_bwd_ms": cb,
                           "coda_fwd_bwd_ms": cfb, "sdpa_over_coda_fwd": f / cf,
                           "sdpa_over_coda_bwd": (fb - f) / cb, "sdpa_over_coda_fwd_bwd": fb / cfb})
    if out:
        with open(out, "w") as fo:
            json.dump({"benchmark": "sdpa.py", "gpu": torch.cuda.get_device_name(0),
                       "torch": torch.__version__, "sdpa_backend": backend,
                       "timing": "CUDA events, 5 warm-up runs, median of 25; bwd = fwd+bwd - fwd",
                       "sdpa": [{"shape": n, "B": B, "T": T, "Hq": Hq, "Hkv": Hkv, "hd": hd,
                                 "fwd_ms": sd[n][0], "bwd_ms": sd[n][1] - sd[n][0],
                                 "fwd_bwd_ms": sd[n][1]}
                                for n, B, T, Hq, Hkv, hd in shapes if n in sd],
                       "ratios": ratios}, fo, indent=1)


if __name__ == "__main__":
    main()
