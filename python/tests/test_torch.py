"""coda.torch: torch tensors in the core API, the custom ops' forward against
a torch fp64 reference, gradcheck in float64 (CPU exact mode), opcheck, and
torch.compile(fullgraph=True). Skipped where PyTorch is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (scripts/install-deps.sh installs it with CODA_PYTHON_TORCH=1)")

import coda  # noqa: E402
import coda.torch as ct  # noqa: E402


def ref_residual_norm(a, wo, res, w):
    x = a @ wo.T + res
    return x, x * w, torch.rsqrt((x * x).mean(-1) + 1e-5)


def ref_swiglu(h, wgu, r):
    acc = (h @ wgu.T) * r[:, None]
    g, u = acc[:, 0::2], acc[:, 1::2]
    return acc, torch.nn.functional.silu(g) * u


def make(M=6, K=5, N=8, F=4, dtype=torch.float64, grad=True):
    g = torch.Generator().manual_seed(7)
    t = lambda *s, scale=1.0: (torch.randn(*s, generator=g, dtype=torch.float64) * scale).to(dtype).requires_grad_(grad)  # noqa: E731
    return dict(a=t(M, K), wo=t(N, K, scale=0.5), res=t(M, N), w=t(N), wgu=t(2 * F, N, scale=0.5))


def test_core_api_on_torch_tensors():
    ctx = coda.Context("cpu", precision="f64")
    p = coda.Program.builtin("llama_residual_norm", dtype="f64")
    d = make(grad=False)
    out = ctx.gemm_epilogue(p, d["a"], d["wo"], trans_b=True, res=d["res"], w=d["w"])
    assert isinstance(out["x"], torch.Tensor)
    x, h, r = ref_residual_norm(d["a"], d["wo"], d["res"], d["w"])
    torch.testing.assert_close(out["x"], x)
    torch.testing.assert_close(out["h"], h)
    torch.testing.assert_close(out["r"][:, 0], r)


def test_bf16_tensors():
    ctx = coda.Context("cpu")
    p = coda.Program.builtin("llama_residual_norm")
    d = make(dtype=torch.bfloat16, grad=False)
    out = ctx.gemm_epilogue(p, d["a"], d["wo"], trans_b=True, res=d["res"], w=d["w"])
    assert out["x"].dtype == torch.bfloat16 and out["r"].dtype == torch.float32
    x, _, r = ref_residual_norm(*(d[k].double() for k in ("a", "wo", "res", "w")))
    torch.testing.assert_close(out["x"].double(), x, rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(out["r"][:, 0].double(), r, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
def test_ops_forward(dtype):
    d = make(dtype=dtype, grad=False)
    x, h, r = ct.llama_residual_norm(d["a"], d["wo"], d["res"], d["w"])
    z, y = ct.llama_swiglu(h, d["wgu"], r)
    dd = {k: v.double() for k, v in d.items()}
    rx, rh, rr = ref_residual_norm(dd["a"], dd["wo"], dd["res"], dd["w"])
    rz, ry = ref_swiglu(rh, dd["wgu"], rr)
    tol = {torch.float64: 1e-10, torch.float32: 1e-4, torch.bfloat16: 5e-2}[dtype]
    for got, want in ((x, rx), (h, rh), (r, rr), (z, rz), (y, ry)):
        torch.testing.assert_close(got.double(), want, rtol=tol, atol=tol)


def test_gradcheck_residual_norm():
    d = make()
    assert torch.autograd.gradcheck(ct.llama_residual_norm, (d["a"], d["wo"], d["res"], d["w"]))


def test_gradcheck_swiglu():
    d = make()
    h = d["res"]
    r = (torch.rand(h.shape[0], dtype=torch.float64) + 0.5).requires_grad_(True)
    assert torch.autograd.gradcheck(ct.llama_swiglu, (h, d["wgu"], r))


def test_gradcheck_chain():
    d = make()

    def block(a, wo, res, w, wgu):
        x, h, r = ct.llama_residual_norm(a, wo, res, w)
        z, y = ct.llama_swiglu(h, wgu, r)
        return x, y

    assert torch.autograd.gradcheck(block, tuple(d[k] for k in ("a", "wo", "res", "w", "wgu")))


def test_backward_matches_torch_f32():
    d = make(dtype=torch.float32)
    x, h, r = ct.llama_residual_norm(d["a"], d["wo"], d["res"], d["w"])
    z, y = ct.llama_swiglu(h, d["wgu"], r)
    (y.square().sum() + x.sum()).backward()
    got = {k: v.grad.clone() for k, v in d.items()}
    d2 = {k: v.detach().double().requires_grad_(True) for k, v in d.items()}
    rx, rh, rr = ref_residual_norm(d2["a"], d2["wo"], d2["res"], d2["w"])
    _, ry = ref_swiglu(rh, d2["wgu"], rr)
    (ry.square().sum() + rx.sum()).backward()
    for k in d:
        torch.testing.assert_close(got[k].double(), d2[k].grad, rtol=1e-3, atol=1e-3)


def test_opcheck():
    d = make(grad=False)
    r = torch.rand(6, dtype=torch.float64) + 0.5
    torch.library.opcheck(torch.ops.coda.llama_residual_norm.default, (d["a"], d["wo"], d["res"], d["w"]),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.coda.llama_swiglu.default, (d["res"], d["wgu"], r),
                          test_utils=("test_schema", "test_faketensor"))


class TinyMLP(torch.nn.Module):
    def __init__(self, D=8, F=4, K=5, dtype=torch.float32):
        super().__init__()
        g = torch.Generator().manual_seed(3)
        self.wo = torch.nn.Parameter(torch.randn(D, K, generator=g, dtype=dtype) * 0.3)
        self.wn = torch.nn.Parameter(torch.ones(D, dtype=dtype))
        self.wgu = torch.nn.Parameter(torch.randn(2 * F, D, generator=g, dtype=dtype) * 0.3)

    def forward(self, a, res):
        x, h, r = ct.llama_residual_norm(a, self.wo, res, self.wn)
        z, y = ct.llama_swiglu(h, self.wgu, r)
        return x, y


def test_torch_compile_fullgraph():
    m = TinyMLP()
    a, res = torch.randn(6, 5), torch.randn(6, 8)
    eager = m(a, res)
    try:
        compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
        out = compiled(a, res)
    except Exception as e:  # noqa: BLE001
        pytest.fail("torch.compile(fullgraph=True) failed: %s" % e)
    for e_, c_ in zip(eager, out):
        torch.testing.assert_close(c_, e_)
    out[1].sum().backward()
    assert m.wgu.grad is not None and m.wo.grad is not None


def test_torch_compile_inductor_cpu():
    m = TinyMLP()
    a, res = torch.randn(6, 5), torch.randn(6, 8)
    try:
        compiled = torch.compile(m, fullgraph=True)
        out = compiled(a, res)
    except Exception as e:  # noqa: BLE001
        pytest.skip("inductor does not work on this machine's CPU set-up: %s" % str(e).splitlines()[0])
    for e_, c_ in zip(m(a, res), out):
        torch.testing.assert_close(c_, e_)


def test_op_errors_raise_coda_error():
    d = make(grad=False)
    with pytest.raises(coda.CodaError) as e:
        ct.llama_residual_norm(d["a"], d["wo"], d["res"][:, :3].contiguous(), d["w"])
    assert e.value.status_name == "CODA_ERR_SHAPE" and "res" in e.value.message


@pytest.mark.skipif(not torch.cuda.is_available() or not coda.cuda_available(), reason="needs a CUDA GPU")
def test_cuda_ops_on_current_stream():
    d = {k: v.detach().cuda().to(torch.bfloat16) for k, v in make(M=64, K=64, N=128, F=64).items()}
    x, h, r = ct.llama_residual_norm(d["a"], d["wo"], d["res"], d["w"])
    z, y = ct.llama_swiglu(h, d["wgu"], r)
    rx, rh, rr = ref_residual_norm(*(d[k].double() for k in ("a", "wo", "res", "w")))
    torch.testing.assert_close(x.double(), rx, rtol=3e-2, atol=3e-2)
    assert ct.context_for(d["a"]).stream == torch.cuda.current_stream().cuda_stream
    np.testing.assert_equal(y.shape, (64, 64))
