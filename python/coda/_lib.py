"""ctypes declarations of the public C API (include/coda.h) that the
package uses. The shared library is the one installed next to this file
(libcoda.so*), or the file named by the environment variable CODA_LIBRARY."""

import ctypes
import glob
import os

c_i64 = ctypes.c_int64
c_int = ctypes.c_int
c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p


class Tensor(ctypes.Structure):
    _fields_ = [("data", c_void_p), ("dtype", c_int), ("rows", c_i64), ("cols", c_i64), ("ld", c_i64)]


class ParamInfo(ctypes.Structure):
    """Mirror of coda_param_info."""
    _fields_ = [("name", c_char_p), ("has_value", c_int), ("value", ctypes.c_double)]


class ParamValue(ctypes.Structure):
    """Mirror of coda_param_value."""
    _fields_ = [("name", c_char_p), ("value", ctypes.c_double)]


class BindOptions(ctypes.Structure):
    """Mirror of coda_bind_options (struct_size: this mirror's size)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("values", ctypes.POINTER(ParamValue)), ("nvalues", c_int)]


class VariantOptions(ctypes.Structure):
    """Mirror of coda_variant_options (struct_size: this mirror's size)."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("fold", ctypes.POINTER(c_void_p)), ("nfold", c_int),
                ("drop", ctypes.POINTER(c_char_p)), ("ndrop", c_int), ("keep", c_char_p), ("keep_as", c_char_p),
                ("keep_dtype", c_int)]


class ContextOptions(ctypes.Structure):
    """Mirror of coda_context_options. Its struct_size is set from this
    mirror's own size (new_context_options), never taken from the C side:
    a mirror that lacks a member the header gained then gives a size the
    library refuses with a message, instead of a call reading or writing
    past the Python-owned struct."""

    _fields_ = [
        ("struct_size", ctypes.c_size_t),
        ("backend", c_int),
        ("precision", c_int),
        ("num_threads", c_int),
        ("device", c_int),
        ("autotune", c_int),
        ("debug_sync", c_int),
        ("stream", c_void_p),
        ("retune", c_int),
        ("epi_schedule", c_int),
        ("epi_tma_loads", c_int),
        ("attn_impl", c_int),
        ("cache_dir", c_char_p),
        ("own_stream", c_int),
        ("arch", c_int),
        ("compile_cc", c_int),
    ]


class AttnMask(ctypes.Structure):
    """Mirror of coda_attn_mask; struct_size set from this mirror's own size
    (new_attn_mask), for the reason ContextOptions' is."""
    _fields_ = [("struct_size", ctypes.c_size_t), ("scale", ctypes.c_double), ("window", c_int)]


class ArgInfo(ctypes.Structure):
    _fields_ = [("name", c_char_p), ("kind", c_int), ("dtype", c_int), ("width", c_int), ("accumulate", c_int)]


class Tiling(ctypes.Structure):
    _fields_ = [("tile_m", c_int), ("tile_n", c_int)]


def new_context_options():
    """A ContextOptions holding the C defaults (coda_context_default_options:
    CPU backend, fp32, every other member 0), struct_size its own size. Not
    got from coda_context_default_options: a by-value return writes the C
    struct's size into the Python buffer whatever the mirror's size."""
    opts = ContextOptions()
    opts.struct_size = ctypes.sizeof(ContextOptions)
    return opts


def new_attn_mask(scale=0.0, window=0):
    """An AttnMask with the given scale (0: 1/sqrt(head_dim)) and window (0:
    none), struct_size its own size; the values are checked by the C side."""
    mask = AttnMask()
    mask.struct_size = ctypes.sizeof(AttnMask)
    mask.scale = scale
    mask.window = window
    return mask


def _find_library():
    env = os.environ.get("CODA_LIBRARY")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    for pattern in ("libcoda.so", "libcoda.so.*", "libcoda.dylib", "libcoda*.dylib", "coda.dll"):
        found = sorted(glob.glob(os.path.join(here, pattern)))
        if found:
            return found[0]
    raise ImportError(
        "coda: the shared library libcoda was not found next to %s (install the package with "
        "`pip install ./python`, or set CODA_LIBRARY to a built libcoda.so)" % here
    )


LIBRARY_PATH = _find_library()
lib = ctypes.CDLL(LIBRARY_PATH)

_P = ctypes.POINTER


def _decl(name, restype, *argtypes):
    f = getattr(lib, name)
    f.restype = restype
    f.argtypes = list(argtypes)


_decl("coda_status_string", c_char_p, c_int)
_decl("coda_dtype_name", c_char_p, c_int)
_decl("coda_dtype_size", ctypes.c_size_t, c_int)
_decl("coda_context_create", c_int, _P(ContextOptions), _P(c_void_p))
_decl("coda_context_options_check", c_int, _P(ContextOptions), c_char_p, ctypes.c_size_t)
_decl("coda_context_destroy", None, c_void_p)
_decl("coda_last_error", c_char_p, c_void_p)
_decl("coda_context_backend", c_int, c_void_p)
_decl("coda_context_precision", c_int, c_void_p)
_decl("coda_cuda_available", c_int)
_decl("coda_synchronize", c_int, c_void_p)
_decl("coda_program_parse", c_int, c_void_p, c_char_p, _P(c_void_p))
_decl("coda_program_destroy", None, c_void_p)
_decl("coda_program_text", c_char_p, c_void_p)
_decl("coda_program_ir", c_char_p, c_void_p)
_decl("coda_program_math", c_int, c_void_p)
_decl("coda_program_num_args", c_int, c_void_p)
_decl("coda_program_num_passes", c_int, c_void_p)
_decl("coda_program_passes_text", c_char_p, c_void_p)
_decl("coda_program_arg", c_int, c_void_p, c_int, _P(ArgInfo))
_decl("coda_program_arg_shape", c_int, c_void_p, c_char_p, c_i64, c_i64, c_int, c_int, _P(c_i64), _P(c_i64))
_decl("coda_program_builtin", c_int, c_void_p, c_char_p, _P(c_void_p))
_decl("coda_builtin_program_name", c_char_p, c_int)
_decl("coda_program_num_params", c_int, c_void_p)
_decl("coda_program_param", c_int, c_void_p, c_int, _P(ParamInfo))
_decl("coda_program_bind", c_int, c_void_p, c_void_p, _P(BindOptions), _P(c_void_p))
_decl("coda_program_variant", c_int, c_void_p, c_void_p, _P(VariantOptions), _P(c_void_p))
_decl("coda_args_create", c_int, c_void_p, _P(c_void_p))
_decl("coda_args_destroy", None, c_void_p)
_decl("coda_args_set", c_int, c_void_p, c_char_p, _P(Tensor))
_decl("coda_gemm_epilogue", c_int, c_void_p, c_void_p, c_int, _P(Tensor), c_int, _P(Tensor), c_void_p, Tiling)
_decl("coda_preferred_tiling", c_int, c_void_p, c_void_p, c_i64, c_i64, c_i64, _P(Tiling))
_decl("coda_finish", c_int, c_void_p, c_void_p, c_char_p, c_void_p, c_i64, c_i64, Tiling)
_decl("coda_map", c_int, c_void_p, c_void_p, c_i64, c_i64, c_void_p, Tiling)
_decl("coda_gemm", c_int, c_void_p, c_int, _P(Tensor), c_int, _P(Tensor), _P(Tensor), ctypes.c_float, c_int)
_decl("coda_attention_forward", c_int, c_void_p, _P(Tensor), c_int, c_int, c_int, c_int, c_int, _P(Tensor),
      _P(Tensor))
_decl("coda_attention_backward", c_int, c_void_p, _P(Tensor), _P(Tensor), _P(Tensor), _P(Tensor), c_int, c_int,
      c_int, c_int, c_int, _P(Tensor))
_decl("coda_attention_forward_mask", c_int, c_void_p, _P(Tensor), c_int, c_int, c_int, c_int, c_int, _P(Tensor),
      _P(Tensor), _P(AttnMask))
_decl("coda_attention_backward_mask", c_int, c_void_p, _P(Tensor), _P(Tensor), _P(Tensor), _P(Tensor), c_int, c_int,
      c_int, c_int, c_int, _P(Tensor), _P(Tensor), _P(Tensor), _P(Tensor), _P(AttnMask))
