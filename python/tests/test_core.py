"""The core API on numpy arrays (CPU backend), checked against independent
numpy fp64 references of each program's math."""

import ctypes

import numpy as np
import pytest

import coda

RNG = np.random.default_rng(1234)


def rand(*shape):
    return RNG.standard_normal(shape)


RESIDUAL_ROWSUM = """
input res : tile f64
output x : f64
s = acc + res
store x = s
reduce ss = rowsum(s * s)
finish r = rstd(ss, 1e-5)
"""


def test_builtin_names_and_args():
    names = coda.builtin_program_names()
    assert "llama_residual_norm" in names and "llama_swiglu" in names
    p = coda.Program.builtin("llama_residual_norm")
    got = [(a.name, a.kind, a.dtype) for a in p.args]
    assert got == [("res", "tile", "bf16"), ("w", "col", "bf16"), ("x", "output", "bf16"),
                   ("h", "output", "bf16"), ("ss", "partial", "f32"), ("r", "finish", "f32")]
    assert p.arg("res").shape == "(M, N)"
    assert p.arg("w").shape == "(1, N)"
    assert p.arg_shape("ss", 100, 300, (64, 128)) == (100, 3)
    assert p.arg_shape("r", 100, 300, (64, 128)) == (100, 1)
    sw = coda.Program.builtin("llama_swiglu")
    y = sw.arg("y")
    assert (y.kind, y.width, y.shape) == ("output", "half", "(M, N/2)")
    assert "store" in p.text and p.ir


def test_residual_rowsum_f64_exact():
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse(RESIDUAL_ROWSUM)
    M, N, K = 37, 300, 19
    A, W, res = rand(M, K), rand(N, K), rand(M, N)
    out = ctx.gemm_epilogue(p, A, W, trans_b=True, res=res)
    s = A @ W.T + res
    np.testing.assert_allclose(out["x"], s, rtol=1e-12, atol=1e-12)
    # partials: one per row and column tile of the preferred tiling (64 x 128)
    assert out["ss"].shape == (M, 3)
    np.testing.assert_allclose(out["ss"].sum(1), (s * s).sum(1), rtol=1e-12)
    np.testing.assert_allclose(out["r"][:, 0], 1 / np.sqrt((s * s).mean(1) + 1e-5), rtol=1e-12)


PARAM_NORM = """
param eps = 1e-5
param scale
input x : tile f64
output y : f64
store y = scale * x / (x * x + eps)
reduce ss = rowsum(x * x)
finish r = rstd(ss, eps)
"""


def test_params_bind_and_run():
    """Parameters bound by value: two eps values give two results, each the
    numpy reference; the refusals name the parameter."""
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse(PARAM_NORM)
    assert p.params == {"eps": 1e-5, "scale": None}
    x = rand(5, 40) * 0.1
    with pytest.raises(coda.CodaError) as e:
        ctx.map(p, x=x)
    assert "parameter 'scale' has no value" in e.value.message
    outs = []
    for eps in (1e-5, 0.2):
        q = p.bind(eps=eps, scale=-1.5)
        assert q.params == {"eps": eps, "scale": -1.5}
        assert "param eps = %s" % ("1e-5" if eps == 1e-5 else "0.2") in q.text
        out = ctx.map(q, x=x)
        np.testing.assert_allclose(out["y"], -1.5 * x / (x * x + eps), rtol=1e-12)
        np.testing.assert_allclose(out["r"][:, 0], 1 / np.sqrt((x * x).mean(1) + eps), rtol=1e-6)
        outs.append(out["r"][:, 0])
    assert not np.allclose(outs[0], outs[1])
    with pytest.raises(coda.CodaError) as e:
        p.bind(epz=1.0, scale=1.0)
    assert e.value.status_name == "CODA_ERR_INVALID_ARGUMENT"
    assert "unknown parameter 'epz' (it declares eps, scale)" in e.value.message
    with pytest.raises(coda.CodaError) as e:
        p.bind(eps=float("inf"), scale=1.0)
    assert "not finite" in e.value.message
    with pytest.raises(coda.CodaError) as e:
        p.bind(eps=1e-6)
    assert "parameter 'scale' has no value" in e.value.message


def test_builtin_eps_parameter():
    p = coda.Program.builtin("llama_rmsnorm")
    assert p.params == {"eps": 1e-5}
    q = p.bind(eps=1e-6).retyped("f64")
    assert q.params == {"eps": 1e-6} and "rstd(ss, eps)" in q.text


def test_outputs_given_and_trans_a():
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse(RESIDUAL_ROWSUM)
    M, N, K = 8, 10, 6
    At, B, res = rand(K, M), rand(K, N), rand(M, N)
    x = np.zeros((M, N))
    out = ctx.gemm_epilogue(p, At, B, trans_a=True, res=res, x=x, finish=False)
    assert out["x"] is x and "r" not in out
    np.testing.assert_allclose(x, At.T @ B + res, rtol=1e-12)
    r = ctx.finish(p, "r", M, N, ss=out["ss"])
    np.testing.assert_allclose(r[:, 0], 1 / np.sqrt((x * x).mean(1) + 1e-5), rtol=1e-12)


def silu(v):
    return v / (1 + np.exp(-v))


def test_swiglu_builtin_bf16():
    """llama_swiglu in fp32 compute with bf16 tensors (uint16 bits)."""
    ctx = coda.Context("cpu")
    p = coda.Program.builtin("llama_swiglu")
    M, F, K = 9, 12, 16
    h = coda.to_bf16(rand(M, K))
    W = coda.to_bf16(rand(2 * F, K) * 0.3)
    r = (RNG.random((M, 1)) + 0.5).astype(np.float32)
    out = ctx.gemm_epilogue(p, h, W, trans_b=True, r=r)
    assert out["z"].dtype == np.uint16 and out["z"].shape == (M, 2 * F)
    assert out["y"].shape == (M, F)
    acc = coda.from_bf16(h).astype(np.float64) @ coda.from_bf16(W).astype(np.float64).T
    g, u = acc[:, 0::2] * r, acc[:, 1::2] * r
    np.testing.assert_allclose(coda.from_bf16(out["z"])[:, 0::2], g, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(coda.from_bf16(out["z"])[:, 1::2], u, rtol=2e-2, atol=2e-2)
    np.testing.assert_allclose(coda.from_bf16(out["y"]), silu(g) * u, rtol=3e-2, atol=3e-2)


def test_swiglu_user_program_f32():
    """A user-written SwiGLU program in fp32, non-interleaved halves of N."""
    ctx = coda.Context("cpu")
    p = coda.Program.parse("""
mode pair
output y : f32 half
store y = swiglu(acc.even, acc.odd)
""")
    M, F, K = 5, 7, 11
    A = rand(M, K).astype(np.float32)
    B = rand(K, 2 * F).astype(np.float32)
    y = ctx.gemm_epilogue(p, A, B)["y"]
    acc = A.astype(np.float64) @ B.astype(np.float64)
    np.testing.assert_allclose(y, silu(acc[:, 0::2]) * acc[:, 1::2], rtol=1e-4, atol=1e-5)


def test_map_and_scalar():
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse("""
input x : tile f64
input w : col f64
input c : scalar f64
output y : f64
store y = x * w + c
reduce cs = colsum(x)
finish csum = sum(cs)
""")
    M, N = 13, 9
    x, w = rand(M, N), rand(N)
    out = ctx.map(p, x=x, w=w, c=0.5)
    np.testing.assert_allclose(out["y"], x * w + 0.5, rtol=1e-12)
    np.testing.assert_allclose(out["csum"][0], x.sum(0), rtol=1e-12)


def test_plain_gemm():
    ctx = coda.Context("cpu", precision="f64")
    A, B = rand(4, 6), rand(5, 6)
    np.testing.assert_allclose(ctx.gemm(A, B, trans_b=True), A @ B.T, rtol=1e-12)
    out = ctx.gemm_epilogue(None, A, B, trans_b=True)
    np.testing.assert_allclose(out["D"], A @ B.T, rtol=1e-12)


def test_non_contiguous_input_is_copied():
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse(RESIDUAL_ROWSUM)
    A, W = rand(6, 4), rand(5, 4)
    res = rand(5, 6).T  # column-major view
    out = ctx.gemm_epilogue(p, A, W, trans_b=True, res=res)
    np.testing.assert_allclose(out["x"], A @ W.T + res, rtol=1e-12)


def test_math_declaration():
    """`math fast` is read, kept in the canonical text and retyping, and on
    the CPU computes exactly what the exact program does."""
    body = "input x : tile f64\noutput y : f64\nstore y = tanh(x) * acc + exp(-x) / (1 + x * x)\n"
    exact, fast = coda.Program.parse(body), coda.Program.parse("math fast\n" + body)
    assert (exact.math, fast.math) == ("exact", "fast")
    assert fast.text.startswith("math fast\n") and "math" not in exact.text
    assert coda.Program.builtin("llama_swiglu").math == "fast"
    assert coda.Program.builtin("llama_norm_bwd").math == "exact"
    assert coda.Program.builtin("llama_swiglu", dtype="f64").math == "fast"
    ctx = coda.Context("cpu", precision="f64")
    rng = np.random.default_rng(7)
    A, W, x = rng.standard_normal((6, 3)), rng.standard_normal((5, 3)), rng.uniform(-3, 3, (6, 5))
    ye = ctx.gemm_epilogue(exact, A, W, trans_b=True, x=x)["y"]
    yf = ctx.gemm_epilogue(fast, A, W, trans_b=True, x=x)["y"]
    np.testing.assert_array_equal(ye, yf)
    np.testing.assert_allclose(ye, np.tanh(x) * (A @ W.T) + np.exp(-x) / (1 + x * x), rtol=1e-12)


# ------------------------------------------------------------- errors

def test_parse_error_message():
    with pytest.raises(coda.CodaError) as e:
        coda.Program.parse("input x : tile f32\nstore y = x\n")
    assert e.value.status_name == "CODA_ERR_TYPE"
    assert "line 2" in e.value.message and "'y'" in e.value.message
    with pytest.raises(coda.CodaError) as e:
        coda.Program.parse("input x : tile\n")
    assert e.value.status_name == "CODA_ERR_PARSE" and "line 1" in e.value.message


def test_unknown_builtin():
    with pytest.raises(coda.CodaError) as e:
        coda.Program.builtin("no_such_program")
    assert "no_such_program" in str(e.value)


def test_shape_and_dtype_errors():
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse(RESIDUAL_ROWSUM)
    A, W = rand(6, 4), rand(5, 4)
    with pytest.raises(coda.CodaError) as e:
        ctx.gemm_epilogue(p, A, W, trans_b=True, res=rand(6, 4))
    assert e.value.status_name == "CODA_ERR_SHAPE"
    assert "res" in e.value.message and "expected 6 x 5" in e.value.message
    with pytest.raises(coda.CodaError) as e:
        ctx.gemm_epilogue(p, A, W, trans_b=False, res=rand(6, 5))
    assert e.value.status_name == "CODA_ERR_SHAPE" and "K mismatch" in e.value.message
    with pytest.raises(coda.CodaError) as e:
        ctx.gemm_epilogue(p, A, W, trans_b=True, res=rand(6, 5).astype(np.float32))
    assert e.value.status_name == "CODA_ERR_DTYPE" and "declared f64" in e.value.message
    with pytest.raises(coda.CodaError) as e:
        ctx.gemm_epilogue(p, A, W, trans_b=True, res=rand(6, 5), bogus=rand(6, 5))
    assert "bogus" in e.value.message
    assert ctx.last_error  # the context keeps the last message


def test_f64_needs_exact_mode():
    ctx = coda.Context("cpu")
    p = coda.Program.parse(RESIDUAL_ROWSUM)
    with pytest.raises(coda.CodaError) as e:
        ctx.gemm_epilogue(p, rand(3, 2), rand(4, 2), trans_b=True, res=rand(3, 4))
    assert e.value.status_name == "CODA_ERR_DTYPE" and "exact" in e.value.message


def test_bad_context_arguments():
    with pytest.raises(ValueError):
        coda.Context("tpu")
    if not coda.cuda_available():
        with pytest.raises(coda.CodaError):
            coda.Context("cuda")


def test_bf16_round_trip():
    v = np.array([1.0, -2.5, 3.140625, 1e-3, 0.0], dtype=np.float32)
    np.testing.assert_allclose(coda.from_bf16(coda.to_bf16(v)), v, rtol=4e-3)
    assert coda.to_bf16(np.array([1.0 + 2 ** -8]))[0] == coda.to_bf16(np.array([1.0]))[0]  # to even


def _c_struct_members(header, name):
    """Member names, in order, of `typedef struct NAME { ... } NAME;` in a C header."""
    import re

    text = re.sub(r"/\*.*?\*/", " ", header, flags=re.S)
    m = re.search(r"typedef struct %s\s*\{(.*?)\}\s*%s\s*;" % (name, name), text, re.S)
    assert m, "no struct %s in the header" % name
    names = []
    for decl in m.group(1).split(";"):
        decl = decl.strip()
        if not decl:
            continue
        parts = [p.strip() for p in decl.split(",")]
        # the first part holds the type: its last word is the first name
        names.append(re.findall(r"\w+", parts[0])[-1])
        names += [re.findall(r"\w+", p)[-1] for p in parts[1:]]
    return names


def test_ctypes_structs_match_the_header():
    """The binding's mirrors of the public structs have the header's members
    in its order: a member the C side gained and the mirror lacks would make
    calls read or write past the Python-owned struct."""
    import os
    from coda import _lib

    header = os.path.join(os.path.dirname(__file__), "..", "..", "include", "coda.h")
    if not os.path.exists(header):
        pytest.skip("include/coda.h not beside the package (installed elsewhere)")
    text = open(header).read()
    for cls, cname in [(_lib.Tensor, "coda_tensor"), (_lib.ContextOptions, "coda_context_options"),
                       (_lib.ArgInfo, "coda_arg_info"), (_lib.Tiling, "coda_tiling"),
                       (_lib.ParamInfo, "coda_param_info"), (_lib.ParamValue, "coda_param_value"),
                       (_lib.BindOptions, "coda_bind_options"), (_lib.AttnMask, "coda_attn_mask")]:
        assert [f[0] for f in cls._fields_] == _c_struct_members(text, cname), cname
    # the versioned struct: its size comes from the mirror, and the library
    # takes the mirror's size as one of its layouts (a mirror of the wrong
    # size is the next test's refusal)
    opts = _lib.new_context_options()
    assert _lib.ContextOptions._fields_[0] == ("struct_size", ctypes.c_size_t)
    assert opts.struct_size == ctypes.sizeof(_lib.ContextOptions)
    msg = ctypes.create_string_buffer(512)
    assert _lib.lib.coda_context_options_check(ctypes.byref(opts), msg, len(msg)) == 0, msg.value
    assert msg.value == b""


def _mirror(fields):
    """A ctypes struct of these (name, type) fields, struct_size its own size."""
    cls = type("Mirror", (ctypes.Structure,), {"_fields_": fields})
    m = cls()
    m.struct_size = ctypes.sizeof(cls)
    return m


def test_context_options_of_a_wrong_size_are_refused():
    """A mirror that does not match the library's struct is refused with a
    Python exception naming the struct and the sizes, instead of the library
    reading or writing past it; mirrors of the older layouts (without
    own_stream; without arch and compile_cc) are accepted, the members they
    lack taking their defaults."""
    from coda import _core, _lib

    fields = list(_lib.ContextOptions._fields_)
    current = ctypes.sizeof(_lib.ContextOptions)
    newer = _mirror(fields + [("a_later_member", ctypes.c_int64)])
    with pytest.raises(coda.CodaError) as e:
        _core._create_context(newer)
    assert e.value.status_name == "CODA_ERR_INVALID_ARGUMENT"
    m = e.value.message
    assert "coda_context_options.struct_size is %d" % ctypes.sizeof(newer) in m, m
    assert "larger than the %d bytes" % current in m, m

    unset = _lib.ContextOptions()  # struct_size 0
    with pytest.raises(coda.CodaError) as e:
        _core._create_context(unset)
    assert "struct_size is 0" in e.value.message and str(current) in e.value.message

    names = [f[0] for f in fields]
    for last in ("own_stream", "arch"):  # the first and second layouts
        h = _core._create_context(_mirror(fields[: names.index(last)]))
        assert h.value
        _lib.lib.coda_context_destroy(h)

    no_cache_dir = fields[: names.index("cache_dir")]
    short = _mirror(no_cache_dir)
    with pytest.raises(coda.CodaError) as e:
        _core._create_context(short)
    m = e.value.message
    assert "struct_size is %d" % ctypes.sizeof(short) in m, m
    assert "not the size of a coda_context_options layout" in m and str(current) in m, m


def test_program_variant():
    """Program.variant: a rule and names give the built-in variant; the
    refusals carry the pass's message."""
    src = coda.Program.builtin("llama_swiglu")
    rule = coda.Program.parse("param eps = 1e-5\ninput ss : rowsum f32\ninput inv_n : scalar f32\n"
                              "r = rsqrt(ss * inv_n + eps)\n")
    q = src.variant(fold=[rule], drop=["z"])
    assert q.text == coda.Program.builtin("llama_swiglu_folded_infer").text
    k = coda.Program.builtin("llama_lm_head").variant(keep="l", keep_as="z")
    assert k.text == coda.Program.builtin("llama_lm_head_keep").text
    with pytest.raises(coda.CodaError) as e:
        src.variant(drop=["w"])
    assert "'w' is not an output or a finisher of the program (it has: z, y)" in e.value.message


ZLOSS = """
param zc = 1e-4
input tgt : row i32
output dl : f64
l = acc
reduce lp = rowlse(l)
finish lse = lse(lp)
hit = col == tgt
g = exp(l - lse) * (1 + 2 * zc * lse) * (tgt >= 0) - hit
store dl = g
reduce lossp = total(hit * (lse - l + zc * lse * lse))
finish loss = sum(lossp)
"""


def test_whole_operator_in_one_program():
    """z-loss reads its row's finished log-sum-exp and totals the loss: one
    program, one gemm_epilogue, against numpy in fp64."""
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.parse(ZLOSS)
    assert p.num_passes == 3 and p.passes.startswith("passes (3):")
    assert p.arg("loss").kind == "finish"
    M, N, K, zc = 70, 300, 16, 1e-4
    A, W = rand(M, K), rand(N, K)
    tgt = RNG.integers(-1, N, size=M).astype(np.int32)
    out = ctx.gemm_epilogue(p, A, W, trans_b=True, tgt=tgt)
    l = A @ W.T
    lse = np.log(np.exp(l - l.max(1, keepdims=True)).sum(1)) + l.max(1)
    hit = (np.arange(N)[None, :] == tgt[:, None]).astype(float)
    dl = np.exp(l - lse[:, None]) * (1 + 2 * zc * lse[:, None]) * (tgt >= 0)[:, None] - hit
    loss = ((lse - l[np.arange(M), np.maximum(tgt, 0)] + zc * lse * lse) * (tgt >= 0)).sum()
    np.testing.assert_allclose(out["lse"][:, 0], lse, rtol=1e-12)
    np.testing.assert_allclose(out["dl"], dl, rtol=1e-12, atol=1e-14)
    assert out["loss"].shape == (1, 1)
    np.testing.assert_allclose(out["loss"][0, 0], loss, rtol=1e-12)
    # without finish=True the statistic the program reads is still finished
    out2 = ctx.gemm_epilogue(p, A, W, trans_b=True, tgt=tgt, finish=False)
    np.testing.assert_allclose(out2["dl"], dl, rtol=1e-12, atol=1e-14)


def _attention_ref(qkv, B, hq, hkv, window, scale):
    """Causal GQA softmax attention with the sliding mask (query t sees keys
    t - window < j <= t) written out in numpy fp64: (out, lse, P, q, k, v)."""
    M, N = qkv.shape
    T, hd = M // B, N // (hq + 2 * hkv)
    t = qkv.reshape(B, T, hq + 2 * hkv, hd).transpose(0, 2, 1, 3)
    g = hq // hkv
    q = t[:, :hq]
    k = np.repeat(t[:, hq:hq + hkv], g, axis=1)
    v = np.repeat(t[:, hq + hkv:], g, axis=1)
    i = np.arange(T)
    keep = (i[None] <= i[:, None]) & (i[None] > i[:, None] - (window if window else T))
    s = np.where(keep, scale * q @ k.transpose(0, 1, 3, 2), -np.inf)
    mx = s.max(-1, keepdims=True)
    lse = mx + np.log(np.exp(s - mx).sum(-1, keepdims=True))
    p = np.exp(s - lse)
    return p @ v, lse[..., 0], p, q, k, v


def test_attention_window_and_scale_f64():
    """attention_forward / _backward with a window and a scale (the _mask
    calls) against the fp64 reference: out, lse and the gradient of qkv of
    the loss sum(out * dout) (dP = dout v^T, dS = P (dP - rowsum(dout out)))."""
    ctx = coda.Context("cpu", precision="f64")
    B, T, hq, hkv, hd = 2, 9, 4, 2, 8
    for window, scale in [(3, 0.3), (1, 0.0), (0, 0.7), (4, 0.0), (20, 0.25)]:
        qkv, dout = rand(B * T, (hq + 2 * hkv) * hd), rand(B * T, hq * hd)
        out, lse = ctx.attention_forward(qkv, B, hq, hkv, window=window, scale=scale)
        sc = scale or 1 / np.sqrt(hd)
        o4, l4, p, q, k, v = _attention_ref(qkv, B, hq, hkv, window, sc)
        np.testing.assert_allclose(out, o4.transpose(0, 2, 1, 3).reshape(B * T, hq * hd), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(lse, l4.transpose(0, 2, 1).reshape(B * T, hq), rtol=1e-12, atol=1e-12)
        dqkv = ctx.attention_backward(qkv, out, lse, dout, B, hq, hkv, window=window, scale=scale)
        do4 = dout.reshape(B, T, hq, hd).transpose(0, 2, 1, 3)
        dp = do4 @ v.transpose(0, 1, 3, 2)
        ds = p * (dp - (do4 * o4).sum(-1, keepdims=True))
        dq, dk, dv = sc * ds @ k, sc * ds.transpose(0, 1, 3, 2) @ q, p.transpose(0, 1, 3, 2) @ do4
        g = hq // hkv
        dk, dv = dk.reshape(B, hkv, g, T, hd).sum(2), dv.reshape(B, hkv, g, T, hd).sum(2)
        want = np.concatenate([dq, dk, dv], axis=1).transpose(0, 2, 1, 3).reshape(qkv.shape)
        np.testing.assert_allclose(dqkv, want, rtol=1e-10, atol=1e-10)
    # window 1: each query sees only itself, so out is its own value head
    qkv = rand(T, 3 * hd)
    out, _ = ctx.attention_forward(qkv, 1, 1, 1, window=1)
    np.testing.assert_allclose(out, qkv[:, 2 * hd:], rtol=1e-12, atol=1e-12)


def test_attention_bad_mask_refused():
    """A negative window or scale is refused by the library with its message;
    a window no C int holds or a non-number, by the binding."""
    ctx = coda.Context("cpu", precision="f64")
    qkv = rand(8, 3 * 4)
    out, lse = ctx.attention_forward(qkv, 1, 1, 1)
    for kw in ({"window": -1}, {"scale": -0.5}, {"scale": float("nan")}):
        with pytest.raises(coda.CodaError) as e:
            ctx.attention_forward(qkv, 1, 1, 1, **kw)
        assert e.value.status_name == "CODA_ERR_INVALID_ARGUMENT", kw
        assert ("window" if "window" in kw else "scale") in e.value.message, e.value.message
        with pytest.raises(coda.CodaError) as e:
            ctx.attention_backward(qkv, out, lse, rand(8, 4), 1, 1, 1, **kw)
        assert e.value.status_name == "CODA_ERR_INVALID_ARGUMENT", kw
    with pytest.raises(coda.CodaError, match="C int"):
        ctx.attention_forward(qkv, 1, 1, 1, window=2**31)
    with pytest.raises(TypeError, match="window"):
        ctx.attention_forward(qkv, 1, 1, 1, window=2.5)


def test_context_arch_option():
    """arch picks the CUDA mainloop: a CPU context takes each value (the
    choice matters only on a GPU), another name is refused in Python, and a
    raw value out of range or compile_cc without arch SM80 is refused by the
    library naming the member."""
    from coda import _core, _lib

    for a in ("auto", "sm90", "sm80"):
        coda.Context(arch=a).close()
    with pytest.raises(ValueError, match="arch must be"):
        coda.Context(arch="sm75")
    o = _lib.new_context_options()
    o.arch = 7
    with pytest.raises(coda.CodaError) as e:
        _core._create_context(o)
    assert "coda_context_options.arch is 7" in e.value.message
    o = _lib.new_context_options()
    o.compile_cc = 90
    with pytest.raises(coda.CodaError) as e:
        _core._create_context(o)
    assert "compile_cc is 90" in e.value.message and "with arch SM80" in e.value.message
    o.arch = 2
    h = _core._create_context(o)
    assert h.value
    _lib.lib.coda_context_destroy(h)
