/* Each built-in Llama-3 program against the unfused operator it replaces,
 * in exact mode (fp64 context, f64 tensors): relative error <= 1e-10.
 *
 * The references are the ordinary operators written directly in double:
 * RMSNorm then a linear layer (for the row-scale reparameterization), RoPE
 * on adjacent pairs, SwiGLU, the RMSNorm backward by the chain rule (with
 * sum z dz formed from z and dz, not from the identities the programs use),
 * log-sum-exp and cross-entropy. Sizes are ragged against the tiling so
 * every partial spans several tiles and a partial last tile.
 *
 * llama_swiglu_bwd reads and writes packed 16-bit pairs (x2), which have
 * no f64 form; it is checked in fp32 compute with bf16 tensors against
 * the double reference of the same rounded inputs, with a bf16 tolerance,
 * and its exact-mode twin llama_swiglu_bwd_pairs is checked to 1e-10. */
#include "check.h"
#include "test_nn_llama_util.h"

#define TOL 1e-10
#define EPS 1e-5
#define PI_D 3.14159265358979323846

static coda_context c64, c32;
static const coda_tiling TL = {8, 16};
enum { M = 37, K = 24, N = 48 };

static double silu(double g) { return g / (1.0 + exp(-g)); }
static double dsilu(double g) {
  double s = 1.0 / (1.0 + exp(-g));
  return s * (1.0 + g * (1.0 - s));
}

/* reference: out (m x n) = a (m x k) b^T, b (n x k) */
static void mm_t(double *out, const double *a, const double *b, int m, int n, int k) {
  for (int i = 0; i < m; i++)
    for (int j = 0; j < n; j++) {
      double s = 0;
      for (int l = 0; l < k; l++) s += a[i * k + l] * b[j * k + l];
      out[i * n + j] = s;
    }
}
/* reference: out (m x k) = a (m x n) b, b (n x k) */
static void mm(double *out, const double *a, const double *b, int m, int n, int k) {
  for (int i = 0; i < m; i++)
    for (int l = 0; l < k; l++) {
      double s = 0;
      for (int j = 0; j < n; j++) s += a[i * n + j] * b[j * k + l];
      out[i * k + l] = s;
    }
}

/* RMSNorm: n = x r w, r = 1/sqrt(mean x^2 + eps); also h = x w. */
static void rmsnorm(const double *x, const double *w, int m, int d, double *n, double *r,
                    double *h) {
  for (int i = 0; i < m; i++) {
    double ss = 0;
    for (int k = 0; k < d; k++) ss += x[i * d + k] * x[i * d + k];
    r[i] = 1.0 / sqrt(ss / d + EPS);
    for (int k = 0; k < d; k++) {
      if (n) n[i * d + k] = x[i * d + k] * r[i] * w[k];
      if (h) h[i * d + k] = x[i * d + k] * w[k];
    }
  }
}

static void report(const char *what, double e) {
  CHECK_MSG(e <= TOL, "%s: relative error %.3g", what, e);
}

static void test_rmsnorm(void) {
  double *x = lt_vec(M * N, 1.5), *w = lt_vec(N, 1.0);
  double *n = lt_zeros(M * N), *r = lt_zeros(M), *h = lt_zeros(M * N);
  rmsnorm(x, w, M, N, n, r, h);
  lt_job j;
  lt_job_init(&j, c64, "llama_rmsnorm");
  lt_bind(&j, "x", CODA_F64, M, N, x);
  lt_bind(&j, "w", CODA_F64, 1, N, w);
  lt_bind(&j, "h", CODA_F64, M, N, NULL);
  lt_partial(&j, "ss", CODA_F64, M, N, TL);
  lt_bind(&j, "r", CODA_F64, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_map(c64, j.prog, M, N, j.args, TL), "rmsnorm map");
  lt_check(&j, coda_finish(c64, j.prog, "r", j.args, M, N, TL), "rmsnorm finish");
  double *gh = lt_out(&j, "h"), *gr = lt_out(&j, "r");
  /* the consumer's row scale reproduces the normalized rows */
  double *gn = lt_zeros(M * N);
  for (int i = 0; i < M * N; i++) gn[i] = gh[i] * gr[i / N];
  report("rmsnorm h", lt_relerr(gh, h, M * N));
  report("rmsnorm rstd", lt_relerr(gr, r, M));
  report("rmsnorm h*rstd vs RMSNorm(x)", lt_relerr(gn, n, M * N));
  lt_job_free(&j);
  free(x); free(w); free(n); free(r); free(h); free(gh); free(gr); free(gn);
}

static void test_residual_norm(void) {
  double *a = lt_vec(M * K, 1), *b = lt_vec(N * K, 0.5), *res = lt_vec(M * N, 1),
         *w = lt_vec(N, 1);
  double *s = lt_zeros(M * N), *r = lt_zeros(M), *h = lt_zeros(M * N);
  mm_t(s, a, b, M, N, K);
  for (int i = 0; i < M * N; i++) s[i] += res[i];
  rmsnorm(s, w, M, N, NULL, r, h);
  lt_job j;
  lt_job_init(&j, c64, "llama_residual_norm");
  coda_tensor A = coda_tensor_2d(a, CODA_F64, M, K), B = coda_tensor_2d(b, CODA_F64, N, K);
  lt_bind(&j, "res", CODA_F64, M, N, res);
  lt_bind(&j, "w", CODA_F64, 1, N, w);
  lt_bind(&j, "x", CODA_F64, M, N, NULL);
  lt_bind(&j, "h", CODA_F64, M, N, NULL);
  lt_partial(&j, "ss", CODA_F64, M, N, TL);
  lt_bind(&j, "r", CODA_F64, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "gemm");
  lt_check(&j, coda_finish(c64, j.prog, "r", j.args, M, N, TL), "finish");
  double *gx = lt_out(&j, "x"), *gh = lt_out(&j, "h"), *gr = lt_out(&j, "r");
  report("residual_norm x", lt_relerr(gx, s, M * N));
  report("residual_norm h", lt_relerr(gh, h, M * N));
  report("residual_norm rstd", lt_relerr(gr, r, M));
  lt_job_free(&j);

  /* plain residual */
  lt_job_init(&j, c64, "llama_residual");
  lt_bind(&j, "res", CODA_F64, M, N, res);
  lt_bind(&j, "x", CODA_F64, M, N, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "gemm");
  double *gx2 = lt_out(&j, "x");
  report("residual x", lt_relerr(gx2, s, M * N));
  lt_job_free(&j);
  free(a); free(b); free(res); free(w); free(s); free(r); free(h); free(gx); free(gh);
  free(gr); free(gx2);
}

/* Random RoPE table: per pair a frequency in turns, split hi + lo. */
static void rope_table(double *freq, double *fsum, int n) {
  for (int c = 0; c < n; c += 2) {
    double f = 0.1 * (lt_rand() + 1.0);
    freq[c] = f;
    freq[c + 1] = 1e-9 * lt_rand();
    fsum[c / 2] = freq[c] + freq[c + 1];
  }
}

static void test_qkv_rope(void) {
  double *x = lt_vec(M * K, 1.3), *wn = lt_vec(K, 1), *W = lt_vec(N * K, 0.4);
  double *n = lt_zeros(M * K), *r = lt_zeros(M), *h = lt_zeros(M * K), *z = lt_zeros(M * N);
  double *freq = lt_zeros(N), *fs = lt_zeros(N / 2), *pos = lt_zeros(M), *q = lt_zeros(M * N);
  rmsnorm(x, wn, M, K, n, r, h);
  mm_t(z, n, W, M, N, K); /* the unfused operator: RMSNorm(x) W^T */
  rope_table(freq, fs, N);
  for (int i = 0; i < M; i++) pos[i] = (double)((i * 7) % 61);
  for (int i = 0; i < M; i++)
    for (int p = 0; p < N / 2; p++) {
      double th = 2 * PI_D * pos[i] * fs[p], c = cos(th), s = sin(th);
      double z0 = z[i * N + 2 * p], z1 = z[i * N + 2 * p + 1];
      q[i * N + 2 * p] = z0 * c - z1 * s;
      q[i * N + 2 * p + 1] = z0 * s + z1 * c;
    }
  lt_job j;
  lt_job_init(&j, c64, "llama_qkv_rope");
  coda_tensor A = coda_tensor_2d(h, CODA_F64, M, K), B = coda_tensor_2d(W, CODA_F64, N, K);
  lt_bind(&j, "r", CODA_F64, M, 1, r);
  lt_bind(&j, "pos", CODA_I32, M, 1, pos);
  lt_bind(&j, "freq", CODA_F64, 1, N, freq);
  lt_bind(&j, "qkv", CODA_F64, M, N, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "gemm");
  double *g = lt_out(&j, "qkv");
  report("qkv_rope vs RoPE(RMSNorm(x) W^T)", lt_relerr(g, q, M * N));
  lt_job_free(&j);
  free(x); free(wn); free(W); free(n); free(r); free(h); free(z); free(freq); free(fs);
  free(pos); free(q); free(g);
}

static void test_swiglu(void) {
  const int F = N / 2;
  double *x = lt_vec(M * K, 1.3), *wn = lt_vec(K, 1), *W = lt_vec(N * K, 0.5);
  double *n = lt_zeros(M * K), *r = lt_zeros(M), *h = lt_zeros(M * K), *z = lt_zeros(M * N);
  double *y = lt_zeros(M * F);
  rmsnorm(x, wn, M, K, n, r, h);
  mm_t(z, n, W, M, N, K); /* rows of W interleaved: gate 2i, up 2i+1 */
  for (int i = 0; i < M; i++)
    for (int f = 0; f < F; f++) y[i * F + f] = silu(z[i * N + 2 * f]) * z[i * N + 2 * f + 1];
  lt_job j;
  lt_job_init(&j, c64, "llama_swiglu");
  coda_tensor A = coda_tensor_2d(h, CODA_F64, M, K), B = coda_tensor_2d(W, CODA_F64, N, K);
  lt_bind(&j, "r", CODA_F64, M, 1, r);
  lt_bind(&j, "z", CODA_F64, M, N, NULL);
  lt_bind(&j, "y", CODA_F64, M, F, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "gemm");
  double *gz = lt_out(&j, "z"), *gy = lt_out(&j, "y");
  report("swiglu z vs RMSNorm(x) W^T", lt_relerr(gz, z, M * N));
  report("swiglu y", lt_relerr(gy, y, M * F));
  lt_job_free(&j);
  /* the inference variant: y alone (no z) */
  lt_job_init(&j, c64, "llama_swiglu_infer");
  lt_bind(&j, "r", CODA_F64, M, 1, r);
  lt_bind(&j, "y", CODA_F64, M, F, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "gemm");
  double *iy = lt_out(&j, "y");
  report("swiglu_infer y", lt_relerr(iy, y, M * F));
  free(iy);
  lt_job_free(&j);
  free(x); free(wn); free(W); free(n); free(r); free(h); free(z); free(y); free(gz); free(gy);
}

/* dz, y, zdz of the SwiGLU backward from z (M x 2F) and dy (M x F). */
static void swiglu_bwd_ref(const double *z, const double *dy, int m, int F, double *dz,
                           double *y, double *zdz) {
  for (int i = 0; i < m; i++) {
    zdz[i] = 0;
    for (int f = 0; f < F; f++) {
      double g = z[i * 2 * F + 2 * f], u = z[i * 2 * F + 2 * f + 1], d = dy[i * F + f];
      double dg = d * u * dsilu(g), du = d * silu(g);
      dz[i * 2 * F + 2 * f] = dg;
      dz[i * 2 * F + 2 * f + 1] = du;
      y[i * F + f] = silu(g) * u;
      zdz[i] += z[i * 2 * F + 2 * f] * dg + z[i * 2 * F + 2 * f + 1] * du;
    }
  }
}

static void test_swiglu_bwd(void) {
  const int F = N / 2;
  /* exact mode: the pair-mode map form */
  double *z = lt_vec(M * 2 * F, 2), *dy = lt_vec(M * F, 1);
  double *dz = lt_zeros(M * 2 * F), *y = lt_zeros(M * F), *zdz = lt_zeros(M);
  swiglu_bwd_ref(z, dy, M, F, dz, y, zdz);
  lt_job j;
  lt_job_init(&j, c64, "llama_swiglu_bwd_pairs");
  lt_bind(&j, "z", CODA_F64, M, 2 * F, z);
  lt_bind(&j, "dy", CODA_F64, M, F, dy);
  lt_bind(&j, "dz", CODA_F64, M, 2 * F, NULL);
  lt_bind(&j, "y", CODA_F64, M, F, NULL);
  lt_partial(&j, "zp", CODA_F64, M, 2 * F, TL);
  lt_bind(&j, "zdz", CODA_F64, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_map(c64, j.prog, M, 2 * F, j.args, TL), "map");
  lt_check(&j, coda_finish(c64, j.prog, "zdz", j.args, M, 2 * F, TL), "finish");
  double *gdz = lt_out(&j, "dz"), *gy = lt_out(&j, "y"), *gzdz = lt_out(&j, "zdz");
  report("swiglu_bwd_pairs dz", lt_relerr(gdz, dz, M * 2 * F));
  report("swiglu_bwd_pairs y", lt_relerr(gy, y, M * F));
  report("swiglu_bwd_pairs zdz", lt_relerr(gzdz, zdz, M));
  lt_job_free(&j);
  free(gdz); free(gy); free(gzdz);

  /* the fused x2 form: fp32 compute, bf16 tensors; dy = dxo (M x K) wd (K x F) */
  double *dxo = lt_vec(M * K, 1), *wd = lt_vec(K * F, 0.5);
  for (int i = 0; i < M * K; i++) dxo[i] = coda_round_to(CODA_BF16, dxo[i]);
  for (int i = 0; i < K * F; i++) wd[i] = coda_round_to(CODA_BF16, wd[i]);
  for (int i = 0; i < M * 2 * F; i++) z[i] = coda_round_to(CODA_BF16, z[i]);
  mm(dy, dxo, wd, M, K, F);
  swiglu_bwd_ref(z, dy, M, F, dz, y, zdz);
  lt_job_init(&j, c32, "llama_swiglu_bwd");
  coda_tensor *A = lt_bind(&j, "A_", CODA_BF16, M, K, dxo);
  coda_tensor *B = lt_bind(&j, "B_", CODA_BF16, K, F, wd);
  coda_args_clear(j.args); /* A_ and B_ are only owned by the job */
  lt_bind(&j, "z", CODA_BF16, M, F * 2, z);
  lt_bind(&j, "dz", CODA_BF16, M, 2 * F, NULL);
  lt_bind(&j, "y", CODA_BF16, M, F, NULL);
  lt_partial(&j, "zp", CODA_F32, M, F, TL);
  lt_bind(&j, "zdz", CODA_F32, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c32, j.prog, CODA_N, A, CODA_N, B, j.args, TL), "gemm x2");
  lt_check(&j, coda_finish(c32, j.prog, "zdz", j.args, M, F, TL), "finish x2");
  gdz = lt_out(&j, "dz");
  gy = lt_out(&j, "y");
  gzdz = lt_out(&j, "zdz");
  /* bf16 outputs: one rounding (2^-9 relative) plus fp32 arithmetic */
  double mdz = lt_maxabs(dz, M * 2 * F), my = lt_maxabs(y, M * F);
  int bad = 0;
  for (int i = 0; i < M * 2 * F; i++) bad += !(fabs(gdz[i] - dz[i]) <= 4e-3 * fabs(dz[i]) + 1e-5 * mdz);
  for (int i = 0; i < M * F; i++) bad += !(fabs(gy[i] - y[i]) <= 4e-3 * fabs(y[i]) + 1e-5 * my);
  CHECK_MSG(bad == 0, "swiglu_bwd (x2, bf16): %d elements outside bf16 rounding", bad);
  CHECK_MSG(lt_relerr(gzdz, zdz, M) <= 1e-5, "swiglu_bwd zdz (fp32): %.3g", lt_relerr(gzdz, zdz, M));
  lt_job_free(&j);
  free(z); free(dy); free(dz); free(y); free(zdz); free(gdz); free(gy); free(gzdz);
  free(dxo); free(wd);
}

/* RMSNorm backward: the fused dgrad epilogue against the chain rule. A
 * consumer z = RMSNorm(x; w) W^T (W: Nc x D) receives dz; dres arrives
 * through the residual. */
static void norm_bwd_case(int with_res) {
  const int D = K, Nc = N;
  double *x = lt_vec(M * D, 1.2), *w = lt_vec(D, 1), *W = lt_vec(Nc * D, 0.4);
  double *dzv = lt_vec(M * Nc, 1), *dres = lt_vec(M * D, 1);
  double *n = lt_zeros(M * D), *r = lt_zeros(M), *z = lt_zeros(M * Nc);
  rmsnorm(x, w, M, D, n, r, NULL);
  mm_t(z, n, W, M, Nc, D);
  double *dn = lt_zeros(M * D), *dx = lt_zeros(M * D), *dw = lt_zeros(D), *post = lt_zeros(M * D);
  double *zdz = lt_zeros(M);
  mm(dn, dzv, W, M, Nc, D); /* gradient of the norm output */
  for (int i = 0; i < M; i++) {
    for (int k = 0; k < Nc; k++) zdz[i] += z[i * Nc + k] * dzv[i * Nc + k];
    /* chain rule through n_k = x_k r w_k, r = (mean x^2 + eps)^-1/2 */
    double s = 0;
    for (int k = 0; k < D; k++) s += dn[i * D + k] * w[k] * x[i * D + k];
    for (int k = 0; k < D; k++) {
      dx[i * D + k] = (with_res ? dres[i * D + k] : 0) + r[i] * w[k] * dn[i * D + k] -
                      r[i] * r[i] * r[i] * x[i * D + k] * s / D;
      dw[k] += dn[i * D + k] * x[i * D + k] * r[i];
      post[i * D + k] = n[i * D + k];
    }
  }
  double invd = 1.0 / D;
  lt_job j;
  lt_job_init(&j, c64, with_res ? "llama_norm_bwd" : "llama_head_norm_bwd");
  coda_tensor A = coda_tensor_2d(dzv, CODA_F64, M, Nc), B = coda_tensor_2d(W, CODA_F64, Nc, D);
  lt_bind(&j, "x", CODA_F64, M, D, x);
  lt_bind(&j, "w", CODA_F64, 1, D, w);
  lt_bind(&j, "r", CODA_F64, M, 1, r);
  lt_bind(&j, "zdz", CODA_F64, M, 1, zdz);
  lt_bind(&j, "inv_n", CODA_F64, 1, 1, &invd);
  if (with_res) lt_bind(&j, "dres", CODA_F64, M, D, dres);
  lt_bind(&j, "dx", CODA_F64, M, D, NULL);
  lt_bind(&j, "post", CODA_F64, M, D, NULL);
  lt_partial(&j, "dwp", CODA_F64, M, D, TL);
  lt_bind(&j, "dw", CODA_F64, 1, D, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_N, &B, j.args, TL), "gemm");
  lt_check(&j, coda_finish(c64, j.prog, "dw", j.args, M, D, TL), "finish");
  double *gdx = lt_out(&j, "dx"), *gpost = lt_out(&j, "post"), *gdw = lt_out(&j, "dw");
  report(with_res ? "norm_bwd dx" : "head_norm_bwd dx", lt_relerr(gdx, dx, M * D));
  report(with_res ? "norm_bwd post" : "head_norm_bwd post", lt_relerr(gpost, post, M * D));
  report(with_res ? "norm_bwd dw" : "head_norm_bwd dw", lt_relerr(gdw, dw, D));
  lt_job_free(&j);
  free(x); free(w); free(W); free(dzv); free(dres); free(n); free(r); free(z); free(dn);
  free(dx); free(dw); free(post); free(zdz); free(gdx); free(gpost); free(gdw);
}

static void test_rope_bwd(void) {
  double *z = lt_vec(M * N, 1), *dy = lt_vec(M * N, 1), *y = lt_zeros(M * N);
  double *dz = lt_zeros(M * N), *zdz = lt_zeros(M), *freq = lt_zeros(N), *fs = lt_zeros(N / 2);
  double *pos = lt_zeros(M);
  rope_table(freq, fs, N);
  for (int i = 0; i < M; i++) pos[i] = (double)((i * 5) % 43);
  for (int i = 0; i < M; i++)
    for (int p = 0; p < N / 2; p++) {
      double th = 2 * PI_D * pos[i] * fs[p], c = cos(th), s = sin(th);
      double z0 = z[i * N + 2 * p], z1 = z[i * N + 2 * p + 1];
      double d0 = dy[i * N + 2 * p], d1 = dy[i * N + 2 * p + 1];
      y[i * N + 2 * p] = z0 * c - z1 * s;
      y[i * N + 2 * p + 1] = z0 * s + z1 * c;
      /* transpose of the rotation */
      dz[i * N + 2 * p] = d0 * c + d1 * s;
      dz[i * N + 2 * p + 1] = -d0 * s + d1 * c;
    }
  for (int i = 0; i < M; i++)
    for (int k = 0; k < N; k++) zdz[i] += z[i * N + k] * dz[i * N + k];
  lt_job j;
  lt_job_init(&j, c64, "llama_rope_bwd");
  lt_bind(&j, "y", CODA_F64, M, N, y);
  lt_bind(&j, "dy", CODA_F64, M, N, dy);
  lt_bind(&j, "pos", CODA_I32, M, 1, pos);
  lt_bind(&j, "freq", CODA_F64, 1, N, freq);
  lt_bind(&j, "dz", CODA_F64, M, N, NULL);
  lt_partial(&j, "zp", CODA_F64, M, N, TL);
  lt_bind(&j, "zdz", CODA_F64, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_map(c64, j.prog, M, N, j.args, TL), "map");
  lt_check(&j, coda_finish(c64, j.prog, "zdz", j.args, M, N, TL), "finish");
  double *gdz = lt_out(&j, "dz"), *gzdz = lt_out(&j, "zdz");
  report("rope_bwd dz", lt_relerr(gdz, dz, M * N));
  report("rope_bwd zdz (= sum z dz)", lt_relerr(gzdz, zdz, M));
  lt_job_free(&j);
  free(z); free(dy); free(y); free(dz); free(zdz); free(freq); free(fs); free(pos); free(gdz);
  free(gzdz);
}

/* LM head pieces. V = N columns, D = K. */
static void test_head(void) {
  const int V = N + 3, D = K; /* ragged vocab */
  double *x = lt_vec(M * D, 1.2), *wn = lt_vec(D, 1), *W = lt_vec(V * D, 0.8);
  double *n = lt_zeros(M * D), *r = lt_zeros(M), *h = lt_zeros(M * D), *l = lt_zeros(M * V);
  double *tgt = lt_zeros(M), *lse = lt_zeros(M), *pick = lt_zeros(M), *valid = lt_zeros(M);
  rmsnorm(x, wn, M, D, n, r, h);
  mm_t(l, n, W, M, V, D);
  double lsum = 0, cnt = 0;
  for (int i = 0; i < M; i++) {
    tgt[i] = i % 7 == 3 ? -100 : i % 11 == 5 ? V : (double)((i * 13) % V);
    double mx = -INFINITY, s = 0;
    for (int v = 0; v < V; v++) mx = fmax(mx, l[i * V + v]);
    for (int v = 0; v < V; v++) s += exp(l[i * V + v] - mx);
    lse[i] = mx + log(s);
    valid[i] = tgt[i] >= 0 && tgt[i] < V;
    pick[i] = valid[i] ? l[i * V + (int)tgt[i]] : 0.0;
    lsum += valid[i] * (lse[i] - pick[i]);
    cnt += valid[i];
  }
  double loss = lsum / cnt;

  lt_job j;
  lt_job_init(&j, c64, "llama_lm_head");
  coda_tensor A = coda_tensor_2d(h, CODA_F64, M, D), B = coda_tensor_2d(W, CODA_F64, V, D);
  lt_bind(&j, "r", CODA_F64, M, 1, r);
  lt_bind(&j, "tgt", CODA_I32, M, 1, tgt);
  lt_partial(&j, "lp", CODA_F64, M, V, TL);
  lt_partial(&j, "pick", CODA_F64, M, V, TL);
  lt_bind(&j, "lse", CODA_F64, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "gemm");
  lt_check(&j, coda_finish(c64, j.prog, "lse", j.args, M, V, TL), "finish");
  double *glse = lt_out(&j, "lse"), *gpick = lt_out(&j, "pick");
  report("lm_head lse", lt_relerr(glse, lse, M));
  report("lm_head pick", lt_relerr(gpick, pick, M));
  lt_job_free(&j);

  const coda_tiling one = {8, 8};
  double nv = V;
  lt_job_init(&j, c64, "llama_ce_stats");
  lt_bind(&j, "lse", CODA_F64, M, 1, lse);
  lt_bind(&j, "pick", CODA_F64, M, 1, pick);
  lt_bind(&j, "tgt", CODA_I32, M, 1, tgt);
  lt_bind(&j, "nv", CODA_F64, 1, 1, &nv);
  lt_bind(&j, "valid", CODA_F64, M, 1, NULL);
  lt_partial(&j, "lp", CODA_F64, M, 1, one);
  lt_partial(&j, "cp", CODA_F64, M, 1, one);
  lt_bind(&j, "lsum", CODA_F64, 1, 1, NULL);
  lt_bind(&j, "cnt", CODA_F64, 1, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_map(c64, j.prog, M, 1, j.args, one), "ce_stats");
  lt_check(&j, coda_finish(c64, j.prog, "lsum", j.args, M, 1, one), "lsum");
  lt_check(&j, coda_finish(c64, j.prog, "cnt", j.args, M, 1, one), "cnt");
  double *gvalid = lt_out(&j, "valid"), *glsum = lt_out(&j, "lsum"), *gcnt = lt_out(&j, "cnt");
  CHECK_MSG(lt_maxabs_diff(gvalid, valid, M) == 0, "ce_stats valid differs");
  report("ce_stats lsum", lt_relerr(glsum, &lsum, 1));
  CHECK_NEAR(gcnt[0], cnt, 0);
  lt_job_free(&j);

  lt_job_init(&j, c64, "llama_ce_loss");
  lt_bind(&j, "lsum", CODA_F64, 1, 1, &lsum);
  lt_bind(&j, "cnt", CODA_F64, 1, 1, &cnt);
  lt_bind(&j, "loss", CODA_F64, 1, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_map(c64, j.prog, 1, 1, j.args, one), "ce_loss");
  double *gloss = lt_out(&j, "loss");
  report("ce_loss", lt_relerr(gloss, &loss, 1));
  lt_job_free(&j);

  /* backward: dl = (softmax - onehot) valid / cnt, zdz = sum l dl */
  double *dl = lt_zeros(M * V), *zdz = lt_zeros(M);
  for (int i = 0; i < M; i++)
    for (int v = 0; v < V; v++) {
      double d = valid[i] ? (exp(l[i * V + v] - lse[i]) - (v == (int)tgt[i])) / cnt : 0.0;
      dl[i * V + v] = d;
      zdz[i] += l[i * V + v] * d;
    }
  lt_job_init(&j, c64, "llama_ce_bwd");
  lt_bind(&j, "r", CODA_F64, M, 1, r);
  lt_bind(&j, "tgt", CODA_I32, M, 1, tgt);
  lt_bind(&j, "lse", CODA_F64, M, 1, lse);
  lt_bind(&j, "valid", CODA_F64, M, 1, valid);
  lt_bind(&j, "cnt", CODA_F64, 1, 1, &cnt);
  lt_bind(&j, "dl", CODA_F64, M, V, NULL);
  lt_partial(&j, "zp", CODA_F64, M, V, TL);
  lt_bind(&j, "zdz", CODA_F64, M, 1, NULL);
  CHECK(j.ok);
  lt_check(&j, coda_gemm_epilogue(c64, j.prog, CODA_N, &A, CODA_T, &B, j.args, TL), "ce_bwd");
  lt_check(&j, coda_finish(c64, j.prog, "zdz", j.args, M, V, TL), "ce_bwd zdz");
  double *gdl = lt_out(&j, "dl"), *gzdz = lt_out(&j, "zdz");
  report("ce_bwd dlogits", lt_relerr(gdl, dl, M * V));
  report("ce_bwd zdz", lt_relerr(gzdz, zdz, M));
  /* ignored rows are exactly zero */
  int nz = 0;
  for (int i = 0; i < M; i++)
    if (!valid[i])
      for (int v = 0; v < V; v++) nz += gdl[i * V + v] != 0;
  CHECK_EQ_INT(nz, 0);
  lt_job_free(&j);
  free(x); free(wn); free(W); free(n); free(r); free(h); free(l); free(tgt); free(lse);
  free(pick); free(valid); free(glse); free(gpick); free(gvalid); free(glsum); free(gcnt);
  free(gloss); free(dl); free(zdz); free(gdl); free(gzdz);
}

int main(void) {
  lt_seed(20261130);
  c64 = lt_context(CODA_PRECISION_F64);
  c32 = lt_context(CODA_PRECISION_F32);
  test_rmsnorm();
  test_residual_norm();
  test_qkv_rope();
  test_swiglu();
  test_swiglu_bwd();
  norm_bwd_case(1);
  norm_bwd_case(0);
  test_rope_bwd();
  test_head();
  coda_context_destroy(c64);
  coda_context_destroy(c32);
  return CHECK_DONE();
}
