"""coda from Python: epilogue programs fused into GEMMs, on numpy arrays
(CPU backend) and torch tensors (CPU, or CUDA on torch's current stream).

    import coda, numpy as np
    ctx = coda.Context("cpu")
    p = coda.Program.parse('''
    input res : tile f32
    output x : f32
    s = acc + res
    store x = s
    reduce ss = rowsum(s * s)
    finish r = rstd(ss, 1e-5)
    ''')
    out = ctx.gemm_epilogue(p, A, W, trans_b=True, res=res)   # {"x", "ss", "r"}

The PyTorch ops (custom ops with autograd) are in coda.torch, imported on
demand; the core needs numpy only."""

from ._core import (  # noqa: F401
    ArgumentInfo,
    CodaError,
    Context,
    Program,
    builtin_program_names,
    cuda_available,
    from_bf16,
    to_bf16,
)
from ._lib import LIBRARY_PATH  # noqa: F401

__version__ = "0.2.0"
