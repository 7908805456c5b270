"""A model of gemm_sm80.cuh's index math, checked against a matrix product.

The sm_80 mainloop cannot run without a GPU, so its address arithmetic is
restated here and executed on numpy arrays: the cp.async k-block loads
(padded rows, zero fill past M, N, K), the ldmatrix / ldmatrix.trans lane
addressing and register contents (PTX ISA, ldmatrix), the mma.sync m16n8k16
fragments (PTX ISA, mma.m16n8k16 for .bf16/.f16) and the AccFragment
layout the epilogue reads (value i at row row0 + 8((i>>1)&1), column
col0 + 8(i>>2) + (i&1)). Every layout (trans_a, trans_b), ragged shapes,
K odd, NaN in the padding of the stored rows. The formulas are copies of
the header's: change both together. Exit 77 without numpy."""
import sys

try:
    import numpy as np
except ImportError:
    print("sm80_fragment_model: skipped (no numpy)")
    sys.exit(77)

BK = 32  # kBK


def pitch(kmajor, ext):
    return 2 * BK + 16 if kmajor else 2 * ext + 16


def operand_bytes(kmajor, ext):
    return (ext if kmajor else BK) * pitch(kmajor, ext)


def load_operand(smem, base, kmajor, ext, nt, g, ld, r0, k0, lim_r, lim_k):
    """load_operand<KMAJOR, EXT, NT>: smem holds 16-bit values (index = byte / 2)."""
    p = pitch(kmajor, ext)
    vpr = (BK if kmajor else ext) // 8
    nv = (ext if kmajor else BK) * vpr
    assert nv % nt == 0
    for v in range(nv):
        row, u = v // vpr, v % vpr
        outer = r0 + row if kmajor else k0 + row
        inner = k0 + 8 * u if kmajor else r0 + 8 * u
        olim, ilim = (lim_r, lim_k) if kmajor else (lim_k, lim_r)
        n = min(8, ilim - inner) if outer < olim and inner < ilim else 0
        addr = base + row * p + u * 16
        for e in range(8):
            smem[(addr >> 1) + e] = g[outer * ld + inner + e] if e < n else 0.0


def ldmatrix_x4(smem, addrs, trans):
    """regs[lane][i] = (low, high) 16-bit values of register i."""
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        rows = [[smem[(addrs[8 * i + j] >> 1) + c] for c in range(8)] for j in range(8)]
        for t in range(32):
            g, q = t // 4, t % 4
            regs[t][i] = (rows[2 * q][g], rows[2 * q + 1][g]) if trans else (rows[g][2 * q], rows[g][2 * q + 1])
    return regs


def mma_16816(d, a, b0, b1):
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for t in range(32):
        g, q = t // 4, t % 4
        A[g, 2 * q:2 * q + 2] = a[t][0]
        A[g + 8, 2 * q:2 * q + 2] = a[t][1]
        A[g, 2 * q + 8:2 * q + 10] = a[t][2]
        A[g + 8, 2 * q + 8:2 * q + 10] = a[t][3]
        B[2 * q:2 * q + 2, g] = b0[t]
        B[2 * q + 8:2 * q + 10, g] = b1[t]
    C = A @ B
    for t in range(32):
        g, q = t // 4, t % 4
        d[t][0] += C[g, 2 * q]
        d[t][1] += C[g, 2 * q + 1]
        d[t][2] += C[g + 8, 2 * q]
        d[t][3] += C[g + 8, 2 * q + 1]


def stored(x, rng):
    """x as stored rows with the pitch rounded up to 8 values, NaN padding."""
    ld = (x.shape[1] + 7) // 8 * 8
    g = np.full(x.shape[0] * ld, np.nan)
    for r in range(x.shape[0]):
        g[r * ld:r * ld + x.shape[1]] = x[r]
    return g, ld


def tile(M, N, K, ta, tb, tm, tn, BM=128, BN=128):
    rng = np.random.default_rng(1)
    Al, Bl = rng.standard_normal((M, K)), rng.standard_normal((K, N))
    ak, bk = not ta, tb  # K-major operands
    ga, lda = stored(Al if ak else Al.T, rng)
    gb, ldb = stored(Bl.T if bk else Bl, rng)
    nt = 2 * BM
    sa = max(operand_bytes(True, BM), operand_bytes(False, BM))
    ss = sa + max(operand_bytes(True, BN), operand_bytes(False, BN))
    pa, pb = pitch(ak, BM), pitch(bk, BN)
    m0, n0 = tm * BM, tn * BN
    frag = {(gi, w): [[0.0] * (BN // 2) for _ in range(32)] for gi in range(BM // 64) for w in range(4)}
    for kb in range((K + BK - 1) // BK):
        smem = np.full(ss // 2, np.nan)
        load_operand(smem, 0, ak, BM, nt, ga, lda, m0, kb * BK, M, K)
        load_operand(smem, sa, bk, BN, nt, gb, ldb, n0, kb * BK, N, K)
        for (gi, w), f in frag.items():
            wm = gi * 64 + w * 16
            for kk in range(BK // 16):
                lanes = [(l >> 3, l & 7) for l in range(32)]
                if ak:
                    aa = [(wm + j + 8 * (i & 1)) * pa + (kk * 16 + 8 * (i >> 1)) * 2 for i, j in lanes]
                else:
                    aa = [(kk * 16 + j + 8 * (i >> 1)) * pa + (wm + 8 * (i & 1)) * 2 for i, j in lanes]
                a = ldmatrix_x4(smem, aa, not ak)
                for p in range(BN // 16):
                    if bk:
                        ba = [sa + (p * 16 + j + 8 * (i >> 1)) * pb + (kk * 16 + 8 * (i & 1)) * 2 for i, j in lanes]
                    else:
                        ba = [sa + (kk * 16 + j + 8 * (i & 1)) * pb + (p * 16 + 8 * (i >> 1)) * 2 for i, j in lanes]
                    b = ldmatrix_x4(smem, ba, not bk)
                    for j, (r0, r1) in ((2 * p, (0, 1)), (2 * p + 1, (2, 3))):
                        d = [f[t][4 * j:4 * j + 4] for t in range(32)]
                        mma_16816(d, a, [b[t][r0] for t in range(32)], [b[t][r1] for t in range(32)])
                        for t in range(32):
                            f[t][4 * j:4 * j + 4] = d[t]
    got = np.full((M, N), np.nan)
    for (gi, w), f in frag.items():
        for t in range(32):
            row0, col0 = m0 + gi * 64 + w * 16 + t // 4, n0 + 2 * (t % 4)
            for i in range(BN // 2):
                r, c = row0 + 8 * ((i >> 1) & 1), col0 + 8 * (i >> 2) + (i & 1)
                if r < M and c < N:
                    got[r, c] = f[t][i]
    ref = (Al @ Bl)[m0:m0 + BM, n0:n0 + BN]
    got = got[m0:m0 + BM, n0:n0 + BN]
    err = np.inf if np.isnan(got).any() else float(np.max(np.abs(got - ref)))
    ok = err <= 1e-9 * max(1.0, float(np.max(np.abs(ref))))
    print(f"{M}x{N}x{K} trans_a={int(ta)} trans_b={int(tb)} tile ({tm}, {tn}): max err {err:.3g} {'ok' if ok else 'FAIL'}")
    return ok


def main():
    ok = True
    for ta in (False, True):
        for tb in (False, True):
            ok &= tile(97, 150, 77, ta, tb, 0, 0)  # K odd: partial vectors, rows past M
    ok &= tile(200, 264, 72, True, False, 1, 2)  # a last tile of rows and of columns
    ok &= tile(200, 264, 72, False, True, 1, 2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
