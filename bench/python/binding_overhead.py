"""Host time the Python binding adds to one coda call, on the CPU backend:
a GEMM + epilogue (llama_swiglu: a row input, two outputs) and a map
(llama_rmsnorm: a tile and a column input, an output, a partial and a
finisher) at a tiny shape, through Context.gemm_epilogue / Context.map
with numpy arrays and with torch tensors, and through the coda.torch op,
against the same C calls made directly through ctypes with the arguments
bound once (the library's own time). Medians of R repeats of N calls.

    CODA_LIBRARY=build/libcoda.so.0 PYTHONPATH=python python3 bench/python/binding_overhead.py
"""

import ctypes
import statistics
import sys
import time

import numpy as np

import coda
from coda import _core, _lib
from coda._lib import lib

N, R = 2000, 7


def per_call_us(f):
    f()
    ts = []
    for _ in range(R):
        t = time.perf_counter()
        for _ in range(N):
            f()
        ts.append((time.perf_counter() - t) / N * 1e6)
    return statistics.median(ts)


def direct(ctx, program, A, B, binds, M, N_, K, gemm):
    """The C calls alone: arguments bound once, then the call (and the
    finishers) N times."""
    ta = _core._bind(A, 3, "A", False, 0) if gemm else None
    tb = _core._bind(B, 3, "B", False, 0) if gemm else None
    args = ctypes.c_void_p()
    lib.coda_args_create(ctx._h, ctypes.byref(args))
    keep = []
    for name, x, kind, w in binds:
        b = _core._bind(x, kind, name, w, 0)
        keep.append(b)
        assert lib.coda_args_set(args, name.encode(), ctypes.byref(b.tensor)) == 0
    tl = ctx._tiling_for(program, M, N_, K)
    t = _lib.Tiling(*tl)
    fins = [a.name.encode() for a in program.args if a.kind == "finish"]
    if gemm:
        def f():
            lib.coda_gemm_epilogue(ctx._h, program._h, 0, ctypes.byref(ta.tensor), 1, ctypes.byref(tb.tensor),
                                   args, t)
            for n in fins:
                lib.coda_finish(ctx._h, program._h, n, args, M, N_, t)
    else:
        def f():
            lib.coda_map(ctx._h, program._h, M, N_, args, t)
            for n in fins:
                lib.coda_finish(ctx._h, program._h, n, args, M, N_, t)
    us = per_call_us(f)
    lib.coda_args_destroy(args)
    return us


def main():
    rows = []
    ctx = coda.Context("cpu")
    M, D, F = 8, 64, 64
    rng = np.random.default_rng(0)
    h = coda.to_bf16(rng.standard_normal((M, D)).astype(np.float32))
    w = coda.to_bf16(rng.standard_normal((2 * F, D)).astype(np.float32))
    r = rng.random(M).astype(np.float32)
    z, y = np.zeros((M, 2 * F), np.uint16), np.zeros((M, F), np.uint16)
    sw = coda.Program.builtin("llama_swiglu")
    rows.append(("gemm_epilogue llama_swiglu, numpy", per_call_us(
        lambda: ctx.gemm_epilogue(sw, h, w, trans_b=True, r=r, z=z, y=y)),
        direct(ctx, sw, h, w, [("r", r, 0, False), ("z", z, 3, True), ("y", y, 3, True)], M, 2 * F, D, True)))
    x = coda.to_bf16(rng.standard_normal((M, D)).astype(np.float32))
    g = coda.to_bf16(rng.standard_normal(D).astype(np.float32))
    hn, rr = np.zeros((M, D), np.uint16), np.zeros(M, np.float32)
    rn = coda.Program.builtin("llama_rmsnorm")
    ss = np.zeros(_core.Program.arg_shape(rn, "ss", M, D, ctx._tiling_for(rn, M, D, 1)), np.float32)
    rows.append(("map llama_rmsnorm, numpy", per_call_us(
        lambda: ctx.map(rn, M, D, x=x, w=g, h=hn, r=rr)),
        direct(ctx, rn, None, None, [("x", x, 3, False), ("w", g, 1, False), ("h", hn, 3, True),
                                     ("ss", ss, 3, True), ("r", rr, 0, True)], M, D, 1, False)))
    try:
        import torch
        import coda.torch as ct
    except ImportError:
        torch = None
    if torch is not None:
        ht, wt = torch.randn(M, D).bfloat16(), torch.randn(2 * F, D).bfloat16()
        rt = torch.rand(M)
        zt, yt = torch.empty(M, 2 * F).bfloat16(), torch.empty(M, F).bfloat16()
        tctx = ct.context_for(ht)
        rows.append(("gemm_epilogue llama_swiglu, torch", per_call_us(
            lambda: tctx.gemm_epilogue(sw, ht, wt, trans_b=True, r=rt, z=zt, y=yt)), None))
        rows.append(("coda.torch.llama_swiglu (custom op)", per_call_us(lambda: ct.llama_swiglu(ht, wt, rt)),
                     None))
        xt, gt = torch.randn(M, D).bfloat16(), torch.randn(D).bfloat16()
        rows.append(("coda.torch.llama_rmsnorm (custom op)", per_call_us(lambda: ct.llama_rmsnorm(xt, gt)), None))
    print("Python binding overhead, CPU backend, M %d, D %d, F %d; median of %d x %d calls; python %s, numpy %s%s"
          % (M, D, F, R, N, sys.version.split()[0], np.__version__,
             ", torch %s" % torch.__version__ if torch is not None else ""))
    print("\n| call | µs a call | C calls alone µs | binding µs |\n| --- | ---: | ---: | ---: |")
    for name, us, c in rows:
        print("| %s | %.1f | %s | %s |" % (name, us, "%.1f" % c if c else "", "%.1f" % (us - c) if c else ""))


if __name__ == "__main__":
    main()
