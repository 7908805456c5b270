"""Programs: Program (parse, built-ins, parameters, variants, arguments
and their shapes) and ArgumentInfo."""

import ctypes
import re

from . import _lib
from ._enums import _DTYPE_BY_NAME, _STATIC_KIND_CODE, DTYPE_NAMES, KIND_NAMES, WIDTH_NAMES
from ._errors import CodaError, _check
from ._lib import lib


def builtin_program_names():
    """Names of the built-in programs (programs/*.coda)."""
    out, i = [], 0
    while True:
        n = lib.coda_builtin_program_name(i)
        if not n:
            return out
        out.append(n.decode())
        i += 1


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
        from ._context import Context  # imported here: _context imports this module
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
