"""The codes of the C API's enums the binding reads and writes: dtypes,
argument kinds and widths."""

BF16, F16, F32, F64, I32 = 0, 1, 2, 3, 4
DTYPE_NAMES = {BF16: "bf16", F16: "f16", F32: "f32", F64: "f64", I32: "i32"}
_DTYPE_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}
# how a 1-D array binds, by argument kind: 0 as a row vector (M, 1), 1 as
# (1, N), 3 as given (finish: by its shape, Context._kind_code)
_STATIC_KIND_CODE = {"row": 0, "rowsum": 0, "rowmax": 0, "rowlse": 0, "col": 1}

KIND_NAMES = {0: "row", 1: "col", 2: "scalar", 3: "tile", 4: "output", 5: "partial", 6: "rowsum", 7: "rowmax",
              8: "rowlse"}
WIDTH_NAMES = {0: "full", 1: "x2", 2: "half"}
