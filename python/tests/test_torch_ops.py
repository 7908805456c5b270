"""coda.torch's RMSNorm, qkv + RoPE, attention, linear + residual and LM head
+ cross-entropy ops, and GPT-2's LayerNorm + linear, residual + LayerNorm,
MLP and head: forward against torch references written from the
math (fp64), gradcheck in float64 (CPU exact mode), opcheck of the schemas
and fake implementations, torch.compile(fullgraph=True), and the same ops
on CUDA tensors (skipped without a GPU). Skipped where PyTorch is not
installed."""

import math

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed (scripts/install-deps.sh installs it with CODA_PYTHON_TORCH=1)")

import coda  # noqa: E402
import coda.torch as ct  # noqa: E402

F = torch.nn.functional
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available() or not coda.cuda_available(),
                                reason="needs a CUDA GPU and libcoda built with CUDA")


def gen(seed=11):
    return torch.Generator().manual_seed(seed)


def randn(g, *shape, scale=1.0, dtype=torch.float64):
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


# ------------------------------------------------------------- references

def ref_rmsnorm(x, w, eps):
    r = torch.rsqrt((x * x).mean(-1) + eps)
    return x * w, r


def ref_rope_hf_pairs(z, pos, inv_freq, n_rot_heads, hd):
    """Rotates adjacent pairs (2j, 2j+1) of the first n_rot_heads heads by
    pos * inv_freq[j]; the rest (V) unchanged."""
    out = z.clone()
    ang = pos.double()[:, None] * inv_freq.double()[None, :]        # M x hd/2
    c, s = torch.cos(ang), torch.sin(ang)
    for hh in range(n_rot_heads):
        blk = z[:, hh * hd:(hh + 1) * hd]
        a, b = blk[:, 0::2], blk[:, 1::2]
        out[:, hh * hd:(hh + 1) * hd][:, 0::2] = a * c - b * s
        out[:, hh * hd:(hh + 1) * hd][:, 1::2] = a * s + b * c
    return out


def ref_attention(qkv, B, hq, hkv, hd):
    """Causal GQA softmax attention written out (no SDPA)."""
    M = qkv.shape[0]
    T = M // B
    q = qkv[:, :hq * hd].reshape(B, T, hq, hd)
    k = qkv[:, hq * hd:(hq + hkv) * hd].reshape(B, T, hkv, hd)
    v = qkv[:, (hq + hkv) * hd:].reshape(B, T, hkv, hd)
    rep = hq // hkv
    k = k.repeat_interleave(rep, dim=2)
    v = v.repeat_interleave(rep, dim=2)
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(hd)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    s = s.masked_fill(~mask, float("-inf"))
    lse = torch.logsumexp(s, -1)                                     # B x h x T
    o = torch.einsum("bhts,bshd->bthd", torch.softmax(s, -1), v)
    return o.reshape(M, hq * hd), lse.permute(0, 2, 1).reshape(M, hq)


def ref_head_loss(x, wnf, wout, tgt, eps):
    h, r = ref_rmsnorm(x, wnf, eps)
    logits = (h * r[:, None]) @ wout.T
    return F.cross_entropy(logits, tgt, ignore_index=-100)


# ------------------------------------------------------------ shapes

B, T, HQ, HKV, HD = 2, 5, 4, 2, 8
M, D, FF, V = B * T, 16, 12, 37
NQKV = (HQ + 2 * HKV) * HD


def inv_freq(theta=10000.0, hd=HD):
    return 1.0 / theta ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd)


def positions():
    return torch.arange(T).repeat(B)


def targets(g):
    t = torch.randint(0, V, (M,), generator=g)
    t[1] = -100           # ignored
    t[M - 1] = V + 3      # outside [0, V): ignored as well
    return t


# ---------------------------------------------------------------- forward

@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_rmsnorm_forward(dtype, tol):
    g = gen()
    x, w = randn(g, M, D, dtype=dtype), randn(g, D, dtype=dtype)
    h, r = ct.llama_rmsnorm(x, w, 1e-6)
    rh, rr = ref_rmsnorm(x.double(), w.double(), 1e-6)
    torch.testing.assert_close(h.double(), rh, rtol=tol, atol=tol)
    torch.testing.assert_close(r.double(), rr, rtol=tol, atol=tol)


def test_rmsnorm_eps_is_used():
    g = gen()
    x, w = randn(g, M, D, scale=1e-3), randn(g, D)
    _, r5 = ct.llama_rmsnorm(x, w, 1e-5)
    _, r6 = ct.llama_rmsnorm(x, w, 1e-6)
    torch.testing.assert_close(r5, ref_rmsnorm(x, w, 1e-5)[1], rtol=1e-12, atol=0)
    torch.testing.assert_close(r6, ref_rmsnorm(x, w, 1e-6)[1], rtol=1e-12, atol=0)
    assert not torch.allclose(r5, r6)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-11), (torch.float32, 1e-4), (torch.bfloat16, 6e-2)])
def test_qkv_rope_forward(dtype, tol):
    g = gen()
    h, wqkv = randn(g, M, D, dtype=dtype), randn(g, NQKV, D, scale=0.3, dtype=dtype)
    r = (torch.rand(M, generator=g, dtype=torch.float64) + 0.5).to(ct._stat_dtype(dtype))
    pos, freq = ct.rope_tables(positions(), inv_freq(), HQ, HKV, dtype)
    qkv = ct.llama_qkv_rope(h, wqkv, r, pos, freq)
    z = (h.double() @ wqkv.double().T) * r.double()[:, None]
    want = ref_rope_hf_pairs(z, positions(), inv_freq(), HQ + HKV, HD)
    torch.testing.assert_close(qkv.double(), want, rtol=tol, atol=tol)


def test_rope_row_permutation_matches_hf_rotation():
    """Permuted rows + coda's adjacent-pair RoPE == HF's half-split RoPE on
    the original rows, up to the same permutation of the result."""
    g = gen()
    h, w_hf = randn(g, M, D), randn(g, NQKV, D, scale=0.3)
    r = torch.ones(M, dtype=torch.float64)
    perm = ct.rope_row_permutation(HQ, HKV, HD)
    assert sorted(perm.tolist()) == list(range(NQKV))
    pos, freq = ct.rope_tables(positions(), inv_freq(), HQ, HKV, torch.float64)
    qkv = ct.llama_qkv_rope(h, w_hf[perm], r, pos, freq)
    z = h @ w_hf.T                                  # HF layout
    ang = positions().double()[:, None] * inv_freq()[None, :]
    cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
    want = z.clone()
    for hh in range(HQ + HKV):
        blk = z[:, hh * HD:(hh + 1) * HD]
        rot = torch.cat([-blk[:, HD // 2:], blk[:, :HD // 2]], -1)
        want[:, hh * HD:(hh + 1) * HD] = blk * cos + rot * sin
    torch.testing.assert_close(qkv, want[:, perm], rtol=1e-11, atol=1e-11)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-11), (torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_attention_forward(dtype, tol):
    g = gen()
    qkv = randn(g, M, NQKV, dtype=dtype)
    o, lse = ct.attention(qkv, B, HQ, HKV)
    ro, rl = ref_attention(qkv.double(), B, HQ, HKV, HD)
    torch.testing.assert_close(o.double(), ro, rtol=tol, atol=tol)
    torch.testing.assert_close(lse.double(), rl, rtol=tol, atol=tol)


def test_linear_residual_forward():
    g = gen()
    a, w, res = randn(g, M, FF), randn(g, D, FF), randn(g, M, D)
    torch.testing.assert_close(ct.linear_residual(a, w, res), a @ w.T + res, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-11), (torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_lm_head_loss_forward(dtype, tol):
    g = gen()
    x, wnf, wout = randn(g, M, D, dtype=dtype), randn(g, D, dtype=dtype), randn(g, V, D, scale=0.5, dtype=dtype)
    t = targets(g)
    loss, count = ct.llama_lm_head_loss(x, wnf, wout, t, 1e-6)
    t_ref = t.clone()
    t_ref[t_ref >= V] = -100
    want = ref_head_loss(x.double(), wnf.double(), wout.double(), t_ref, 1e-6)
    torch.testing.assert_close(loss.double(), want, rtol=tol, atol=tol)
    assert int(count) == int((t_ref >= 0).sum())


def test_lm_head_loss_all_ignored_is_zero():
    g = gen()
    x, wnf, wout = randn(g, M, D), randn(g, D), randn(g, V, D)
    loss, count = ct.llama_lm_head_loss(x, wnf, wout, torch.full((M,), -100))
    assert float(loss) == 0.0 and float(count) == 0.0


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 1e-5), (torch.bfloat16, 3e-2)])
def test_lm_head_loss_keep_logits_gradients(dtype, tol):
    """keep_logits (stored logits, the backward a map over them) against
    the default (logits recomputed in the backward's GEMM): the same loss
    and count, and gradients equal in f64 / f32 and within bf16 rounding of
    the stored logits in bf16; targets outside [0, V) ignored in both."""
    g = gen(3)
    base = (randn(g, M, D), randn(g, D), randn(g, V, D, scale=0.5))
    t = targets(g)
    out = {}
    for keep in (False, True):
        x, wnf, wout = (a.detach().clone().to(dtype).requires_grad_(True) for a in base)
        loss, count = ct.llama_lm_head_loss(x, wnf, wout, t, 1e-6, keep_logits=keep)
        (2.5 * loss).backward()
        out[keep] = (loss.detach().double(), int(count)) + tuple(p.grad.double().clone() for p in (x, wnf, wout))
    a, b = out[False], out[True]
    assert a[1] == b[1]
    torch.testing.assert_close(b[0], a[0], rtol=tol, atol=tol)
    for ga, gb in zip(a[2:], b[2:]):
        scale = float(ga.abs().max())
        assert scale > 0
        torch.testing.assert_close(gb, ga, rtol=0, atol=tol * scale)


def test_lm_head_loss_bf16_gradients_against_fp64():
    """In bf16, the gradients of both head paths against the fp64 op, beside
    eager PyTorch's bf16 head (logits rounded to bf16, cross-entropy in
    fp32) on the same values: logits up to about 15, where the bf16
    rounding of the stored logits (keep_logits) shows."""
    g = gen(3)
    Mb, Db, Vb = 48, 64, 512
    base = (randn(g, Mb, Db), randn(g, Db), randn(g, Vb, Db, scale=0.5))
    t = torch.randint(0, Vb, (Mb,), generator=g)
    t[::7] = -100

    def grads(dtype, f):
        ps = tuple(a.detach().clone().to(dtype).requires_grad_(True) for a in base)
        f(*ps).backward()
        return [p.grad.double() for p in ps]

    def coda_head(keep):
        return lambda x, w, o: ct.llama_lm_head_loss(x, w, o, t, 1e-6, keep_logits=keep)[0]

    def eager(x, w, o):
        h = x * torch.rsqrt((x.float() * x.float()).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * w
        return F.cross_entropy((h @ o.T).float(), t, ignore_index=-100)

    ref = grads(torch.float64, coda_head(False))
    err = {}
    for name, f in (("recompute", coda_head(False)), ("keep", coda_head(True)), ("eager", eager)):
        err[name] = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(grads(torch.bfloat16, f), ref))
    assert err["recompute"] < 1.5e-2 and err["keep"] < 3e-2, err
    assert err["keep"] < 2.0 * err["eager"], err


# --------------------------------------------------------------- gradcheck

def req(*ts):
    return tuple(t.clone().requires_grad_(True) for t in ts)


def test_gradcheck_rmsnorm():
    g = gen()
    x, w = req(randn(g, M, D), randn(g, D))
    assert torch.autograd.gradcheck(lambda x, w: ct.llama_rmsnorm(x, w, 1e-6), (x, w))


def test_gradcheck_qkv_rope():
    g = gen()
    h, wqkv = req(randn(g, M, D), randn(g, NQKV, D, scale=0.3))
    r, = req(torch.rand(M, generator=g, dtype=torch.float64) + 0.5)
    pos, freq = ct.rope_tables(positions(), inv_freq(), HQ, HKV, torch.float64)
    assert torch.autograd.gradcheck(lambda h, w, r: ct.llama_qkv_rope(h, w, r, pos, freq), (h, wqkv, r))


def test_gradcheck_attention():
    g = gen()
    qkv, = req(randn(g, M, NQKV))
    assert torch.autograd.gradcheck(lambda q: ct.attention(q, B, HQ, HKV)[0], (qkv,))


def test_gradcheck_linear_residual():
    g = gen()
    args = req(randn(g, M, FF), randn(g, D, FF), randn(g, M, D))
    assert torch.autograd.gradcheck(ct.linear_residual, args)


def test_gradcheck_lm_head_loss():
    g = gen()
    x, wnf, wout = req(randn(g, M, D), randn(g, D), randn(g, V, D, scale=0.5))
    t = targets(g)
    assert torch.autograd.gradcheck(lambda x, w, o: ct.llama_lm_head_loss(x, w, o, t, 1e-6)[0], (x, wnf, wout))
    assert torch.autograd.gradcheck(lambda x, w, o: ct.llama_lm_head_loss(x, w, o, t, 1e-6, keep_logits=True)[0],
                                    (x, wnf, wout))


def test_gradcheck_block():
    """The ops chained as a Llama block (rmsnorm -> qkv+rope -> attention ->
    out-proj+residual+norm -> SwiGLU -> down+residual) and the head."""
    g = gen()
    x = randn(g, M, D)
    ws = req(randn(g, D), randn(g, NQKV, D, scale=0.3), randn(g, D, HQ * HD, scale=0.3), randn(g, D),
             randn(g, 2 * FF, D, scale=0.3), randn(g, D, FF, scale=0.3), randn(g, D), randn(g, V, D, scale=0.5))
    x, = req(x)
    pos, freq = ct.rope_tables(positions(), inv_freq(), HQ, HKV, torch.float64)
    t = targets(g)

    def model(x, wn1, wqkv, wo, wn2, wgu, wd, wnf, wout):
        h1, r1 = ct.llama_rmsnorm(x, wn1, 1e-6)
        o, _ = ct.attention(ct.llama_qkv_rope(h1, wqkv, r1, pos, freq), B, HQ, HKV)
        x1, h2, r2 = ct.llama_residual_norm(o, wo, x, wn2, 1e-6)
        _, y = ct.llama_swiglu(h2, wgu, r2)
        return ct.llama_lm_head_loss(ct.linear_residual(y, wd, x1), wnf, wout, t, 1e-6)[0]

    assert torch.autograd.gradcheck(model, (x,) + ws)


# ----------------------------------------------------------- schema, fake

def test_opcheck():
    g = gen()
    x, w = randn(g, M, D), randn(g, D)
    h, r = ct.llama_rmsnorm(x, w)
    pos, freq = ct.rope_tables(positions(), inv_freq(), HQ, HKV, torch.float64)
    wqkv = randn(g, NQKV, D, scale=0.3)
    qkv = ct.llama_qkv_rope(h, wqkv, r, pos, freq)
    o, lse = ct.attention(qkv, B, HQ, HKV)
    t = targets(g)
    utils = ("test_schema", "test_faketensor")
    cases = [
        (torch.ops.coda.llama_rmsnorm.default, (x, w, 1e-6)),
        (torch.ops.coda.llama_rmsnorm_backward.default, (x, w, r, h, r)),
        (torch.ops.coda.llama_qkv_rope.default, (h, wqkv, r, pos, freq)),
        (torch.ops.coda.llama_qkv_rope_backward.default, (h, wqkv, r, pos, freq, qkv, qkv)),
        (torch.ops.coda.attention.default, (qkv, B, HQ, HKV)),
        (torch.ops.coda.attention_backward.default, (qkv, o, lse, o, B, HQ, HKV)),
        (torch.ops.coda.linear_residual.default, (o, randn(g, D, HQ * HD), x)),
        (torch.ops.coda.llama_lm_head_loss.default, (x, w, randn(g, V, D), t, 1e-6)),
        (torch.ops.coda.llama_lm_head_loss_keep.default, (x, w, randn(g, V, D), t, 1e-6)),
    ]
    for op, args in cases:
        torch.library.opcheck(op, args, test_utils=utils)


class TinyBlockLM(torch.nn.Module):
    """A one-block Llama-like model on the coda ops, in float32."""

    def __init__(self):
        super().__init__()
        g = gen(5)
        p = lambda *s, scale=0.3: torch.nn.Parameter(randn(g, *s, scale=scale, dtype=torch.float32))  # noqa: E731
        self.wn1, self.wn2, self.wnf = p(D, scale=1.0), p(D, scale=1.0), p(D, scale=1.0)
        self.wqkv, self.wo = p(NQKV, D), p(D, HQ * HD)
        self.wgu, self.wd, self.wout = p(2 * FF, D), p(D, FF), p(V, D)
        pos, freq = ct.rope_tables(positions(), inv_freq(), HQ, HKV, torch.float32)
        self.register_buffer("pos", pos)
        self.register_buffer("freq", freq)

    def forward(self, x, t):
        h1, r1 = ct.llama_rmsnorm(x, self.wn1, 1e-6)
        o, _ = ct.attention(ct.llama_qkv_rope(h1, self.wqkv, r1, self.pos, self.freq), B, HQ, HKV)
        x1, h2, r2 = ct.llama_residual_norm(o, self.wo, x, self.wn2, 1e-6)
        _, y = ct.llama_swiglu(h2, self.wgu, r2)
        return ct.llama_lm_head_loss(ct.linear_residual(y, self.wd, x1), self.wnf, self.wout, t, 1e-6)[0]


def _grads(m):
    return {n: p.grad.clone() for n, p in m.named_parameters()}


def test_torch_compile_fullgraph_block():
    g = gen()
    x, t = randn(g, M, D, dtype=torch.float32), targets(g)
    m = TinyBlockLM()
    eager = m(x, t)
    eager.backward()
    ge = _grads(m)
    m.zero_grad()
    explain = torch._dynamo.explain(m)(x, t)
    assert explain.graph_break_count == 0 and explain.graph_count == 1
    torch._dynamo.reset()
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    out = compiled(x, t)
    torch.testing.assert_close(out, eager)
    out.backward()
    for n, gr in _grads(m).items():
        torch.testing.assert_close(gr, ge[n], rtol=1e-5, atol=1e-6)


def test_torch_compile_inductor_block():
    g = gen()
    x, t = randn(g, M, D, dtype=torch.float32), targets(g)
    m = TinyBlockLM()
    torch._dynamo.reset()
    try:
        out = torch.compile(m, fullgraph=True)(x, t)
    except Exception as e:  # noqa: BLE001
        pytest.skip("inductor does not work on this machine's CPU set-up: %s" % str(e).splitlines()[0])
    torch.testing.assert_close(out, m(x, t))


def test_errors_raise_coda_error():
    g = gen()
    with pytest.raises(coda.CodaError) as e:
        ct.attention(randn(g, M, NQKV + 1), B, HQ, HKV)   # not (heads_q + 2 heads_kv) * head_dim columns
    assert e.value.status_name == "CODA_ERR_SHAPE"
    with pytest.raises(coda.CodaError) as e:
        ct.attention(randn(g, M + 1, NQKV), B, HQ, HKV)   # rows not batch * seq
    assert e.value.status_name == "CODA_ERR_SHAPE"
    x, w = randn(g, M, D), randn(g, D)
    with pytest.raises(ValueError):
        ct.llama_rmsnorm(x, w, -1.0)


# ------------------------------------------------------------------ GPT-2

def ref_layernorm(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(((x - mu) ** 2).mean(-1, keepdim=True) + eps) * g + b


def ref_gelu_tanh(u):
    return 0.5 * u * (1.0 + torch.tanh(0.7978845608028654 * (u + 0.044715 * u ** 3)))


def test_gpt2_ops_against_math_opcheck_gradcheck():
    """The GPT-2 ops against their formulas in torch (float64), their
    schemas, fake implementations and autograd registration (opcheck), and
    their gradients in every differentiable input (gradcheck)."""
    g = gen(2)
    D, Fw, V, M, eps = 16, 24, 29, 10, 1e-5
    rnd = lambda *s: randn(g, *s)  # noqa: E731
    x, res = rnd(M, D), rnd(M, D)
    g1, b1, g2, b2 = 1 + 0.2 * rnd(D), 0.2 * rnd(D), 1 + 0.2 * rnd(D), 0.2 * rnd(D)
    wqkv, bqkv, wo, bo = 0.3 * rnd(D, 3 * D), 0.1 * rnd(3 * D), 0.3 * rnd(D, D), 0.1 * rnd(D)
    wfc, bfc, wp, bp = 0.3 * rnd(D, Fw), 0.1 * rnd(Fw), 0.3 * rnd(Fw, D), 0.1 * rnd(D)
    wout = 0.3 * rnd(V, D)
    tgt = torch.randint(0, V, (M,), generator=g)
    tgt[3] = -100
    utils = ("test_schema", "test_faketensor", "test_autograd_registration")
    ops = torch.ops.coda

    z, mu, rs = ops.gpt2_ln_linear(x, g1, b1, wqkv, bqkv, eps)
    assert torch.allclose(z, ref_layernorm(x, g1, b1, eps) @ wqkv + bqkv, rtol=1e-12, atol=1e-12)
    assert torch.allclose(mu, x.mean(-1)) and torch.allclose(rs, torch.rsqrt(x.var(-1, unbiased=False) + eps))
    x1, h2, mu2, rs2 = ops.gpt2_residual_ln(x, wo, bo, res, g2, eps)
    assert torch.allclose(x1, x @ wo + bo + res, rtol=1e-12, atol=1e-12)
    assert torch.allclose(h2, x1 * g2) and torch.allclose(mu2, x1.mean(-1))
    y, u = ops.gpt2_mlp(x1, h2, mu2, rs2, g2, b2, wfc, bfc, wp, bp)
    assert torch.allclose(u, ref_layernorm(x1, g2, b2, eps) @ wfc + bfc, rtol=1e-12, atol=1e-12)
    assert torch.allclose(y, x1 + ref_gelu_tanh(u) @ wp + bp, rtol=1e-12, atol=1e-12)
    logits = ref_layernorm(x, g1, b1, eps) @ wout.T
    want = F.cross_entropy(logits, tgt, ignore_index=-100)
    for keep in (False, True):
        loss, cnt = ct.gpt2_lm_head_loss(x, g1, b1, wout, tgt, eps, keep_logits=keep)
        assert abs(float(loss) - float(want)) < 1e-12 and float(cnt) == M - 1

    for op, args in [(ops.gpt2_ln_linear.default, (x, g1, b1, wqkv, bqkv, eps)),
                     (ops.gpt2_ln_linear_backward.default, (x, g1, b1, wqkv, bqkv, z, mu, rs, torch.ones_like(z))),
                     (ops.gpt2_residual_ln.default, (x, wo, bo, res, g2, eps)),
                     (ops.gpt2_residual_ln_backward.default, (x, wo, torch.ones_like(x))),
                     (ops.gpt2_mlp.default, (x1, h2, mu2, rs2, g2, b2, wfc, bfc, wp, bp)),
                     (ops.gpt2_mlp_backward.default, (x1, g2, b2, wfc, bfc, wp, mu2, rs2, u, torch.ones_like(y))),
                     (ops.gpt2_lm_head_loss.default, (x, g1, b1, wout, tgt, eps)),
                     (ops.gpt2_lm_head_loss_keep.default, (x, g1, b1, wout, tgt, eps))]:
        torch.library.opcheck(op, args, test_utils=utils)

    def leaf(*ts):
        return [t.clone().requires_grad_() for t in ts]

    assert torch.autograd.gradcheck(lambda *a: ops.gpt2_ln_linear(*a, eps)[0], leaf(x, g1, b1, wqkv, bqkv))
    assert torch.autograd.gradcheck(lambda *a: ops.gpt2_residual_ln(*a, g2, eps)[0], leaf(x, wo, bo, res))

    def mlp(x1, g, b, wfc, bfc, wp, bp):
        # h, mu, rs as gpt2_residual_ln makes them; the op's backward differentiates through x1
        h, mu, rs = x1 * g, x1.mean(-1), torch.rsqrt(x1.var(-1, unbiased=False) + eps)
        return ops.gpt2_mlp(x1, h, mu, rs, g, b, wfc, bfc, wp, bp)[0]

    assert torch.autograd.gradcheck(mlp, leaf(x1, g2, b2, wfc, bfc, wp, bp))
    for keep in (False, True):
        assert torch.autograd.gradcheck(
            lambda *a: ct.gpt2_lm_head_loss(*a[:3], a[3], tgt, eps, keep_logits=keep)[0], leaf(x, g1, b1, wout))


# -------------------------------------------------------------------- GPU

@needs_cuda
def test_cuda_ops_against_fp64():
    """bf16 CUDA tensors on torch's current stream, against the fp64
    references; gradients against the same ops' CPU exact mode."""
    g = gen()
    b, t_, hq, hkv, hd, d, ff, v = 2, 128, 4, 2, 64, 256, 512, 1024
    m_ = b * t_
    nqkv = (hq + 2 * hkv) * hd
    cpu = dict(x=randn(g, m_, d), wn1=randn(g, d), wqkv=randn(g, nqkv, d, scale=0.06),
               wo=randn(g, d, hq * hd, scale=0.06), wn2=randn(g, d), wgu=randn(g, 2 * ff, d, scale=0.06),
               wd=randn(g, d, ff, scale=0.04), wnf=randn(g, d), wout=randn(g, v, d, scale=0.06))
    tgt = torch.randint(0, v, (m_,), generator=g)
    pos_ids = torch.arange(t_).repeat(b)
    invf = inv_freq(hd=hd)

    def run(p, tg, dtype):
        pos, freq = ct.rope_tables(pos_ids.to(p["x"].device), invf, hq, hkv, dtype)
        h1, r1 = ct.llama_rmsnorm(p["x"], p["wn1"], 1e-6)
        qkv = ct.llama_qkv_rope(h1, p["wqkv"], r1, pos, freq)
        o, _ = ct.attention(qkv, b, hq, hkv)
        x1, h2, r2 = ct.llama_residual_norm(o, p["wo"], p["x"], p["wn2"], 1e-6)
        _, y = ct.llama_swiglu(h2, p["wgu"], r2)
        xo = ct.linear_residual(y, p["wd"], x1)
        return ct.llama_lm_head_loss(xo, p["wnf"], p["wout"], tg, 1e-6)[0], qkv, o

    ref = {k: t.clone().requires_grad_(True) for k, t in cpu.items()}
    rl, rq, ro = run(ref, tgt, torch.float64)
    rl.backward()
    gpu = {k: t.to("cuda", torch.bfloat16).requires_grad_(True) for k, t in cpu.items()}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())   # the copies above ran on the default stream
    with torch.cuda.stream(stream):
        gl, gq, go = run(gpu, tgt.cuda(), torch.bfloat16)
        gl.backward()
        assert ct.context_for(gpu["x"]).stream == stream.cuda_stream
    torch.cuda.synchronize()
    torch.testing.assert_close(gl.double().cpu(), rl.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(gq.double().cpu(), rq.detach(), rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(go.double().cpu(), ro.detach(), rtol=5e-2, atol=5e-2)
    for k in cpu:
        want = ref[k].grad
        got = gpu[k].grad.double().cpu()
        err = (got - want).norm() / want.norm()
        assert err < 3e-2, "gradient of %s: relative error %.3g" % (k, err)


@needs_cuda
@pytest.mark.parametrize("keep_logits", [False, True])
def test_cuda_gpt2_ops_against_fp64(keep_logits):
    """A GPT-2 block and the head from the ops on bf16 CUDA tensors on a
    side stream, against the same ops in the CPU exact mode: the loss, qkv
    and every gradient."""
    g = gen(5)
    b, t_, heads, d, ff, v, eps = 2, 128, 4, 256, 1024, 1024, 1e-5
    m_ = b * t_
    cpu = dict(x=randn(g, m_, d), g1=1 + 0.2 * randn(g, d), b1=0.2 * randn(g, d),
               wqkv=randn(g, d, 3 * d, scale=0.06), bqkv=0.1 * randn(g, 3 * d), wo=randn(g, d, d, scale=0.06),
               bo=0.1 * randn(g, d), g2=1 + 0.2 * randn(g, d), b2=0.2 * randn(g, d),
               wfc=randn(g, d, ff, scale=0.06), bfc=0.1 * randn(g, ff), wp=randn(g, ff, d, scale=0.03),
               bp=0.1 * randn(g, d), gf=1 + 0.2 * randn(g, d), bf=0.2 * randn(g, d),
               wout=randn(g, v, d, scale=0.06))
    tgt = torch.randint(0, v, (m_,), generator=g)

    def run(p, tg):
        qkv, _, _ = ct.gpt2_ln_linear(p["x"], p["g1"], p["b1"], p["wqkv"], p["bqkv"], eps)
        o, _ = ct.attention(qkv, b, heads, heads)
        x1, h2, mu2, rs2 = ct.gpt2_residual_ln(o, p["wo"], p["bo"], p["x"], p["g2"], eps)
        y, _ = ct.gpt2_mlp(x1, h2, mu2, rs2, p["g2"], p["b2"], p["wfc"], p["bfc"], p["wp"], p["bp"])
        return ct.gpt2_lm_head_loss(y, p["gf"], p["bf"], p["wout"], tg, eps, keep_logits=keep_logits)[0], qkv

    ref = {k: t.clone().requires_grad_(True) for k, t in cpu.items()}
    rl, rq = run(ref, tgt)
    rl.backward()
    gpu = {k: t.to("cuda", torch.bfloat16).requires_grad_(True) for k, t in cpu.items()}
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        gl, gq = run(gpu, tgt.cuda())
        gl.backward()
    torch.cuda.synchronize()
    torch.testing.assert_close(gl.double().cpu(), rl.detach(), rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(gq.double().cpu(), rq.detach(), rtol=5e-2, atol=5e-2)
    for k in cpu:
        want, got = ref[k].grad, gpu[k].grad.double().cpu()
        err = (got - want).norm() / want.norm()
        assert err < 3e-2, "gradient of %s: relative error %.3g" % (k, err)
