"""Contexts: Context (the backend, precision and stream every run goes
to) and its runs: gemm_epilogue, map, finish, gemm, attention."""

import ctypes

import numpy as np

from . import _lib
from ._enums import _STATIC_KIND_CODE, BF16, DTYPE_NAMES, F16, F32, F64, I32
from ._errors import CodaError, _check
from ._lib import lib
from ._program import ArgumentInfo
from ._views import _NP_OF, _bind, _is_torch, _shape_of, _torch


def cuda_available():
    """True if libcoda was built with CUDA and a usable GPU is present."""
    return bool(lib.coda_cuda_available())


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
