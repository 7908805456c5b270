#!/usr/bin/env python3
"""The operations of bench_fused in PyTorch eager and with quack's kernels.

For each fused GEMM of the Llama-3 block (the kernels and shapes of
bench/fused/bench_fused.c) this times, in one process on one GPU:

  torch matmul   the GEMM alone (torch.matmul, bf16 out): the floor
  torch eager    the same operation as PyTorch eager runs it: the matmul,
                 then the elementwise / reduction ops as separate kernels
  quack          quack's kernels for the operation where quack has them
                 (fused GEMM epilogues such as gemm_add, gemm_gated and
                 gemm_dgated when the installed version offers them, its
                 RMSNorm forward/backward and cross-entropy kernels), with
                 PyTorch ops for the parts quack does not cover; the "quack
                 path" column says which

Timing: 3 warm-up calls (quack compiles its kernels in the first one, timed
apart), then 25 calls enqueued back to back, each between two CUDA events;
the median; no cache flush (as bench_fused).
The quack result is compared with the eager one (max |quack - eager| /
max |eager| of the operation's main output).

If quack does not import, it prints 'quack not available: <reason>' and
still runs the PyTorch rows.

  python3 quack_fused.py [--shapes 1B,8B] [--only k1,k2] [--reps 25]
                         [--budget-s 200]
"""
import argparse
import math
import sys
import time

import torch
import torch.nn.functional as F

from torch_timing import SHAPES, rnd, timed

KERNELS = ["out_proj", "gate_up", "down", "qkv", "lm_head", "down_dgrad", "gate_up_dgrad",
           "qkv_dgrad"]
EPS = 1e-5
THETA = 500000.0


def mnk(k, s):
    HQ, NQKV = s["hq"] * s["hd"], (s["hq"] + 2 * s["hkv"]) * s["hd"]
    M, D, Fd = s["M"], s["D"], s["F"]
    return {
        "out_proj": (M, D, HQ), "gate_up": (M, 2 * Fd, D), "down": (M, D, Fd),
        "qkv": (M, NQKV, D), "lm_head": (M, s["V"], D), "down_dgrad": (M, Fd, D),
        "gate_up_dgrad": (M, D, 2 * Fd), "qkv_dgrad": (M, D, NQKV),
    }[k]


# ---------------------------------------------------------------- quack

quack_reason = None
qg = qr = qce = None
try:
    import importlib

    import quack  # noqa: F401
    from quack import gemm_interface as qg
    # the modules, not the functions of the same name that quack/__init__
    # exports (`from quack import rmsnorm` gives the function)
    qr = importlib.import_module("quack.rmsnorm")
    qce = importlib.import_module("quack.cross_entropy")
    QUACK_VERSION = getattr(quack, "__version__", "?")
except Exception as e:  # any import failure: missing wheel, DSL or driver mismatch
    quack_reason = f"{type(e).__name__}: {e}".splitlines()[0][:300]
    QUACK_VERSION = None


def q_has(mod, name):
    return mod is not None and hasattr(mod, name)


# ---------------------------------------------------------------- helpers

def rel(a, b):
    a, b = a.float(), b.float()
    bad = (~torch.isfinite(a - b)).sum().item()
    if bad:
        return math.inf
    return ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item()


def silu_glu(t):
    return F.silu(t[:, 0::2]) * t[:, 1::2]


def rope_tables(s, M):
    hd, half = s["hd"], s["hd"] // 2
    pos = torch.arange(M, device="cuda") % s["seq"]
    inv = THETA ** (-2.0 * torch.arange(half, device="cuda", dtype=torch.float64) / hd)
    th = pos[:, None].double() * inv[None, :]
    return th.cos().float(), th.sin().float()  # (M, hd/2): the per-row tables


def rope_eager(t, nqk, hd, cos, sin):
    """RoPE on adjacent pairs of the Q and K columns, as separate eager ops."""
    M = t.shape[0]
    x = t[:, :nqk].float().view(M, nqk // hd, hd // 2, 2)
    c, s_ = cos[:, None, :], sin[:, None, :]
    a, b = x[..., 0], x[..., 1]
    return torch.stack((a * c - b * s_, a * s_ + b * c), dim=-1).view(M, nqk).to(t.dtype)


def dswiglu_eager(z, dy):
    g, u = z[:, 0::2].float(), z[:, 1::2].float()
    s = torch.sigmoid(g)
    d = dy.float()
    dg = d * u * s * (1 + g * (1 - s))
    du = d * g * s
    return torch.stack((dg, du), dim=-1).view(z.shape).to(z.dtype)


def rmsnorm_bwd_eager(dh, x, w, r, dres):
    D = x.shape[1]
    xh = x.float() * r[:, None]
    g = dh.float() * w.float()
    dot = (g * xh).sum(-1, keepdim=True)
    dx = (dres.float() + r[:, None] * (g - xh * dot / D)).to(x.dtype)
    dw = (dh.float() * xh).sum(0)
    return dx, dw


# ---------------------------------------------------------------- cases

def build(k, s):
    """(matmul_fn, eager_fn, quack_fn or None, quack path or reason, out_eager, out_quack)."""
    M, N, K = mnk(k, s)
    hd, nqk = s["hd"], (s["hq"] + s["hkv"]) * s["hd"]
    fwd = k in ("out_proj", "gate_up", "down", "qkv", "lm_head")
    A = rnd(M, K)
    W = rnd(N, K, scale=2.0 / math.sqrt(K)) if fwd else rnd(K, N, scale=2.0 / math.sqrt(K))
    Bmat = W.t() if fwd else W  # (K, N) as torch.matmul and quack take it
    out = {}

    def matmul():
        return A @ Bmat

    if k in ("out_proj", "down"):
        x, w = rnd(M, N), rnd(N, scale=1.5, positive=True)

        def eager():
            x1 = x + A @ Bmat
            out["eager"] = F.rms_norm(x1, (N,), w, eps=EPS)

        if qg is None:
            return matmul, eager, None, quack_reason, out
        if q_has(qg, "gemm_add") and q_has(qr, "rmsnorm_fwd"):
            def quackf():
                x1 = qg.gemm_add(A, Bmat, x, tuned=False)
                out["quack"] = qr.rmsnorm_fwd(x1, w, eps=EPS)[0]
            return matmul, eager, quackf, "gemm_add + rmsnorm_fwd", out
        return matmul, eager, None, "no gemm_add / rmsnorm_fwd in this quack", out

    if k == "gate_up":
        def eager():
            out["eager"] = silu_glu(A @ Bmat)

        if qg is None:
            return matmul, eager, None, quack_reason, out
        if q_has(qg, "gemm_gated"):
            def quackf():
                out["quack"] = qg.gemm_gated(A, Bmat, activation="swiglu", tuned=False)[1]
            return matmul, eager, quackf, "gemm_gated(swiglu)", out

        def quackf():
            out["quack"] = silu_glu(qg.gemm(A, Bmat, tuned=False))
        return matmul, eager, quackf, "gemm + torch swiglu (no gated GEMM in this quack)", out

    if k == "qkv":
        cos, sin = rope_tables(s, M)

        def eager():
            out["eager"] = rope_eager(A @ Bmat, nqk, hd, cos, sin)

        if qg is None:
            return matmul, eager, None, quack_reason, out

        def quackf():
            out["quack"] = rope_eager(qg.gemm(A, Bmat, tuned=False), nqk, hd, cos, sin)
        return matmul, eager, quackf, "gemm + torch rope (no rotary GEMM epilogue in this quack)", out

    if k == "lm_head":
        tgt = torch.randint(0, N, (M,), device="cuda")
        tgt[torch.rand(M, device="cuda") < 1 / 32] = -100

        def eager():  # logits upcast to fp32 before the loss, as Hugging Face Llama does
            out["eager"] = F.cross_entropy((A @ Bmat).float(), tgt, reduction="none")

        if qg is None:
            return matmul, eager, None, quack_reason, out
        if q_has(qce, "cross_entropy_fwd"):
            def quackf():
                out["quack"] = qce.cross_entropy_fwd(qg.gemm(A, Bmat, tuned=False), tgt)
            return matmul, eager, quackf, "gemm + cross_entropy_fwd", out

        def quackf():
            out["quack"] = qce.cross_entropy(qg.gemm(A, Bmat, tuned=False), tgt, reduction="none")
        return matmul, eager, quackf, "gemm + cross_entropy", out

    if k == "down_dgrad":
        z = rnd(M, 2 * N)

        def eager():
            out["eager"] = dswiglu_eager(z, A @ Bmat)

        if qg is None:
            return matmul, eager, None, quack_reason, out
        if q_has(qg, "gemm_dgated"):
            def quackf():
                out["quack"] = qg.gemm_dgated(A, Bmat, z, activation="swiglu", tuned=False)[0]
            return matmul, eager, quackf, "gemm_dgated(swiglu)", out

        def quackf():
            out["quack"] = dswiglu_eager(z, qg.gemm(A, Bmat, tuned=False))
        return matmul, eager, quackf, "gemm + torch dswiglu (no gated dgrad in this quack)", out

    # gate_up_dgrad, qkv_dgrad: RMSNorm backward with the residual gradient
    x, w, dres = rnd(M, N), rnd(N, scale=1.5, positive=True), rnd(M, N)
    r = torch.rsqrt(x.float().pow(2).mean(-1) + EPS)

    def eager():
        out["eager"] = rmsnorm_bwd_eager(A @ Bmat, x, w, r, dres)[0]

    if qg is None:
        return matmul, eager, None, quack_reason, out
    if q_has(qr, "rmsnorm_bwd"):
        def quackf():
            dh = qg.gemm(A, Bmat, tuned=False)
            out["quack"] = qr.rmsnorm_bwd(x, w, dh, r, dresidual_out=dres, has_residual=True)[0]
        return matmul, eager, quackf, "gemm + rmsnorm_bwd (with dresidual)", out
    return matmul, eager, None, "no rmsnorm_bwd in this quack", out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1B,8B")
    ap.add_argument("--only", default=",".join(KERNELS))
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--budget-s", type=float, default=200.0,
                    help="skip the remaining quack rows after this many seconds")
    a = ap.parse_args()
    for k in a.only.split(","):
        if k not in KERNELS:
            sys.exit(f"--only: unknown kernel {k}")
    if not torch.cuda.is_available():
        print("quack_fused: no CUDA device")
        return 77
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"quack {QUACK_VERSION if QUACK_VERSION else 'not available: ' + str(quack_reason)}")
    if quack_reason:
        print(f"quack not available: {quack_reason}")
    print(f"bf16; median of {a.reps} back-to-back calls (CUDA events, 3 warm-ups, the first "
          "timed apart)\n")
    print("| kernel | shape | M | N | K | torch matmul ms | torch eager ms | quack ms | "
          "eager/quack | quack first call s | quack path | max|quack−eager|/max|eager| |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    start = time.time()
    status = 0
    for sn in a.shapes.split(","):
        s = SHAPES[sn]
        for k in a.only.split(","):
            M, N, K = mnk(k, s)
            with torch.no_grad():
                mm, eager, quackf, path, out = build(k, s)
                t_mm, _ = timed(mm, a.reps)
                t_e, _ = timed(eager, a.reps)
                tq, first, chk = "—", "—", "—"
                if quackf is not None and time.time() - start > a.budget_s:
                    path = f"skipped (time budget of {a.budget_s:.0f} s spent): {path}"
                elif quackf is not None:
                    try:
                        t, f0 = timed(quackf, a.reps)
                        tq, first = f"{t:.3f}", f"{f0:.1f}"
                        chk = f"{rel(out['quack'], out['eager']):.1e}"
                    except Exception as e:
                        path = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                        status = 1
                ratio = f"{t_e / float(tq):.2f}" if tq != "—" else "—"
                print(f"| {k} | {sn} | {M} | {N} | {K} | {t_mm:.3f} | {t_e:.3f} | {tq} | {ratio} "
                      f"| {first} | {path} | {chk} |")
                sys.stdout.flush()
                del mm, eager, quackf, out
            torch.cuda.empty_cache()
    return status


if __name__ == "__main__":
    sys.exit(main())
