"""The coda context of a tensor (one cache for all the ops), the programs
the ops run (built-in, written here or derived from a built-in's text,
retyped per dtype), and the helpers the ops' forwards and backwards share."""

import re
import threading

import torch

from .. import _core


# --------------------------------------------------------------- contexts

_lock = threading.Lock()
_contexts = {}


def context_for(t):
    """The coda context for tensor t: CPU (exact mode for float64), or CUDA
    on t's device and torch's current stream there (cached per stream)."""
    if t.is_cuda:
        if t.dtype == torch.float64:
            raise _core.CodaError(9, "float64 runs on the CPU backend only (exact mode)")
        dev = t.device.index if t.device.index is not None else torch.cuda.current_device()
        stream = torch.cuda.current_stream(dev).cuda_stream
        key = ("cuda", dev, stream)
        make = lambda: _core.Context("cuda", device=dev, stream=stream)  # noqa: E731
    else:
        prec = "f64" if t.dtype == torch.float64 else "f32"
        key = ("cpu", prec)
        make = lambda: _core.Context("cpu", precision=prec)  # noqa: E731
    with _lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = _contexts[key] = make()
        return ctx


# --------------------------------------------------------------- programs

_programs = {}

_RN_BWD = """
input s : tile bf16
input w : col bf16
input r : row f32
input dx : tile bf16
input dh : tile bf16
input dr : row f32
input inv_n : scalar f32
output ds : bf16
store ds = dx + dh * w - dr * (r * r * r) * s * inv_n
reduce dwp = colsum(dh * s)
finish dw = sum(dwp)
"""

_ROWSCALE_GEMM = """
input r : row f32
output o : bf16
store o = acc * r
"""

_ROWSCALE_MAP = """
input x : tile bf16
input r : row f32
output o : bf16
store o = x * r
"""

# The RMSNorm backward of llama_rmsnorm's (h = x * w, r): the first
# block's and the final norm's, whose x no GEMM produced.
_RMS_BWD = """
input x : tile bf16
input w : col bf16
input r : row f32
input dh : tile bf16
input dr : row f32
input inv_n : scalar f32
output dx : bf16
store dx = dh * w - dr * (r * r * r) * x * inv_n
reduce dwp = colsum(dh * x)
finish dw = sum(dwp)
"""

_DT_WORD = {torch.bfloat16: None, torch.float32: "f32", torch.float64: "f64"}
_TEXTS = {"rn_bwd": _RN_BWD, "rms_bwd": _RMS_BWD, "rowscale_gemm": _ROWSCALE_GEMM,
          "rowscale_map": _ROWSCALE_MAP}


def _qknorm_rope_pos_text():
    """qwen3_qknorm_rope with the position of each head row read from a row
    input `pos` instead of derived from the row index ((row div heads) mod
    seq, positions 0..seq-1 in every sequence): any position_ids. The rest
    of the built-in's text is taken as it is."""
    text = _core.Program.builtin("qwen3_qknorm_rope").text
    for a, b in (("input seq : scalar i32", "input pos : row i32"), ("imod(idiv(row, ht), seq)", "pos")):
        if text.count(a) != 1:
            raise _core.CodaError(13, "built-in qwen3_qknorm_rope: expected one '%s' in its text" % a)
        text = text.replace(a, b)
    return text


# programs derived from a built-in's text
_DERIVED = {"qwen3_qknorm_rope_pos": _qknorm_rope_pos_text}

# the head size the per-head segments of these built-ins are written for
# (`rowsum(...) per 128`), rewritten to the model's (as the Qwen3 plan does)
_SEG_WRITTEN = {"qwen3_qkv": 128}


def _program(name, dtype, eps=None, seg=None):
    """Built-in program `name` (or one of the texts above), retyped for dtype:
    bf16 as written; float32 / float64: every floating declaration. eps:
    the value of its parameter `eps`, the RMSNorm epsilon (the built-ins'
    default is 1e-5; Hugging Face configurations often say 1e-6). seg: the
    head size for a program with per-head segments (_SEG_WRITTEN)."""
    if dtype not in _DT_WORD:
        raise TypeError("coda ops: dtype %s not supported (bfloat16, float32, float64)" % dtype)
    key = (name, dtype, eps, seg)
    p = _programs.get(key)
    if p is None:
        if name in _TEXTS:
            p = _core.Program.parse(_TEXTS[name])
        elif name in _DERIVED:
            p = _core.Program.parse(_DERIVED[name]())
        else:
            p = _core.Program.builtin(name)
        if seg is not None and seg != _SEG_WRITTEN[name]:
            old = "per %d" % _SEG_WRITTEN[name]
            if old not in p.text:
                raise _core.CodaError(13, "program %s has no '%s' segment" % (name, old))
            p = _core.Program.parse(re.sub(r"\b%s\b" % old, "per %d" % int(seg), p.text))
        if eps is not None and float(eps) != 1e-5:
            if not (float(eps) > 0.0):
                raise ValueError("coda ops: RMSNorm eps must be > 0, got %r" % (eps,))
            if "eps" not in p.params:
                raise _core.CodaError(13, "program %s has no parameter eps (it has %s)" % (name, sorted(p.params)))
            p = p.bind(eps=float(eps))
        if _DT_WORD[dtype]:
            p = p.retyped(_DT_WORD[dtype])
        _programs[key] = p
    return p


_scalars = {}


def _scalar(value, dtype, device):
    """A 1 x 1 input tensor holding value (cached: the ops only read it)."""
    key = (float(value), dtype, device)
    t = _scalars.get(key)
    if t is None:
        if len(_scalars) > 256:
            _scalars.clear()
        t = _scalars[key] = torch.full((1, 1), float(value), dtype=dtype, device=device)
    return t


def _stat_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _check_2d(name, t):
    if t.dim() != 2:
        raise ValueError("coda ops: %s must be 2-D, got shape %s" % (name, tuple(t.shape)))


def _linear_bwd(ctx, dy, a, w):
    """The gradients of y = a w^T: da = dy w, dw = dy^T a."""
    da = torch.empty_like(a)
    ctx.gemm(dy, w, out=da)                 # dy (M x N) w (N x K)
    dw = torch.empty_like(w)
    ctx.gemm(dy, a, trans_a=True, out=dw)   # dy^T (N x M) a (M x K)
    return da, dw


def _row_scaled_linear_bwd(ctx, h, w, r, dz, zdz):
    """The gradients of z = r * (h w^T) given dz and zdz = sum z dz per row:
    dh = r * (dz w), dw = dz^T (h r), dr = zdz / r."""
    st = _stat_dtype(h.dtype)
    r = r.contiguous()
    dh = torch.empty_like(h)
    ctx.gemm_epilogue(_program("rowscale_gemm", h.dtype), dz, w, r=r, o=dh)   # r * (dz w)
    hr = torch.empty_like(h)
    ctx.map(_program("rowscale_map", h.dtype), x=h, r=r, o=hr)               # h * r
    dw = torch.empty_like(w)
    ctx.gemm(dz, hr, trans_a=True, out=dw)                                   # dz^T (h r)
    dr = (zdz / r.to(st)).to(r.dtype)
    return dh, dw, dr
