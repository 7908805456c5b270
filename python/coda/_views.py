"""bf16 helpers and the tensor binding: numpy arrays and torch tensors
viewed as coda_tensor.

Tensors are numpy arrays (CPU backend) or torch tensors (CPU tensors on
the CPU backend, CUDA tensors on the CUDA backend), viewed without copies
where they are row-major with unit column stride; inputs that are not are
copied to a contiguous array first, outputs that are not are refused.
bf16 in numpy: numpy has no bfloat16, so a uint16 array holds bf16 bits
(see to_bf16 / from_bf16)."""

import sys

import numpy as np

from . import _lib
from ._enums import BF16, F16, F32, F64, I32

# numpy dtype of each coda dtype (bf16 as its bits)
_NP_OF = {BF16: np.uint16, F16: np.float16, F32: np.float32, F64: np.float64, I32: np.int32}
_CODA_OF_NP = {np.dtype(np.uint16): BF16, np.dtype(np.float16): F16, np.dtype(np.float32): F32,
               np.dtype(np.float64): F64, np.dtype(np.int32): I32}


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
