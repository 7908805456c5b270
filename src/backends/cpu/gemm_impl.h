/* Body of the blocked GEMM for one compute type; included by gemm.c with
 * REAL (float or double) and SFX (f32 or f64) defined. */
#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)

/* Register-blocked micro-kernel: an MR x (NV*VW) block of c stays in vector
 * registers while k runs; c += a_sliver · b_sliver. GCC vector extensions
 * give the vector width; contraction to FMA is allowed only in the FMA
 * variants. Per element the sum is c = c + a[k]*b[k] for k in order. */
#define CPU_KERNEL(name, attr, VW)                                              \
  typedef REAL CAT(CAT(name, SFX), v)                                             \
      __attribute__((vector_size((VW) * sizeof(REAL)), aligned(sizeof(REAL)),  \
                     may_alias));                                               \
  attr static void CAT(name, SFX)(int kc, const REAL *restrict a,               \
                                  const REAL *restrict b, REAL *restrict c,     \
                                  int64_t ldc) {                                \
    typedef CAT(CAT(name, SFX), v) vt;                                            \
    vt r[CPU_MR][CPU_NV];                                                       \
    for (int i = 0; i < CPU_MR; i++)                                            \
      for (int j = 0; j < CPU_NV; j++)                                          \
        r[i][j] = *(const vt *)(c + i * ldc + j * (VW));                        \
    for (int k = 0; k < kc; k++) {                                              \
      const REAL *bk = b + (int64_t)k * CPU_NV * (VW);                          \
      const REAL *ak = a + (int64_t)k * CPU_MR;                                 \
      vt bv[CPU_NV];                                                            \
      for (int j = 0; j < CPU_NV; j++) bv[j] = *(const vt *)(bk + j * (VW));    \
      for (int i = 0; i < CPU_MR; i++) {                                        \
        REAL ai = ak[i];                                                        \
        for (int j = 0; j < CPU_NV; j++) r[i][j] = bv[j] * ai + r[i][j];        \
      }                                                                         \
    }                                                                           \
    for (int i = 0; i < CPU_MR; i++)                                            \
      for (int j = 0; j < CPU_NV; j++)                                          \
        *(vt *)(c + i * ldc + j * (VW)) = r[i][j];                              \
  }

#define VW_GEN (16 / (int)sizeof(REAL))
#define VW_AVX2 (32 / (int)sizeof(REAL))
#define VW_AVX512 (64 / (int)sizeof(REAL))

CPU_KERNEL(kern_gen, , VW_GEN)
#if CPU_X86
CPU_KERNEL(kern_avx2, __attribute__((target("avx2,fma"), optimize("fp-contract=fast"))),
           VW_AVX2)
CPU_KERNEL(kern_avx512,
           __attribute__((target("avx512f,fma"), optimize("fp-contract=fast"))),
           VW_AVX512)
#endif

/* Gathers a kc x w panel: dst[k*w + x] = src[base + x*sx + k*sk] for
 * x < nvalid (converted to REAL), zero for nvalid <= x < w. */
static void CAT(pack, SFX)(REAL *restrict dst, int w, int nvalid, int kc,
                           const cpu_view *v, int64_t base, int64_t sx,
                           int64_t sk) {
#define PACK_LOOP(T, CONV)                                                    \
  do {                                                                        \
    const T *s = (const T *)v->data + base;                                   \
    if (sx == 1) {                                                            \
      for (int k = 0; k < kc; k++) {                                          \
        const T *sr = s + (int64_t)k * sk;                                    \
        REAL *d = dst + (int64_t)k * w;                                       \
        for (int x = 0; x < nvalid; x++) d[x] = (REAL)CONV(sr[x]);            \
      }                                                                       \
    } else {                                                                  \
      for (int x = 0; x < nvalid; x++) {                                      \
        const T *sc = s + (int64_t)x * sx;                                    \
        for (int k = 0; k < kc; k++) dst[(int64_t)k * w + x] = (REAL)CONV(sc[(int64_t)k * sk]); \
      }                                                                       \
    }                                                                         \
  } while (0)
#define ID(x) (x)
  switch (v->dtype) {
  case CODA_BF16: PACK_LOOP(uint16_t, cpu_bf16_to_f32); break;
  case CODA_F16: PACK_LOOP(uint16_t, cpu_f16_to_f32); break;
  case CODA_F32: PACK_LOOP(float, ID); break;
  case CODA_F64: PACK_LOOP(double, ID); break;
  case CODA_I32: PACK_LOOP(int32_t, ID); break;
  }
#undef PACK_LOOP
#undef ID
  if (nvalid < w)
    for (int k = 0; k < kc; k++)
      for (int x = nvalid; x < w; x++) dst[(int64_t)k * w + x] = 0;
}

static void CAT(gemm_tile, SFX)(const cpu_gemm_desc *g, cpu_gemm_ws *w,
                                int64_t r0, int mt, int64_t c0, int nt) {
  const int mr = w->mr, nr = w->nr;
  const int pm = (mt + mr - 1) / mr * mr, pn = (nt + nr - 1) / nr * nr;
  REAL *acc = (REAL *)w->acc, *pa = (REAL *)w->pa, *pb = (REAL *)w->pb;
  const int64_t ldc = w->ldacc;
  for (int i = 0; i < pm; i++)
    for (int j = 0; j < pn; j++) acc[i * ldc + j] = 0;
  for (int64_t k0 = 0; k0 < g->K; k0 += CPU_KC) {
    int kc = (int)(g->K - k0 < CPU_KC ? g->K - k0 : CPU_KC);
    for (int i = 0; i < pm; i += mr) {
      int nv = mt - i < mr ? mt - i : mr;
      CAT(pack, SFX)(pa + (int64_t)i * kc, mr, nv, kc, &g->a,
                     (r0 + i) * g->a.rs + k0 * g->a.cs, g->a.rs, g->a.cs);
    }
    for (int j = 0; j < pn; j += nr) {
      int nv = nt - j < nr ? nt - j : nr;
      CAT(pack, SFX)(pb + (int64_t)j * kc, nr, nv, kc, &g->b,
                     k0 * g->b.rs + (c0 + j) * g->b.cs, g->b.cs, g->b.rs);
    }
    for (int j = 0; j < pn; j += nr)
      for (int i = 0; i < pm; i += mr) {
        const REAL *a = pa + (int64_t)i * kc, *b = pb + (int64_t)j * kc;
        REAL *c = acc + i * ldc + j;
        switch (w->isa) {
#if CPU_X86
        case 2: CAT(kern_avx512, SFX)(kc, a, b, c, ldc); break;
        case 1: CAT(kern_avx2, SFX)(kc, a, b, c, ldc); break;
#endif
        default: CAT(kern_gen, SFX)(kc, a, b, c, ldc); break;
        }
      }
  }
}

#undef VW_GEN
#undef VW_AVX2
#undef VW_AVX512
#undef CPU_KERNEL
#undef CAT
#undef CAT_
