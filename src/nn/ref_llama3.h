/* Unfused reference of the Llama-3 block and LM head, written the ordinary
 * way in double: RMSNorm, linear layers, half-split (Hugging Face) RoPE,
 * causal GQA attention, SwiGLU, residual adds, cross-entropy, and every
 * backward pass by hand. It shares no code with the plans and uses the
 * standard weight layout (separate gate and up matrices, half-split RoPE
 * rows in Wq and Wk), so comparing it with a plan also checks the layout
 * permutations of include/coda_nn.h. Public as coda_llama_reference_block
 * and coda_llama_reference_head.
 *
 * `act` selects where values are rounded: CODA_F64 rounds nothing (the
 * exact reference); CODA_BF16 rounds every activation and activation
 * gradient tensor the ordinary block materializes (norm outputs, each
 * linear layer's output, RoPE output, attention output, SwiGLU output,
 * residual sums, logits, dlogits and their backward counterparts) to
 * bf16, and rstd, lse, the loss and the weight gradients to f32, with all
 * arithmetic in between in double. This is the low-precision reference of
 * the bf16 tests. */
#ifndef CODA_NN_REF_LLAMA3_H
#define CODA_NN_REF_LLAMA3_H

#include "coda_nn.h"

/* Row-major arrays. Shapes with M = batch*seq, HQ = n_heads*hd,
 * HKV = n_kv_heads*hd: wqkv (HQ + 2 HKV, D) in [Q | K | V] order with
 * half-split RoPE pairs (j, j + hd/2) in each Q and K head; wo (D, HQ);
 * wgate, wup (F, D); wd (D, F); wn1, wn2 (D). */
typedef coda_llama_ref_weights ref_llama_weights; /* include/coda_nn.h */

/* Forward x -> x_out (M x D); if dx_out is not NULL also the backward:
 * dx (M x D) and the weight gradients into `grad` (same shapes). Returns
 * 0, or -1 when out of memory. */
int ref_llama_block(const coda_llama_config *c, coda_dtype act, const ref_llama_weights *w,
                    const double *x, double *x_out, const double *dx_out, double *dx,
                    ref_llama_weights *grad);

/* Head: loss = mean over rows with 0 <= targets[m] < vocab of
 * logsumexp(l_m) - l_m[targets[m]], l = RMSNorm(x; wnf) Wout^T; row_loss
 * (M, may be NULL) receives each row's term (0 for ignored rows). If dx is
 * not NULL also the gradients of the loss: dx (M x D), dwnf (D), dwout
 * (V x D). Returns 0, or -1 when out of memory. */
int ref_llama_head(const coda_llama_config *c, coda_dtype act, const double *wnf,
                   const double *wout, const double *x, const int32_t *targets, double *loss,
                   double *row_loss, double *dx, double *dwnf, double *dwout);

#endif
