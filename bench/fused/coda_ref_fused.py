#!/usr/bin/env python3
"""The CODA paper authors' released fused GEMMs (coda-kernels 0.2) at bench_fused's shapes.

coda-kernels (import name `coda`, built on quack-kernels 0.6.1 and the CuTe
DSL 4.6) ships linear_swiglu, gemm_rope, linear_qknorm_rope and
linear_cross_entropy. For each row this times, in one process on one GPU:

  torch matmul   the row's GEMM(s) alone (torch.matmul, bf16 out): the floor
  torch eager    the same operation as PyTorch eager runs it (backward rows:
                 torch.autograd over the eager forward)
  coda-kernels   the wheel's functions, called as its own autograd functions
                 call them (backward rows: torch.autograd.grad with
                 retain_graph over the wheel's forward)

Rows (named after bench_fused's kernels; the wheel has no fused norm-backward
or SwiGLU-backward GEMM, so its dgrad rows are a GEMM plus, where stated, a
separate elementwise kernel):

  gate_up        linear_swiglu forward: x·Wguᵀ with the SwiGLU epilogue
  down_dgrad     dy·Wd (the wheel's gemm), then dswiglu_backward
  gate_up_dgrad  dz·Wgu (the wheel's gemm; no RMSNorm backward)
  gate_up_bwd    linear_swiglu's whole backward: dswiglu, dx and dW
  qkv            gemm_rope: x·Wqkvᵀ with RoPE in the epilogue (no autograd
                 in the wheel for it)
  qkv_qknorm     linear_qknorm_rope forward: GEMM + per-head sum of squares,
                 then QK-norm + RoPE (the wheel's only autograd qkv form)
  qkv_dgrad      dz·Wqkv (the wheel's gemm)
  qkv_bwd        linear_qknorm_rope's whole backward: dx, dW, dgamma
  lm_head        linear_cross_entropy_forward: LSE + target logit, no logits
  lm_head_train  linear_cross_entropy forward as training runs it (logits
                 turned into their gradient in place)
  lm_head_bwd    linear_cross_entropy's backward: dx and dW

RoPE: adjacent pairs; the wheel rotates by -pos·freq, so it gets negated
frequencies and computes the standard rotation. Errors: max|out - ref| /
max|ref| against a torch fp32 computation on the same bf16 inputs (worst of
the row's outputs). Timing as quack_fused.py: 3 warm-ups (the first, which
autotunes and compiles, timed apart), then the median of --reps calls each
between two CUDA events; no cache flush.

The wheel imports `ipdb` and `fla.utils` where it does not need them: when
they are not installed, stand-ins are written to a temporary folder put on
sys.path (and PYTHONPATH, for the wheel's compile workers).

  python3 coda_ref_fused.py [--shapes 1B,8B] [--only k1,k2] [--reps 25]
                            [--budget-s 400] [--tune full|default]
                            [--json PATH] [--dry]

--dry lists the rows, shapes and GEMM FLOPs without torch.
--tune default: one config per GEMM epilogue (quack's default) and cuBLAS
for the wheel's plain gemm instead of its autotuning (faster start).
"""
import argparse
import atexit
import json
import math
import os
import shutil
import sys
import tempfile
import time

from torch_timing import SHAPES, rnd, timed

# name: (what the wheel runs, number of GEMMs of the row's (M, N, K))
ROWS = {
    "gate_up": ("linear_swiglu forward (gemm_swiglu)", 1),
    "down_dgrad": ("gemm + dswiglu_backward", 1),
    "gate_up_dgrad": ("gemm", 1),
    "gate_up_bwd": ("LinearSwiGLU backward: dswiglu_backward + 2 gemm", 2),
    "qkv": ("gemm_rope", 1),
    "qkv_qknorm": ("linear_qknorm_rope forward (gemm_qkv_sqsum + qknorm_rope_fwd)", 1),
    "qkv_dgrad": ("gemm", 1),
    "qkv_bwd": ("LinearQKNormRoPE backward: qknorm_rope_bwd + 2 gemm", 2),
    "lm_head": ("linear_cross_entropy_forward (gemm_lse_select_logits)", 1),
    "lm_head_train": ("linear_cross_entropy forward (gemm_lse + cross_entropy_fwd_bwd)", 1),
    "lm_head_bwd": ("LinearCrossEntropy backward: 2 gemm with alpha", 2),
}
AUTOGRAD = ("gate_up_bwd", "qkv_bwd", "lm_head_train", "lm_head_bwd")
EPS = 1e-5
THETA = 500000.0
IGNORE = -100


def mnk(k, s):
    NQKV = (s["hq"] + 2 * s["hkv"]) * s["hd"]
    M, D, Fd = s["M"], s["D"], s["F"]
    return {
        "gate_up": (M, 2 * Fd, D), "down_dgrad": (M, Fd, D), "gate_up_dgrad": (M, D, 2 * Fd),
        "gate_up_bwd": (M, D, 2 * Fd), "qkv": (M, NQKV, D), "qkv_qknorm": (M, NQKV, D),
        "qkv_dgrad": (M, D, NQKV), "qkv_bwd": (M, D, NQKV), "lm_head": (M, s["V"], D),
        "lm_head_train": (M, s["V"], D), "lm_head_bwd": (M, D, s["V"]),
    }[k]


def gflop(k, s):
    M, N, K = mnk(k, s)
    return 2.0 * M * N * K * ROWS[k][1] / 1e9


def dry(shapes, only):
    print("| kernel | shape | M | N | K | GEMMs | GFLOP | coda-kernels path |")
    print("|---|---|---|---|---|---|---|---|")
    for sn in shapes:
        for k in only:
            M, N, K = mnk(k, SHAPES[sn])
            print(f"| {k} | {sn} | {M} | {N} | {K} | {ROWS[k][1]} | {gflop(k, SHAPES[sn]):.1f} "
                  f"| {ROWS[k][0]} |")
    return 0


# ---------------------------------------------------------------- the wheel

STUB_FLA = '''import functools
import torch


def input_guard(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        args = [a.contiguous() if isinstance(a, torch.Tensor) else a for a in args]
        kwargs = {k: (v.contiguous() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        return fn(*args, **kwargs)
    return wrapper


autocast_custom_fwd = torch.amp.custom_fwd(device_type="cuda")
autocast_custom_bwd = torch.amp.custom_bwd(device_type="cuda")
'''
STUB_IPDB = "def set_trace(*args, **kwargs):\n    raise RuntimeError('ipdb stand-in')\n"


def add_stubs():
    """Stand-ins for ipdb and fla.utils where they are not installed."""
    import importlib.util
    made = []
    d = tempfile.mkdtemp(prefix="coda_ref_stubs_")
    if importlib.util.find_spec("ipdb") is None:
        os.makedirs(f"{d}/ipdb")
        with open(f"{d}/ipdb/__init__.py", "w") as f:
            f.write(STUB_IPDB)
        made.append("ipdb")
    if importlib.util.find_spec("fla") is None:
        os.makedirs(f"{d}/fla")
        open(f"{d}/fla/__init__.py", "w").close()
        with open(f"{d}/fla/utils.py", "w") as f:
            f.write(STUB_FLA)
        made.append("fla")
    if made:
        atexit.register(shutil.rmtree, d, True)
        sys.path.insert(0, d)
        pp = os.environ.get("PYTHONPATH")
        os.environ["PYTHONPATH"] = d + (":" + pp if pp else "")
    return made


def load_wheel(tune):
    """(namespace of the wheel's functions, versions, None) or (None, {}, reason)."""
    os.environ.setdefault("QUACK_CACHE_DIR", "/tmp/coda_ref_cache")
    os.environ.setdefault("QUACK_CACHE_AUTOTUNING", "1")
    os.environ.setdefault("QUACK_COMPILE_WORKERS", str(max(1, min(16, (os.cpu_count() or 2) - 1))))
    try:
        stubs = add_stubs()
        import importlib
        import importlib.metadata as md
        import importlib.util

        import coda
        if not hasattr(coda, "__version__") or importlib.util.find_spec("coda.kernels") is None:
            raise ImportError(f"'coda' at {getattr(coda, '__path__', '?')} is not coda-kernels")
        sw = importlib.import_module("coda.kernels.functional.swiglu")
        qr = importlib.import_module("coda.kernels.functional.qknorm_rope")
        ce = importlib.import_module("coda.kernels.functional.cross_entropy")
        gf = importlib.import_module("coda.core.gemm.functional")
        ef = importlib.import_module("coda.core.elementwise.functional")
        vers = {"coda-kernels": coda.__version__, "stand-ins": ",".join(stubs) or "none"}
        for p in ("quack-kernels", "nvidia-cutlass-dsl-libs-base", "cuda-bindings"):
            try:
                vers[p] = md.version(p)
            except Exception:
                vers[p] = "?"
        if tune == "default":
            restrict_tuning(gf, ef)
        ns = dict(linear_swiglu=sw.linear_swiglu, linear_qknorm_rope=qr.linear_qknorm_rope,
                  linear_cross_entropy=ce.linear_cross_entropy,
                  linear_cross_entropy_forward=ce.linear_cross_entropy_forward,
                  gemm=gf.gemm, gemm_rope=gf.gemm_rope, dswiglu_backward=ef.dswiglu_backward)
        return ns, vers, None
    except Exception as e:  # missing wheel, DSL, driver mismatch, API change
        return None, {}, f"{type(e).__name__}: {e}".splitlines()[0][:300]


def restrict_tuning(gf, ef):
    """--tune default: the GEMM epilogues on quack's default config, gemm on cuBLAS."""
    import torch
    from quack.autotuner import AutotuneConfig
    from quack.gemm_interface import default_config
    cfg = default_config(torch.device("cuda"))
    for mod in (gf, ef):
        for name in dir(mod):
            t = getattr(mod, name)
            confs = getattr(t, "configs", None)
            if not (isinstance(confs, list) and confs and hasattr(confs[0], "kwargs")):
                continue
            kw = confs[0].kwargs
            if "backend" in kw:
                t.configs = [AutotuneConfig(backend="cublas")]
            elif type(kw.get("config")).__name__ == "GemmConfig":
                t.configs = [AutotuneConfig(config=cfg)]


# ---------------------------------------------------------------- helpers

def rel(outs, refs):
    """Worst max|a - b| / max|b| over pairs of tensors."""
    worst = 0.0
    for a, b in zip(outs, refs):
        a, b = a.float(), b.float()
        if (~torch.isfinite(a - b)).any().item():
            return math.inf
        worst = max(worst, ((a - b).abs().max() / b.abs().max().clamp_min(1e-30)).item())
    return worst


def leaf(t):
    return t.detach().requires_grad_(True)


def swiglu(z):
    return F.silu(z[:, 0::2]) * z[:, 1::2]


def dswiglu_eager(z, dy):
    g, u = z[:, 0::2].float(), z[:, 1::2].float()
    sg = torch.sigmoid(g)
    d = dy.float()
    dg = d * u * sg * (1 + g * (1 - sg))
    du = d * g * sg
    return torch.stack((dg, du), dim=-1).view(z.shape).to(z.dtype)


def rope_tables(s, M):
    """Positions (int32, M), inverse frequencies (fp32, head_dim/2), cos and sin (fp32, M x hd/2)."""
    hd = s["hd"]
    pos = (torch.arange(M, device="cuda") % s["seq"]).to(torch.int32)
    inv = THETA ** (-2.0 * torch.arange(hd // 2, device="cuda", dtype=torch.float64) / hd)
    th = pos.double()[:, None] * inv[None, :]
    return pos, inv.float(), (th.cos().float(), th.sin().float())


def rope(t, cs, hd):
    """RoPE on adjacent pairs of every column of t (M, heads*hd), in t's dtype via fp32."""
    M, n = t.shape
    x = t.float().reshape(M, n // hd, hd // 2, 2)
    c, s_ = cs[0][:, None, :], cs[1][:, None, :]
    a, b = x[..., 0], x[..., 1]
    return torch.stack((a * c - b * s_, a * s_ + b * c), dim=-1).reshape(M, n).to(t.dtype)


def qknorm_rope_eager(z, gamma, cs, s):
    """(q, k, v) from the qkv GEMM's output: per-head RMSNorm with gamma, then RoPE, on q and k."""
    M, hd = z.shape[0], s["hd"]
    nq, nqk = s["hq"] * hd, (s["hq"] + s["hkv"]) * hd
    qk = z[:, :nqk].reshape(M, nqk // hd, hd)
    qk = F.rms_norm(qk.float(), (hd,), gamma.float(), eps=EPS).to(z.dtype).reshape(M, nqk)
    qk = rope(qk, cs, hd)
    return qk[:, :nq], qk[:, nq:], z[:, nqk:]


def ce_eager(x, w, tgt):
    """Mean cross-entropy over the non-ignored rows (tgt int64), logits upcast to fp32 (as
    Hugging Face Llama)."""
    return F.cross_entropy((x @ w.t()).float(), tgt, ignore_index=IGNORE)


def grads(out, inputs, g):
    return torch.autograd.grad(out, inputs, g, retain_graph=True)


# ---------------------------------------------------------------- rows

def build(k, s, ck):
    """(matmul_fn, eager_fn, ref_fn or None, outputs dict, fp32 reference outputs)."""
    M, D, Fd, hd = s["M"], s["D"], s["F"], s["hd"]
    NQKV = (s["hq"] + 2 * s["hkv"]) * hd
    nqk = (s["hq"] + s["hkv"]) * hd
    out, st = {}, {}
    f32 = lambda *ts: [t.float() for t in ts]  # noqa: E731

    if k in ("gate_up", "down_dgrad", "gate_up_dgrad", "gate_up_bwd"):
        x, w = rnd(M, D), rnd(2 * Fd, D, scale=2.0 / math.sqrt(D))
        if k == "gate_up":
            mm = lambda: x @ w.t()  # noqa: E731

            def eager():
                out["eager"] = [swiglu(x @ w.t())]

            def ref():
                out["ref"] = [ck["linear_swiglu"](x, w)]
            xf, wf = f32(x, w)
            return mm, eager, ref, out, [swiglu(xf @ wf.t())]
        if k == "down_dgrad":
            dy, wd = rnd(M, D), rnd(D, Fd, scale=2.0 / math.sqrt(D))
            z = rnd(M, 2 * Fd)
            mm = lambda: dy @ wd  # noqa: E731

            def eager():
                out["eager"] = [dswiglu_eager(z, dy @ wd)]

            def ref():
                out["ref"] = [ck["dswiglu_backward"](z, ck["gemm"](dy, wd))]
            dyf, wdf = f32(dy, wd)
            return mm, eager, ref, out, [dswiglu_eager(z.float(), dyf @ wdf).float()]
        if k == "gate_up_dgrad":
            dz = rnd(M, 2 * Fd)
            mm = lambda: dz @ w  # noqa: E731

            def eager():
                out["eager"] = [dz @ w]

            def ref():
                out["ref"] = [ck["gemm"](dz, w)]
            return mm, eager, ref, out, [dz.float() @ w.float()]
        # gate_up_bwd
        dy = rnd(M, Fd)
        gz = dswiglu_eager(x @ w.t(), dy)
        mm = lambda: (gz @ w, gz.t() @ x)  # noqa: E731
        xl, wl = leaf(x), leaf(w)
        y_e = swiglu(xl @ wl.t())

        def eager():
            out["eager"] = grads(y_e, (xl, wl), dy)

        def ref():  # the wheel's forward on the first call only
            if not st:
                st["in"] = (leaf(x), leaf(w))
                st["y"] = ck["linear_swiglu"](*st["in"])
            out["ref"] = grads(st["y"], st["in"], dy)
        xf, wf = leaf(x.float()), leaf(w.float())
        gf = torch.autograd.grad(swiglu(xf @ wf.t()), (xf, wf), dy.float())
        return mm, eager, ref, out, list(gf)

    if k in ("qkv", "qkv_qknorm", "qkv_dgrad", "qkv_bwd"):
        x, w = rnd(M, D), rnd(NQKV, D, scale=2.0 / math.sqrt(D))
        pos, inv, cs = rope_tables(s, M)
        if k == "qkv":
            # per column: the pair's frequency on q and k, 0 on v; negated (see the header)
            freq = torch.zeros(NQKV, device="cuda")
            freq[:nqk] = -inv.repeat_interleave(2).repeat(nqk // hd)
            mm = lambda: x @ w.t()  # noqa: E731

            def qkv_eager(t):
                return torch.cat((rope(t[:, :nqk], cs, hd), t[:, nqk:]), dim=1)

            def eager():
                out["eager"] = [qkv_eager(x @ w.t())]

            def ref():  # int32 positions as linear_qknorm_rope takes them; else fp32
                try:
                    out["ref"] = [ck["gemm_rope"](x, w.t(), st.get("pos", pos), freq)]
                except Exception:
                    if "pos" in st:
                        raise
                    st["pos"], out["note"] = pos.float(), "fp32 positions"
                    out["ref"] = [ck["gemm_rope"](x, w.t(), st["pos"], freq)]
            xf, wf = f32(x, w)
            return mm, eager, ref, out, [qkv_eager(xf @ wf.t())]
        gamma = rnd(hd, scale=1.5, positive=True)
        freq = -inv.repeat(nqk // hd)  # per pair of the q and k columns
        args = (pos, freq, s["hq"], s["hkv"], hd, EPS)
        if k == "qkv_qknorm":
            mm = lambda: x @ w.t()  # noqa: E731

            def eager():
                out["eager"] = list(qknorm_rope_eager(x @ w.t(), gamma, cs, s))

            def ref():
                out["ref"] = list(ck["linear_qknorm_rope"](x, w, gamma, *args))
            xf, wf = f32(x, w)
            return mm, eager, ref, out, list(qknorm_rope_eager(xf @ wf.t(), gamma.float(), cs, s))
        if k == "qkv_dgrad":
            dz = rnd(M, NQKV)
            mm = lambda: dz @ w  # noqa: E731

            def eager():
                out["eager"] = [dz @ w]

            def ref():
                out["ref"] = [ck["gemm"](dz, w)]
            return mm, eager, ref, out, [dz.float() @ w.float()]
        # qkv_bwd
        nq = s["hq"] * hd
        dq, dk, dv = rnd(M, nq), rnd(M, nqk - nq), rnd(M, NQKV - nqk)
        dz = torch.cat((dq, dk, dv), dim=1)
        mm = lambda: (dz @ w, dz.t() @ x)  # noqa: E731
        xl, wl, gl = leaf(x), leaf(w), leaf(gamma)
        y_e = qknorm_rope_eager(xl @ wl.t(), gl, cs, s)

        def eager():
            out["eager"] = grads(y_e, (xl, wl, gl), (dq, dk, dv))

        def ref():
            if not st:
                st["in"] = (leaf(x), leaf(w), leaf(gamma))
                st["y"] = ck["linear_qknorm_rope"](*st["in"], *args)
            out["ref"] = grads(st["y"], st["in"], (dq, dk, dv))
        xf, wf, gmf = leaf(x.float()), leaf(w.float()), leaf(gamma.float())
        yf = qknorm_rope_eager(xf @ wf.t(), gmf, cs, s)
        gf = torch.autograd.grad(yf, (xf, wf, gmf), (dq.float(), dk.float(), dv.float()))
        return mm, eager, ref, out, list(gf)

    # lm_head, lm_head_train, lm_head_bwd
    V = s["V"]
    x, w = rnd(M, D), rnd(V, D, scale=2.0 / math.sqrt(D))
    tgt = torch.randint(0, V, (M,), device="cuda", dtype=torch.int32)
    tgt[torch.rand(M, device="cuda") < 1 / 32] = IGNORE
    t64 = tgt.long()
    xf, wf = leaf(x.float()), leaf(w.float())
    lf = ce_eager(xf, wf, t64)
    if k == "lm_head":
        mm = lambda: x @ w.t()  # noqa: E731

        def eager():
            out["eager"] = [ce_eager(x, w, t64)]

        def ref():
            out["ref"] = [ck["linear_cross_entropy_forward"](x, w, tgt, IGNORE, "mean")]
        return mm, eager, ref, out, [lf.detach()]
    if k == "lm_head_train":
        mm = lambda: x @ w.t()  # noqa: E731
        xl, wl = leaf(x), leaf(w)

        def eager():
            out["eager"] = [ce_eager(xl, wl, t64)]

        def ref():
            out["ref"] = [ck["linear_cross_entropy"](xr, wr, tgt, IGNORE, "mean")]
        xr, wr = leaf(x), leaf(w)
        return mm, eager, ref, out, [lf.detach()]
    # lm_head_bwd
    dl = torch.randn(M, V, device="cuda").to(torch.bfloat16)
    mm = lambda: (dl @ w, dl.t() @ x)  # noqa: E731
    xl, wl = leaf(x), leaf(w)
    l_e = ce_eager(xl, wl, t64)
    one = torch.ones((), device="cuda")

    def eager():
        out["eager"] = grads(l_e, (xl, wl), one)

    def ref():
        if not st:
            st["in"] = (leaf(x), leaf(w))
            st["y"] = ck["linear_cross_entropy"](*st["in"], tgt, IGNORE, "mean")
        out["ref"] = grads(st["y"], st["in"], one)
    gf = torch.autograd.grad(lf, (xf, wf))
    return mm, eager, ref, out, list(gf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shapes", default="1B,8B")
    ap.add_argument("--only", default=",".join(ROWS))
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--budget-s", type=float, default=400.0,
                    help="skip the remaining coda-kernels rows after this many seconds")
    ap.add_argument("--tune", choices=("full", "default"), default="full")
    ap.add_argument("--json", default=None, help="also write the rows to this JSON file")
    ap.add_argument("--dry", action="store_true", help="list rows, shapes and FLOPs; no torch")
    a = ap.parse_args()
    shapes, only = a.shapes.split(","), a.only.split(",")
    for sn in shapes:
        if sn not in SHAPES:
            sys.exit(f"--shapes: unknown shape {sn}")
    for k in only:
        if k not in ROWS:
            sys.exit(f"--only: unknown row {k} (one of {', '.join(ROWS)})")
    if a.dry:
        return dry(shapes, only)

    global torch, F
    import torch
    import torch.nn.functional as F
    if not torch.cuda.is_available():
        print("coda_ref_fused: no CUDA device")
        return 77
    ck, vers, reason = load_wheel(a.tune)
    ver = ", ".join(f"{p} {v}" for p, v in vers.items())
    print(f"device: {torch.cuda.get_device_name()}; torch {torch.__version__}; "
          f"{ver if ck else 'coda-kernels not available: ' + str(reason)}")
    if reason:
        print(f"coda-kernels not available: {reason}")
    print(f"bf16; median of {a.reps} back-to-back calls (CUDA events, 3 warm-ups, the first "
          f"timed apart); autotuning: {a.tune}\n")
    print("| kernel | shape | M | N | K | torch matmul ms | torch eager ms | coda-kernels ms | "
          "eager/coda-kernels | matmul/coda-kernels | coda-kernels TFLOP/s | "
          "coda-kernels first call s | coda-kernels path | coda-kernels err | eager err |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    sys.stdout.flush()
    start = time.time()
    status = 0
    rows = []
    for sn in shapes:
        s = SHAPES[sn]
        for k in only:
            M, N, K = mnk(k, s)
            row = dict(kernel=k, shape=sn, M=M, N=N, K=K, gflop=gflop(k, s), path=ROWS[k][0],
                       matmul_ms=None, eager_ms=None, ref_ms=None, ref_first_s=None,
                       ref_err=None, eager_err=None)
            try:
                grad_mode = torch.enable_grad() if k in AUTOGRAD else torch.no_grad()
                with grad_mode:
                    mm, eager, ref, out, f32ref = build(k, s, ck)
                    row["matmul_ms"], _ = timed(mm, a.reps)
                    row["eager_ms"], _ = timed(eager, a.reps)
                    row["eager_err"] = rel(out["eager"], f32ref)
                    if ck is None:
                        row["path"] = f"coda-kernels not available: {reason}"
                    elif time.time() - start > a.budget_s:
                        row["path"] = f"skipped (time budget of {a.budget_s:.0f} s spent): {row['path']}"
                    else:
                        try:
                            row["ref_ms"], row["ref_first_s"] = timed(ref, a.reps)
                            row["ref_err"] = rel(out["ref"], f32ref)
                            if "note" in out:
                                row["path"] += f" ({out['note']})"
                        except Exception as e:
                            row["path"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"
                            status = 1
                    del mm, eager, ref, out, f32ref
            except torch.cuda.OutOfMemoryError as e:
                row["path"] = f"torch rows failed: {str(e).splitlines()[0][:120]}"
                status = 1
            torch.cuda.empty_cache()
            rows.append(row)
            f = lambda v, p=3: "—" if v is None else f"{v:.{p}f}"  # noqa: E731
            e = lambda v: "—" if v is None else f"{v:.1e}"  # noqa: E731
            r = row["ref_ms"]
            print(f"| {k} | {sn} | {M} | {N} | {K} | {f(row['matmul_ms'])} | {f(row['eager_ms'])} "
                  f"| {f(r)} | {f(row['eager_ms'] / r, 2) if r else '—'} "
                  f"| {f(row['matmul_ms'] / r, 2) if r else '—'} "
                  f"| {f(row['gflop'] / r, 0) if r else '—'} | {f(row['ref_first_s'], 1)} "
                  f"| {row['path']} | {e(row['ref_err'])} | {e(row['eager_err'])} |")
            sys.stdout.flush()
            if a.json:  # after every row: a run cut short keeps what it measured
                with open(a.json, "w") as fj:
                    json.dump(dict(device=torch.cuda.get_device_name(), torch=torch.__version__,
                                   versions=vers, unavailable=reason, reps=a.reps, tune=a.tune,
                                   rows=rows), fj, indent=1)
    return status


if __name__ == "__main__":
    sys.exit(main())
