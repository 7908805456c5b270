"""Contexts, programs and runs: the core API over libcoda (ctypes), one
concern per module, gathered here under the name the package, coda.torch,
the tests and the benchmarks import (`from . import _core`, `_core.X`):

    _errors   STATUS_NAMES, CodaError, _check
    _enums    the dtype, argument kind and width codes
    _views    to_bf16 / from_bf16, numpy arrays and torch tensors viewed
              as coda_tensor (_bind)
    _program  Program, ArgumentInfo, builtin_program_names
    _context  Context and its runs, cuda_available, _create_context

Module state (the parse context, the cached torch types) lives in the
module that uses it and is not re-exported."""

from ._context import (  # noqa: F401
    _ARCHS,
    _BACKENDS,
    _PRECISIONS,
    Context,
    _attn_mask,
    _create_context,
    cuda_available,
)
from ._enums import (  # noqa: F401
    _DTYPE_BY_NAME,
    _STATIC_KIND_CODE,
    BF16,
    DTYPE_NAMES,
    F16,
    F32,
    F64,
    I32,
    KIND_NAMES,
    WIDTH_NAMES,
)
from ._errors import STATUS_NAMES, CodaError, _check  # noqa: F401
from ._program import _FLOAT_WORD, ArgumentInfo, Program, _parse_ctx, builtin_program_names  # noqa: F401
from ._views import (  # noqa: F401
    _CODA_OF_NP,
    _NP_OF,
    _as_2d_shape,
    _bind,
    _Bound,
    _is_torch,
    _shape_of,
    _torch,
    _torch_dtypes,
    _view_2d,
    from_bf16,
    to_bf16,
)
