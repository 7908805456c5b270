"""Contexts, programs and runs: the core API over libcoda (ctypes).

Tensors are numpy arrays (CPU backend) or torch tensors (CPU tensors on
the CPU backend, CUDA tensors on the CUDA backend), viewed without copies
where they are row-major with unit column stride; inputs that are not are
copied to a contiguous array first, outputs that are not are refused.
bf16 in numpy: numpy has no bfloat16, so a uint16 array holds bf16 bits
(see to_bf16 / from_bf16)."""

import ctypes
import re
import sys

import numpy as np

from . import _lib
from ._lib import lib

# ---------------------------------------------------------------- enums

STATUS_NAMES = {
    0: "CODA_OK",
    1: "CODA_ERR_INVALID_ARGUMENT",
    2: "CODA_ERR_PARSE",
    3: "CODA_ERR_TYPE",
    4: "CODA_ERR_SHAPE",
    5: "CODA_ERR_DTYPE",
    6: "CODA_ERR_LAYOUT",
    7: "CODA_ERR_ALIAS",
    8: "CODA_ERR_OUT_OF_MEMORY",
    9: "CODA_ERR_NOT_SUPPORTED",
    10: "CODA_ERR_BACKEND",
    11: "CODA_ERR_IO",
    12: "CODA_ERR_OVERFLOW",
    13: "CODA_ERR_INTERNAL",
}

BF16, F16, F32, F64, I32 = 0, 1, 2, 3, 4
DTYPE_NAMES = {BF16: "bf16", F16: "f16", F32: "f32", F64: "f64", I32: "i32"}
_DTYPE_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
# how a 1-D array binds, by argument kind: 0 as a row vector (M, 1), 1 as
# (1, N), 3 as given (finish: by its shape, Context._kind_code)
_STATIC_KIND_CODE = {"row": 0, "rowsum": 0, "rowmax": 0, "rowlse": 0, "col": 1}

KIND_NAMES = {0: "row", 1: "col", 2: "scalar", 3: "tile", 4: "output", 5: "partial", 6: "rowsum", 7: "rowmax",
              8: "rowlse"}
WIDTH_NAMES = {0: "full", 1: "x2", 2: "half"}

# numpy dtype of each coda dtype (bf16 as its bits)
_NP_OF = {BF16: np.uint16, F16: np.float16, F32: np.float32, F64: np.float64, I32: np.int32}
_CODA_OF_NP = {np.dtype(np.uint16): BF16, np.dtype(np.float16): F16, np.dtype(np.float32): F32,
               np.dtype(np.float64): F64, np.dtype(np.int32): I32}


class CodaError(RuntimeError):
    """A failed coda call: `status` (the coda_status value), `status_name`
    (e.g. "CODA_ERR_SHAPE") and `message` (coda_last_error)."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = STATUS_NAMES.get(self.status, "CODA_ERR_%d" % self.status)
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


def _check(ctx_handle, status):
    if status != 0:
        msg = lib.coda_last_error(ctx_handle) if ctx_handle else None
        msg = msg.decode("utf-8", "replace") if msg else lib.coda_status_string(status).decode()
        raise CodaError(status, msg)


def _attn_mask(window, scale):
    """None for the plain causal mask (the unmasked calls), else an AttnMask.
    Checked here only what the C side cannot see: a window that ctypes would
    wrap to another int, a scale that is no number (the C side refuses a
    negative window and a negative or non-finite scale, with its message)."""
    if isinstance(window, bool) or not isinstance(window, (int, np.integer)):
        raise TypeError("attention: window must be an int, got %r" % (window,))
    if not -2**31 <= int(window) < 2**31:
        raise CodaError(4, "attention: window %d does not fit a C int" % window)
    if isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError("attention: scale must be a number, got %r" % (scale,))
    if window == 0 and scale == 0:
        return None
    return _lib.new_attn_mask(float(scale), int(window))


def cuda_available():
    """True if libcoda was built with CUDA and a usable GPU is present."""
    return bool(lib.coda_cuda_available())


def builtin_program_names():
    """Names of the built-in programs (programs/*.coda)."""
    out, i = [], 0
    while True:
        n = lib.coda_builtin_program_name(i)
        if not n:
            return out
        out.append(n.decode())
        i += 1


# ------------------------------------------------------------------ bf16

def to_bf16(a):
    """float array -> uint16 array of bf16 bits (round to nearest even)."""
    f = np.ascontiguousarray(a, dtype=np.float32)
    u = f.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    nan = np.isnan(f)
    out = rounded.astype(np.uint16)
    out[nan] = 0x7FC0
    return out


def from_bf16(a):
    """uint16 array of bf16 bits -> float32 array."""
    u = np.ascontiguousarray(a, dtype=np.uint16).astype(np.uint32) << 16
    return u.view(np.float32)


# ------------------------------------------------------------ tensor views

def _torch():
    return sys.modules.get("torch")


_torch_tensor_type = None


def _is_torch(x):
    # a torch tensor exists only once torch was imported: the numpy path never imports it
    global _torch_tensor_type
    if _torch_tensor_type is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        _torch_tensor_type = torch.Tensor
    return isinstance(x, _torch_tensor_type)


_torch_dtype_map = None


def _torch_dtypes():
    global _torch_dtype_map
    if _torch_dtype_map is None:
        torch = _torch()
        _torch_dtype_map = {torch.bfloat16: BF16, torch.float16: F16, torch.float32: F32, torch.float64: F64,
                            torch.int32: I32}
    return _torch_dtype_map


def _view_2d(rows, cols, stride0, stride1, kind):
    """rows, cols, ld of a row-major view, or None if the strides do not fit."""
    if cols == 1 and rows >= 1:
        stride1 = 1  # a column vector: the column stride is irrelevant
    if rows == 1:
        stride0 = max(cols, 1)
    if stride1 != 1 or stride0 < cols:
        return None
    return rows, cols, stride0


def _shape_of(x):
    return tuple(x.shape)


class _Bound:
    """A coda_tensor view of one array plus what keeps its memory alive."""

    def __init__(self, tensor, owner):
        self.tensor = tensor
        self.owner = owner


def _as_2d_shape(shape, kind):
    if len(shape) == 2:
        return shape
    if len(shape) == 0:
        return (1, 1)
    if len(shape) == 1:
        n = shape[0]
        if kind in (0, 6):  # row, rowsum: one per GEMM row
            return (n, 1)
        return (1, n)
    raise ValueError("coda: tensors are 2-D views (or vectors / scalars), got shape %s" % (shape,))


def _bind(x, kind, name, writable, backend):
    """numpy array / torch tensor -> _Bound. Inputs that are not row-major
    views are copied; outputs must be."""
    if _is_torch(x):
        dt = (_torch_dtype_map or _torch_dtypes()).get(x.dtype)
        if dt is None:
            raise TypeError("coda: argument '%s': torch dtype %s not supported" % (name, x.dtype))
        if x.is_cuda != (backend == 1):
            raise ValueError("coda: argument '%s' is a %s tensor, the context is %s" % (
                name, x.device, "CUDA" if backend == 1 else "CPU"))
        strides = x.stride()
        nd = len(strides)
        if nd == 2:
            shape = x.shape
            s0, s1 = strides
        else:
            shape = _as_2d_shape(tuple(x.shape), kind)
            if nd == 1:
                s0, s1 = (strides[0], 1) if shape[1] == 1 else (shape[1], strides[0])
            else:
                s0, s1 = 1, 1
        v = _view_2d(shape[0], shape[1], s0, s1, kind)
        if v is None:
            if writable:
                raise ValueError("coda: output '%s' must be row-major with unit column stride" % name)
            x = x.contiguous()
            v = (shape[0], shape[1], shape[1] if shape[1] > 0 else 1)
        rows, cols, ld = v
        return _Bound(_lib.Tensor(x.data_ptr() or None, dt, rows, cols, max(ld, 1)), x)
    if backend == 1:
        raise ValueError("coda: argument '%s': a CUDA context takes torch CUDA tensors" % name)
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    dt = _CODA_OF_NP.get(x.dtype)
    if dt is None:
        raise TypeError("coda: argument '%s': numpy dtype %s not supported (uint16 holds bf16, "
                        "float16, float32, float64, int32)" % (name, x.dtype))
    shape = _as_2d_shape(x.shape, kind)
    item = x.itemsize
    if x.ndim == 2:
        s0, s1 = x.strides
    elif x.ndim == 1:
        s0, s1 = (x.strides[0], item) if shape[1] == 1 else (shape[1] * item, x.strides[0])
    else:
        s0, s1 = item, item
    ok = s0 % item == 0 and s1 % item == 0 and s0 >= 0
    v = _view_2d(shape[0], shape[1], s0 // item, s1 // item, kind) if ok else None
    if writable and not x.flags.writeable:
        raise ValueError("coda: output '%s' is read-only" % name)
    if v is None:
        if writable:
            raise ValueError("coda: output '%s' must be row-major with unit column stride" % name)
        x = np.ascontiguousarray(x)
        v = (shape[0], shape[1], shape[1] if shape[1] > 0 else 1)
    rows, cols, ld = v
    ptr = x.ctypes.data if x.size else None
    return _Bound(_lib.Tensor(ptr, dt, rows, cols, max(ld, 1)), x)


# ---------------------------------------------------------------- programs

class ArgumentInfo:
    """One named argument of a program.

    name; kind: "row", "col", "scalar", "tile", "rowsum", "rowmax", "rowlse" (inputs), "output",
    "partial" (reduction partials), "finish" (a finisher's result, a
    vector); partials and finisher results are fp32, or fp64 in exact mode,
    whatever `dtype` says; dtype ("bf16", "f16", "f32", "f64", "i32"); width
    ("full", "x2", "half"); accumulate (outputs); shape: the shape rule in
    words (use Program.arg_shape for numbers)."""

    _RULES = {
        "row": "(M, 1)", "col": "(1, N)", "scalar": "(1, 1)", "rowsum": "(M, T), any T >= 1",
        "rowmax": "(M, T), any T >= 1", "rowlse": "(M, T), any T >= 1",
        "partial": "as the tiling gives (docs/language.md)",
    }

    def __init__(self, name, kind, dtype, width, accumulate):
        self.name, self.kind, self.dtype, self.width, self.accumulate = name, kind, dtype, width, accumulate
        if kind in ("tile", "output"):
            self.shape = {"full": "(M, N)", "x2": "(M, 2N)", "half": "(M, N/2)"}[width]
        elif kind == "finish":
            self.shape = ("(M, 1) for row partials, (M, ceil(N/S)) for a segment S, (1, N) for colsum, "
                          "(1, 1) for a total")
        else:
            self.shape = self._RULES[kind]

    @property
    def is_input(self):
        return self.kind in ("row", "col", "scalar", "tile", "rowsum", "rowmax", "rowlse")

    def __repr__(self):
        extra = ", accumulate" if self.accumulate else ""
        return "ArgumentInfo(%s: %s %s%s%s, shape %s)" % (
            self.name, self.kind, self.dtype, "" if self.width == "full" else " " + self.width, extra,
            self.shape)


_default_ctx = None


def _parse_ctx():
    """The context that parses programs given without one: an exact-mode
    CPU context, which accepts every declaration (f64 included); a program
    is not tied to the context that parsed it."""
    global _default_ctx
    if _default_ctx is None:
        _default_ctx = Context("cpu", precision="f64")
    return _default_ctx


_FLOAT_WORD = re.compile(r"(?<![A-Za-z0-9_])(bf16|f16|f32)(?![A-Za-z0-9_])")


class Program:
    """An epilogue program (docs/language.md). Build with Program.parse(text)
    or Program.builtin(name); a program is not tied to a context."""

    def __init__(self, handle):
        self._h = ctypes.c_void_p(handle)
        self._args = None
        self._names = None
        self._plan = None
        self._shapes = {}   # (name, M, N, tiling) -> arg_shape, for the per-call paths

    @classmethod
    def parse(cls, text, context=None):
        """Parses and validates program text; CodaError (CODA_ERR_PARSE or
        CODA_ERR_TYPE, "line L, column C: ...") if it is not a program."""
        ctx = context or _parse_ctx()
        h = ctypes.c_void_p()
        _check(ctx._h, lib.coda_program_parse(ctx._h, text.encode(), ctypes.byref(h)))
        return cls(h.value)

    @classmethod
    def builtin(cls, name, context=None, dtype=None):
        """A built-in program (programs/NAME.coda). dtype ("f32", "f64"):
        every floating declaration (bf16, f16, f32) retyped to it, as the
        plans do in exact mode (f64) -- see retyped()."""
        ctx = context or _parse_ctx()
        h = ctypes.c_void_p()
        _check(ctx._h, lib.coda_program_builtin(ctx._h, name.encode(), ctypes.byref(h)))
        p = cls(h.value)
        return p.retyped(dtype, ctx) if dtype else p

    def retyped(self, dtype, context=None):
        """The same program with every floating declaration (bf16, f16, f32)
        replaced by dtype (e.g. "f64" for an exact-mode context)."""
        if isinstance(dtype, int):
            dtype = DTYPE_NAMES[dtype]
        return Program.parse(_FLOAT_WORD.sub(dtype, self.text), context)

    def __del__(self):
        h = getattr(self, "_h", None)
        if h and h.value:
            lib.coda_program_destroy(h)
            self._h = None

    @property
    def text(self):
        """Canonical text (parses back to the same program)."""
        return lib.coda_program_text(self._h).decode()

    @property
    def ir(self):
        """Human-readable dump of the IR."""
        return lib.coda_program_ir(self._h).decode()

    @property
    def num_passes(self):
        """1, or the number of passes of a program that reads a finished
        statistic or has a total (each run runs them all, docs/language.md
        "Whole operators in one file")."""
        return lib.coda_program_num_passes(self._h)

    @property
    def passes(self):
        """The printable pass list ("" for a program of one pass)."""
        return lib.coda_program_passes_text(self._h).decode()

    @property
    def math(self):
        """"exact" or "fast" (the program's `math` declaration: whether the
        GPU may contract and approximate, docs/language.md "Math")."""
        return "fast" if lib.coda_program_math(self._h) == 1 else "exact"

    @property
    def params(self):
        """The parameters (`param NAME [= NUMBER]`, docs/language.md
        "Parameters"), in declaration order: {name: value, or None for one
        without a value}."""
        out = {}
        for i in range(lib.coda_program_num_params(self._h)):
            info = _lib.ParamInfo()
            _check(None, lib.coda_program_param(self._h, i, ctypes.byref(info)))
            out[info.name.decode()] = info.value if info.has_value else None
        return out

    def bind(self, context=None, **values):
        """A new program with the given parameter values (coda_program_bind):
        bind(eps=1e-6). CodaError for a name the program does not declare,
        a non-finite value or a parameter left without a value."""
        ctx = context or _parse_ctx()
        vals = (_lib.ParamValue * max(1, len(values)))()
        for i, (k, v) in enumerate(values.items()):
            vals[i].name = k.encode()
            vals[i].value = float(v)
        opts = _lib.BindOptions()
        opts.struct_size = ctypes.sizeof(_lib.BindOptions)
        opts.values = ctypes.cast(vals, ctypes.POINTER(_lib.ParamValue))
        opts.nvalues = len(values)
        h = ctypes.c_void_p()
        _check(ctx._h, lib.coda_program_bind(ctx._h, self._h, ctypes.byref(opts), ctypes.byref(h)))
        return Program(h.value)

    def variant(self, fold=(), drop=(), keep=None, keep_as=None, keep_dtype="bf16", context=None):
        """A variant of the program by the IR passes (coda_program_variant,
        docs/language.md "Variants as passes"), in this order: each rule
        Program of `fold` replaces the row inputs named like its values by
        their formula; the outputs and finishers named in `drop` go; the
        named value `keep` is stored as a new output `keep_as`."""
        ctx = context or _parse_ctx()
        names = {v: k for k, v in DTYPE_NAMES.items()}
        if keep_dtype not in names:
            raise CodaError(1, "keep_dtype '%s' is none of %s" % (keep_dtype, ", ".join(sorted(names))))
        rules = (ctypes.c_void_p * max(1, len(fold)))(*[r._h.value for r in fold])
        drops = (ctypes.c_char_p * max(1, len(drop)))(*[d.encode() for d in drop])
        opts = _lib.VariantOptions()
        opts.struct_size = ctypes.sizeof(_lib.VariantOptions)
        opts.fold = ctypes.cast(rules, ctypes.POINTER(ctypes.c_void_p))
        opts.nfold = len(fold)
        opts.drop = ctypes.cast(drops, ctypes.POINTER(ctypes.c_char_p))
        opts.ndrop = len(drop)
        opts.keep = keep.encode() if keep else None
        opts.keep_as = keep_as.encode() if keep_as else None
        opts.keep_dtype = names[keep_dtype]
        h = ctypes.c_void_p()
        _check(ctx._h, lib.coda_program_variant(ctx._h, self._h, ctypes.byref(opts), ctypes.byref(h)))
        return Program(h.value)

    @property
    def args(self):
        """The named arguments, in index order: inputs, outputs, partials,
        finisher results (a list of ArgumentInfo)."""
        if self._args is None:
            out, seen_out = [], False
            for i in range(lib.coda_program_num_args(self._h)):
                info = _lib.ArgInfo()
                _check(None, lib.coda_program_arg(self._h, i, ctypes.byref(info)))
                kind = KIND_NAMES[info.kind]
                if kind in ("output", "partial"):
                    seen_out = True
                elif seen_out and kind in ("row", "col", "scalar"):  # scalar: a total's
                    kind = "finish"
                out.append(ArgumentInfo(info.name.decode(), kind, DTYPE_NAMES[info.dtype],
                                        WIDTH_NAMES[info.width], bool(info.accumulate)))
            self._args = out
        return list(self._args)

    def arg(self, name):
        for a in self.args:
            if a.name == name:
                return a
        raise KeyError("program has no argument '%s' (it has %s)" % (name, [a.name for a in self.args]))

    def _arg_names(self):
        if self._names is None:
            self._names = frozenset(a.name for a in self.args)
        return self._names

    def _binding_plan(self):
        """Per argument, what binding it needs that does not change from
        call to call: (info, name as bytes, is input, is finish, how a 1-D
        array binds (None for finish: by shape), output dtype code)."""
        if self._plan is None:
            self._plan = tuple((a, a.name.encode(), a.is_input, a.kind == "finish",
                                _STATIC_KIND_CODE.get(a.kind, 3) if a.kind != "finish" else None,
                                _DTYPE_BY_NAME[a.dtype]) for a in self.args)
        return self._plan

    def _cached_shape(self, name, M, N, tiling):
        key = (name, M, N, tiling[0], tiling[1])
        v = self._shapes.get(key)
        if v is None:
            if len(self._shapes) > 256:
                self._shapes.clear()
            v = self._shapes[key] = self.arg_shape(name, M, N, tiling)
        return v

    def arg_shape(self, name, M, N, tiling=(64, 128)):
        """(rows, cols) of argument `name` for an M x N GEMM with this tiling
        (rowsum inputs: cols 0 means any)."""
        r, c = ctypes.c_int64(), ctypes.c_int64()
        st = lib.coda_program_arg_shape(self._h, name.encode(), M, N, int(tiling[0]), int(tiling[1]),
                                        ctypes.byref(r), ctypes.byref(c))
        if st != 0:
            raise CodaError(st, "arg_shape('%s', M=%d, N=%d, tiling=%s) failed" % (name, M, N, tuple(tiling)))
        return r.value, c.value

    def __repr__(self):
        return "<coda.Program args=%s>" % [a.name for a in self.args]


# ---------------------------------------------------------------- context

_BACKENDS = {"cpu": 0, "cuda": 1, "gpu": 1}
_PRECISIONS = {"f32": 0, "fp32": 0, "float32": 0, "f64": 1, "fp64": 1, "float64": 1, "exact": 1}
_ARCHS = {"auto": 0, "sm90": 1, "sm80": 2}  # coda_arch_choice


def _create_context(opts):
    """The handle of a context created from opts (a ContextOptions, struct_size
    set); a refusal is a CodaError with the library's reason
    (coda_context_options_check: coda_context_create has no context yet to
    hold one)."""
    # any ctypes struct: the library reads opts.struct_size bytes at most
    p = ctypes.cast(ctypes.pointer(opts), ctypes.POINTER(_lib.ContextOptions))
    h = ctypes.c_void_p()
    st = lib.coda_context_create(p, ctypes.byref(h))
    if st != 0:
        buf = ctypes.create_string_buffer(512)
        lib.coda_context_options_check(p, buf, len(buf))
        msg = buf.value.decode("utf-8", "replace")
        raise CodaError(st, msg or "cannot create a context (%s)" % lib.coda_status_string(st).decode())
    return h


class Context:
    """A coda context: Context(backend="cpu"|"cuda", precision="f32"|"f64",
    num_threads=0, device=0, stream=None, arch="auto"). precision "f64" is
    the CPU backend's exact mode (fp64 compute, f64 tensors allowed). stream:
    on CUDA, a cudaStream_t (an int, e.g.
    torch.cuda.current_stream().cuda_stream) every launch of the context goes
    to; it must outlive the context. arch: the CUDA GEMM mainloop, "auto"
    (CODA_ARCH, else by the device), "sm90" or "sm80" (the mma.sync path,
    also on a Hopper)."""

    def __init__(self, backend="cpu", precision="f32", num_threads=0, device=0, stream=None,
                 autotune=False, debug_sync=False, arch="auto"):
        if backend not in _BACKENDS:
            raise ValueError("coda: backend must be 'cpu' or 'cuda', got %r" % (backend,))
        if precision not in _PRECISIONS:
            raise ValueError("coda: precision must be 'f32' or 'f64', got %r" % (precision,))
        if arch not in _ARCHS:
            raise ValueError("coda: arch must be 'auto', 'sm90' or 'sm80', got %r" % (arch,))
        self._h = ctypes.c_void_p()
        opts = _lib.new_context_options()
        opts.backend = _BACKENDS[backend]
        opts.precision = _PRECISIONS[precision]
        opts.num_threads = int(num_threads)
        opts.device = int(device)
        opts.autotune = int(bool(autotune))
        opts.debug_sync = int(bool(debug_sync))
        opts.stream = stream or None
        opts.arch = _ARCHS[arch]
        self.backend = "cuda" if opts.backend == 1 else "cpu"
        self.precision = "f64" if opts.precision == 1 else "f32"
        self.stream = stream
        self._h = _create_context(opts)

    def close(self):
        if self._h and self._h.value:
            lib.coda_context_destroy(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def last_error(self):
        return lib.coda_last_error(self._h).decode()

    def synchronize(self):
        _check(self._h, lib.coda_synchronize(self._h))

    # -------------------------------------------------------------- helpers

    @property
    def _state_np(self):
        return np.float64 if self.precision == "f64" else np.float32

    def _tiling_for(self, program, M, N, K):
        """preferred_tiling, cached per program and shape (the per-call paths)."""
        cache = self.__dict__.setdefault("_tilings", {})
        key = (id(program) if program is not None else None, M, N, K)
        v = cache.get(key)
        if v is None or v[0] is not program:
            if len(cache) > 1024:
                cache.clear()
            v = cache[key] = (program, self.preferred_tiling(program, M, N, K))
        return v[1]

    def preferred_tiling(self, program, M, N, K):
        t = _lib.Tiling()
        _check(self._h, lib.coda_preferred_tiling(self._h, program._h if program else None, M, N, K,
                                                  ctypes.byref(t)))
        return (t.tile_m, t.tile_n)

    @staticmethod
    def _kind_code(program, a, M, N, tiling):
        """How a 1-D array binds: 0 as a row vector (M, 1), 1 as (1, N)."""
        if a.kind == "finish":
            rows, cols = program._cached_shape(a.name, M, N, tiling)
            return 0 if cols == 1 and rows != 1 else 1
        return _STATIC_KIND_CODE.get(a.kind, 3)

    def _alloc(self, like_torch, shape, dtype, zero=True):
        """A new array for an argument the caller did not give. zero: an
        accumulating output starts from zeros; every other output, partial
        and finisher result is written in full by the run (docs/language.md),
        so a torch tensor for one is left unset (no fill kernel on a GPU);
        numpy arrays are zeros either way."""
        if like_torch is not None:
            torch = _torch()
            td = {BF16: torch.bfloat16, F16: torch.float16, F32: torch.float32, F64: torch.float64,
                  I32: torch.int32}[dtype]
            return (torch.zeros if zero else torch.empty)(shape, dtype=td, device=like_torch.device)
        return np.zeros(shape, dtype=_NP_OF[dtype])

    def _run(self, program, M, N, tiling, tensors, call, finish, operands=()):
        """Binds tensors (allocating missing outputs), runs call(args,
        tiling), then the finishers; returns {name: array} of everything
        written."""
        like = None
        for v in tensors.values():
            if _is_torch(v):
                like = v
                break
        else:
            for v in operands:
                if _is_torch(v):
                    like = v
                    break
        state = F64 if self.precision == "f64" else F32
        if program is not None:
            plan = program._binding_plan()
            names = program._arg_names()
        else:
            plan = ((ArgumentInfo("D", "output", DTYPE_NAMES[state], "full", False), b"D", False, False, 3,
                     state),)
            names = ("D",)
        for k in tensors:
            if k not in names:
                raise CodaError(1, "binding '%s' is not an argument of the program (its arguments: %s)"
                                % (k, ", ".join(e[0].name for e in plan)))
        backend = 0 if self.backend == "cpu" else 1
        h = self._h
        args_h = ctypes.c_void_p()
        _check(h, lib.coda_args_create(h, ctypes.byref(args_h)))
        keep, written, fins = [], {}, []
        try:
            for a, name_b, is_input, is_finish, code, dt in plan:
                name = a.name
                x = tensors.get(name)
                if is_finish:
                    # a statistic a later pass reads is finished by the run itself
                    if not finish and x is None and program.num_passes == 1:
                        continue
                    fins.append(name_b)
                if x is None:
                    if is_input:
                        raise CodaError(1, "%s input '%s' is not given" % (a.kind, name))
                    shape = program._cached_shape(name, M, N, tiling) if program is not None else (M, N)
                    x = self._alloc(like, shape, dt if a.kind == "output" else state,
                                    zero=a.accumulate)
                elif is_input and isinstance(x, (int, float)):
                    x = np.full((1, 1), x, dtype=_NP_OF[dt]) if like is None else \
                        self._alloc(like, (1, 1), dt).fill_(x)
                if code is None:
                    code = self._kind_code(program, a, M, N, tiling)
                b = _bind(x, code, name, not is_input, backend)
                keep.append(b)
                _check(h, lib.coda_args_set(args_h, name_b, ctypes.byref(b.tensor)))
                if not is_input:
                    written[name] = x
            t = _lib.Tiling(int(tiling[0]), int(tiling[1]))
            call(args_h, t)
            if finish and program is not None:
                for name_b in fins:
                    _check(h, lib.coda_finish(h, program._h, name_b, args_h, M, N, t))
        finally:
            lib.coda_args_destroy(args_h)
        return written

    # ---------------------------------------------------------------- runs

    def gemm_epilogue(self, program, A, B, trans_a=False, trans_b=False, tiling=None, finish=True,
                      args=None, **tensors):
        """acc = op(A) @ op(B) (op(X) = X.T where trans_x), op(A) M x K,
        op(B) K x N; then `program` runs on acc (program None: acc is stored
        into "D"). Tensors are bound by name (keywords, or the dict `args`);
        outputs, partials and finisher results that are not given are
        allocated (numpy, or torch like the inputs). With finish (default)
        every `finish` statement runs after the GEMM. Returns a dict of
        every tensor written."""
        tensors = dict(args or {}, **tensors)
        ta = _bind(A, 3, "A", False, 0 if self.backend == "cpu" else 1)
        tb = _bind(B, 3, "B", False, 0 if self.backend == "cpu" else 1)
        M = ta.tensor.cols if trans_a else ta.tensor.rows
        K = ta.tensor.rows if trans_a else ta.tensor.cols
        N = tb.tensor.rows if trans_b else tb.tensor.cols
        if tiling is None:
            tiling = self._tiling_for(program, M, N, K)
        p = program._h if program is not None else None

        def call(args_h, t):
            _check(self._h, lib.coda_gemm_epilogue(self._h, p, int(bool(trans_a)), ctypes.byref(ta.tensor),
                                                   int(bool(trans_b)), ctypes.byref(tb.tensor), args_h, t))

        out = self._run(program, M, N, tiling, tensors, call, finish, operands=(A, B))
        del ta, tb
        return out

    def map(self, program, M=None, N=None, tiling=None, finish=True, args=None, **tensors):
        """Runs a program that does not read acc over an M x N domain (no
        GEMM). M and N default to the shape of the first full-width tile
        input or given output. Returns a dict of every tensor written."""
        tensors = dict(args or {}, **tensors)
        if M is None or N is None:
            for a in program.args:
                x = tensors.get(a.name)
                if x is not None and a.kind in ("tile", "output") and len(_shape_of(x)) == 2:
                    r, c = _shape_of(x)
                    c = {"full": c, "x2": c // 2, "half": c * 2}[a.width]
                    M = r if M is None else M
                    N = c if N is None else N
                    break
            if M is None or N is None:
                raise ValueError("coda.map: give M and N (no tile input to take them from)")
        if tiling is None:
            tiling = self._tiling_for(program, M, N, 1)

        def call(args_h, t):
            _check(self._h, lib.coda_map(self._h, program._h, M, N, args_h, t))

        return self._run(program, M, N, tiling, tensors, call, finish)

    def finish(self, program, name, M, N, tiling=None, args=None, **tensors):
        """Runs the program's `finish` statement `name` (partials -> vector);
        the partial must be given; the result is allocated if not given.
        Returns the result."""
        tensors = dict(args or {}, **tensors)
        if tiling is None:
            tiling = self.preferred_tiling(program, M, N, 1)
        state = F64 if self.precision == "f64" else F32
        fa = program.arg(name)
        if fa.kind != "finish":
            raise CodaError(1, "'%s' is not a finish statement of the program" % name)
        like = next((v for v in tensors.values() if _is_torch(v)), None)
        res = tensors.get(name)
        if res is None:
            res = self._alloc(like, program.arg_shape(name, M, N, tiling), state)
        args_h = ctypes.c_void_p()
        _check(self._h, lib.coda_args_create(self._h, ctypes.byref(args_h)))
        keep = []
        try:
            for k, v in list(tensors.items()) + [(name, res)]:
                info = program.arg(k)
                b = _bind(v, self._kind_code(program, info, M, N, tiling), k, k == name,
                          0 if self.backend == "cpu" else 1)
                keep.append(b)
                _check(self._h, lib.coda_args_set(args_h, k.encode(), ctypes.byref(b.tensor)))
            _check(self._h, lib.coda_finish(self._h, program._h, name.encode(), args_h, M, N,
                                            _lib.Tiling(int(tiling[0]), int(tiling[1]))))
        finally:
            lib.coda_args_destroy(args_h)
        return res

    def gemm(self, A, B, trans_a=False, trans_b=False, out=None, alpha=1.0, accumulate=False):
        """Plain GEMM out = alpha op(A) op(B) (+ out if accumulate); out is
        allocated (fp32, fp64 in exact mode) if not given."""
        be = 0 if self.backend == "cpu" else 1
        ta, tb = _bind(A, 3, "A", False, be), _bind(B, 3, "B", False, be)
        M = ta.tensor.cols if trans_a else ta.tensor.rows
        N = tb.tensor.rows if trans_b else tb.tensor.cols
        if out is None:
            like = A if _is_torch(A) else (B if _is_torch(B) else None)
            out = self._alloc(like, (M, N), F64 if self.precision == "f64" else F32)
        to = _bind(out, 3, "out", True, be)
        _check(self._h, lib.coda_gemm(self._h, int(bool(trans_a)), ctypes.byref(ta.tensor), int(bool(trans_b)),
                                      ctypes.byref(tb.tensor), ctypes.byref(to.tensor), float(alpha),
                                      int(bool(accumulate))))
        return out

    # ------------------------------------------------------------ attention

    def _attention_dims(self, qkv, batch, heads_q, heads_kv):
        be = 0 if self.backend == "cpu" else 1
        tq = _bind(qkv, 3, "qkv", False, be)
        rows, cols = tq.tensor.rows, tq.tensor.cols
        heads = heads_q + 2 * heads_kv
        if batch <= 0 or rows % batch or heads <= 0 or cols % heads:
            raise CodaError(4, "attention: qkv is %d x %d, which is not (batch %d * seq) x "
                            "((heads_q %d + 2 * heads_kv %d) * head_dim)" % (rows, cols, batch, heads_q, heads_kv))
        return tq, rows // batch, cols // heads, be

    def attention_forward(self, qkv, batch, heads_q, heads_kv, out=None, lse=None, window=0, scale=0.0):
        """Causal softmax attention with grouped-query heads on the packed
        qkv (batch*seq rows; per row [q heads | k heads | v heads]); scores
        scale * q.k (scale 0: 1/sqrt(head_dim)); window > 0: query t sees
        keys t - window < j <= t (coda_attention_forward_mask). Returns (out
        (batch*seq, heads_q*head_dim), lse (batch*seq, heads_q), fp32 or fp64
        in exact mode); out and lse are allocated (like qkv) if not given."""
        mask = _attn_mask(window, scale)
        tq, seq, hd, be = self._attention_dims(qkv, batch, heads_q, heads_kv)
        M = tq.tensor.rows
        like = qkv if _is_torch(qkv) else None
        state = F64 if self.precision == "f64" else F32
        if out is None:
            out = self._alloc(like, (M, heads_q * hd), tq.tensor.dtype)
        if lse is None:
            lse = self._alloc(like, (M, heads_q), state)
        to, tl = _bind(out, 3, "out", True, be), _bind(lse, 3, "lse", True, be)
        if mask is None:
            _check(self._h, lib.coda_attention_forward(self._h, ctypes.byref(tq.tensor), batch, seq, heads_q,
                                                       heads_kv, hd, ctypes.byref(to.tensor), ctypes.byref(tl.tensor)))
        else:
            _check(self._h, lib.coda_attention_forward_mask(self._h, ctypes.byref(tq.tensor), batch, seq, heads_q,
                                                            heads_kv, hd, ctypes.byref(to.tensor),
                                                            ctypes.byref(tl.tensor), ctypes.byref(mask)))
        return out, lse

    def attention_backward(self, qkv, out, lse, dout, batch, heads_q, heads_kv, dqkv=None, window=0, scale=0.0):
        """The gradient of qkv from the forward's out and lse and dout (same
        packed layout as qkv); dqkv allocated (like qkv) if not given; window
        and scale the forward's (coda_attention_backward_mask)."""
        mask = _attn_mask(window, scale)
        tq, seq, hd, be = self._attention_dims(qkv, batch, heads_q, heads_kv)
        if dqkv is None:
            dqkv = self._alloc(qkv if _is_torch(qkv) else None, (tq.tensor.rows, tq.tensor.cols), tq.tensor.dtype)
        to, tl = _bind(out, 3, "out", False, be), _bind(lse, 3, "lse", False, be)
        td, tg = _bind(dout, 3, "dout", False, be), _bind(dqkv, 3, "dqkv", True, be)
        if mask is None:
            _check(self._h, lib.coda_attention_backward(self._h, ctypes.byref(tq.tensor), ctypes.byref(to.tensor),
                                                        ctypes.byref(tl.tensor), ctypes.byref(td.tensor), batch, seq,
                                                        heads_q, heads_kv, hd, ctypes.byref(tg.tensor)))
        else:
            _check(self._h, lib.coda_attention_backward_mask(
                self._h, ctypes.byref(tq.tensor), ctypes.byref(to.tensor), ctypes.byref(tl.tensor),
                ctypes.byref(td.tensor), batch, seq, heads_q, heads_kv, hd, None, None, ctypes.byref(tg.tensor), None,
                ctypes.byref(mask)))
        return dqkv
