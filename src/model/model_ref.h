/* Internal interface of the reference engine (model_ref.c): its saved
 * activations, the sizes and buffers of one pass, and the host GEMMs and
 * attention shared by the families' layers (Llama's and Qwen3's in
 * model_ref.c, GPT-2's in model_ref_gpt2.c). */
#ifndef CODA_MODEL_REF_H
#define CODA_MODEL_REF_H

#include "model/model.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
  float *xa, *r1, *h1, *qkv, *P, *o, *xf, *r2, *h2, *z, *y;
  float *qk0, *rqk; /* Qwen3: q and k heads before their norm, and its r per head */
  float *mu1, *mu2; /* GPT-2: the LayerNorms' row means (r1, r2 hold their 1/σ) */
  float *ao, *mo;   /* Gemma 3: the attention's and the MLP's outputs before their post-norms */
  float *rpa, *rpf; /* and those norms' r per row */
} layer_acts;

typedef struct {
  int B, T;
  layer_acts *l;
  float *xL, *rf, *muf, *hf, *logits;
  float *capped; /* the soft-capped logits (logit_softcap > 0), for the backward */
  float *dx, *dh, *dqkv, *dO, *dy, *dz;
  float *scratch; /* transposes */
  size_t scratch_n;
  float *block; /* one allocation */
} ref_state;

/* One pass's sizes and buffers, shared by its layers. */
typedef struct ref_pass {
  coda_model *m;
  const coda_model_config *c;
  ref_state *r;
  float *W, *G; /* the model's weights and gradient */
  int nt, B, T, H, Hk, hd;
  int64_t M, D, F, V, nq;
  int qk_norm; /* the family normalizes q and k heads (Qwen3) */
} ref_pass;

/* A parameter's weights (PW) and gradient (PG) by name. */
#define PW(name) (p->W + coda_model_find(p->m, name)->offset)
#define PG(name) (p->G + coda_model_find(p->m, name)->offset)

/* C (M x N) (+)= A (M x K) · B (K x N), all row-major. */
void coda_ref_mm_ab(int nt, float *C, const float *A, const float *B, int64_t M, int64_t N,
                    int64_t K, int acc);
/* C (M x N) (+)= A (M x K) · B (N x K)ᵀ, through a transpose of B into
 * r's scratch; -1: out of memory. */
int coda_ref_mm_abt(int nt, ref_state *r, float *C, const float *A, const float *B, int64_t M,
                    int64_t N, int64_t K, int acc);
/* C (M x N) += A (K x M)ᵀ · B (K x N)  (weight gradients). */
void coda_ref_mm_atb(int nt, float *C, const float *A, const float *B, int64_t M, int64_t N,
                     int64_t K);
/* The backward of the per-head q/k RMSNorm by (w + shift) (Qwen3 0,
 * Gemma 3 1), in place on dqkv's q/k heads, the weight gradients into gq,
 * gk (model_ref.c states the math). */
void coda_ref_qknorm_bwd(int nt, float *dqkv, const float *qk0, const float *rqk, const float *wq,
                         const float *wk, float *gq, float *gk, int64_t M, int nq_heads, int nh,
                         int hd, int64_t nq, double shift);
/* Causal softmax attention of the q, k, v heads of qkv (M x nq), scores
 * scaled by scale (1/sqrt(hd) but for Gemma 3): P (the probabilities) and
 * o (M x H hd); and its backward into dqkv. window > 0: position t sees
 * only the keys s with t - window < s <= t (coda_ref_window_start). */
void coda_ref_attn_fwd(int nt, const float *qkv, float *P, float *o, int B, int T, int H, int Hk,
                       int hd, int64_t nq, double scale, int window);
void coda_ref_attn_bwd(int nt, const float *qkv, const float *P, const float *dO, float *dqkv,
                       int B, int T, int H, int Hk, int hd, int64_t nq, double scale, int window);
/* Rotates the Q and K heads (the first nqk_heads) of each row of qkv
 * (M x nq, position t = row % T) by ±θ (sign = +1 forward; the backward
 * rotates by −θ, R(θ)ᵀ = R(−θ)). */
void coda_ref_rope(int nt, float *qkv, int B, int T, int nqk_heads, int hd, int64_t nq,
                   double theta, const coda_rope_scaling *sc, double sign);

/* GPT-2's layer li (model_ref_gpt2.c), forward (1: out of memory) and
 * backward, as the Llama layer's in model_ref.c. */
int coda_ref_gpt2_layer_forward(const ref_pass *p, int li);
void coda_ref_gpt2_layer_backward(const ref_pass *p, int li);
/* GELU (tanh form)'s derivative, in double (model_ref_gpt2.c). */
double coda_ref_gelu_grad(double u);
/* Gemma 3's layer li (model_ref_gemma3.c), as GPT-2's; and its final
 * RMSNorm with (1 + w) backward (the forward is coda_ref_rmsnorm1p). */
int coda_ref_gemma3_layer_forward(const ref_pass *p, int li);
void coda_ref_gemma3_layer_backward(const ref_pass *p, int li);
void coda_ref_rmsnorm1p_bwd(int nt, const float *x, const float *w, const float *rs,
                            const float *dh, float *dx, float *gw, int64_t M, int64_t D);
/* LayerNorm backward: dx += ∂h/∂x · dh for h = LN(x; w, b); gw += Σ dh ⊙ x̂,
 * gb += Σ dh (summed in row order). */
void coda_ref_layernorm_bwd(int nt, const float *x, const float *w, const float *mu,
                            const float *rs, const float *dh, float *dx, float *gw, float *gb,
                            int64_t M, int64_t D);

#endif
