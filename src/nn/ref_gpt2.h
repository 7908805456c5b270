/* Unfused reference of the ordinary GPT-2 block (pre-LayerNorm), written
 * straightforwardly in double, forward and backward by hand. It is the
 * independent reference the block plan is tested against; it shares no code
 * with the plan or the epilogue programs.
 *
 *   a   = LN(x0; g1, b1)                 LN(x) = (x - mean) * rsqrt(var + eps) * g + b
 *   qkv = a Wqkv^T + bqkv                (M x 3d, [Q heads][K heads][V heads])
 *   o   = causal MHA(qkv)                (softmax scale 1/sqrt(hd))
 *   x1  = x0 + o Wo^T + bo
 *   b   = LN(x1; g2, b2)
 *   u   = b Wfc^T + bfc,  g = gelu(u)    (tanh form)
 *   y   = x1 + g Wproj^T + bproj
 *
 * Rows are m = batch * T + t. With `round` other than CODA_F64 every tensor
 * at a boundary the fused plan also stores (a, qkv, o, x1, b, u, g, y and in
 * the backward du, dx1, do, dqkv, dx0) is rounded to that dtype: this is the
 * low-precision reference of the bf16 tolerance rule. */
#ifndef CODA_NN_REF_GPT2_H
#define CODA_NN_REF_GPT2_H

#include "coda.h"

typedef struct gpt2_ref_dims {
  int B, T, d, H, ffn; /* head_dim = d / H */
  double eps;
  coda_dtype round; /* CODA_F64: no rounding */
} gpt2_ref_dims;

/* Parameters (or their gradients): torch Linear layout (out, in). */
typedef struct gpt2_ref_params {
  double *g1, *b1;     /* d */
  double *Wqkv, *bqkv; /* 3d x d, 3d */
  double *Wo, *bo;     /* d x d, d */
  double *g2, *b2;     /* d */
  double *Wfc, *bfc;   /* ffn x d, ffn */
  double *Wproj, *bproj; /* d x ffn, d */
} gpt2_ref_params;

/* Activations saved by the forward (allocated by gpt2_ref_acts_alloc). */
typedef struct gpt2_ref_acts {
  double *x0, *mu1, *r1, *a, *qkv, *o, *x1, *mu2, *r2, *b, *u, *g, *y;
} gpt2_ref_acts;

int gpt2_ref_acts_alloc(const gpt2_ref_dims *dm, gpt2_ref_acts *acts);
void gpt2_ref_acts_free(gpt2_ref_acts *acts);
/* Allocates (zeroed) or frees every array of a parameter set. */
int gpt2_ref_params_alloc(const gpt2_ref_dims *dm, gpt2_ref_params *p);
void gpt2_ref_params_free(gpt2_ref_params *p);
/* Number of arrays in a parameter set and the i-th one with its length. */
#define GPT2_REF_NPARAMS 12
double *gpt2_ref_param(const gpt2_ref_params *p, const gpt2_ref_dims *dm, int i,
                       long *len, const char **name);

/* Forward: x0 (M x d) -> acts (y is the block output). */
void gpt2_ref_forward(const gpt2_ref_dims *dm, const gpt2_ref_params *w,
                      const double *x0, gpt2_ref_acts *acts);
/* Backward: dy (M x d) -> dx0 (M x d) and every parameter gradient
 * (overwritten). */
void gpt2_ref_backward(const gpt2_ref_dims *dm, const gpt2_ref_params *w,
                       const gpt2_ref_acts *acts, const double *dy, double *dx0,
                       gpt2_ref_params *grad);

/* The building blocks, exposed for the operator-level tests. */
double gpt2_ref_gelu(double x);
double gpt2_ref_dgelu(double x);
/* y = LN(x) row-wise (M x D); also mean and rstd per row. */
void gpt2_ref_layernorm(int M, int D, const double *x, const double *g,
                        const double *b, double eps, double *y, double *mu,
                        double *rstd);
/* Backward of LN given dy: dx (overwritten), dg and db (accumulated). */
void gpt2_ref_layernorm_bwd(int M, int D, const double *x, const double *g,
                            const double *mu, const double *rstd,
                            const double *dy, double *dx, double *dg,
                            double *db);

#endif
