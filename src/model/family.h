/* The model-family table: per architecture its names, its parameter list
 * (coda names, shapes, decay, initialization) and how each parameter maps
 * to the Hugging Face layout. The model (model.c), the reference engine
 * (model_ref.c), the checkpoints and the HF import/export (src/store) read
 * it instead of naming a family; docs/models.md lists what it holds. */
#ifndef CODA_MODEL_FAMILY_H
#define CODA_MODEL_FAMILY_H

#include "coda_nn.h"

#include <stdint.h>

/* A dimension of a parameter, from the configuration. */
typedef enum coda_pdim {
  CODA_PD_ONE,   /* 1 (the second dimension of a vector) */
  CODA_PD_VOCAB, /* vocab */
  CODA_PD_DIM,   /* dim */
  CODA_PD_FFN,   /* ffn */
  CODA_PD_FFN2,  /* 2 ffn (gate and up, interleaved) */
  CODA_PD_QKV,   /* (heads + 2 kv_heads) head_dim */
  CODA_PD_QDIM,  /* heads head_dim (the attention output) */
  CODA_PD_HEAD,  /* head_dim */
  CODA_PD_SEQ    /* seq (GPT-2's learned positions) */
} coda_pdim;

/* How a parameter maps to Hugging Face tensors (src/store/hf.c). */
typedef enum coda_hf_conv {
  CODA_HF_COPY,     /* one tensor, the same layout */
  CODA_HF_QKV,      /* q, k, v stacked by rows; the rows of each q/k head in
                     * RoPE order: coda row 2j is HF row j, 2j+1 is j + hd/2 */
  CODA_HF_GATE_UP,  /* gate and up interleaved by rows: 2f gate f, 2f+1 up f */
  CODA_HF_HEAD_PERM, /* a vector over one head, in the RoPE order of CODA_HF_QKV */
  CODA_HF_TRANSPOSE  /* one tensor, transposed: GPT-2's Conv1D stores [in, out] */
} coda_hf_conv;

typedef enum coda_pinit {
  CODA_INIT_ONES,      /* norm weights */
  CODA_INIT_ZEROS,     /* biases (GPT-2's linears and LayerNorms); Gemma 3's norm weights
                        * (its RMSNorm scales by 1 + w: zero is the identity) */
  CODA_INIT_NORMAL,    /* std 0.02 */
  CODA_INIT_NORMAL_OUT /* std 0.02 / sqrt(2 layers): projections into the residual */
} coda_pinit;

/* The block a family's layers run: Llama's (RMSNorm, RoPE, SwiGLU, no
 * biases; Qwen3 adds qk_norm), GPT-2's (LayerNorm with bias, learned
 * positions instead of RoPE, a GELU MLP, a bias on every linear) or Gemma
 * 3's (RMSNorm with (1 + w), a norm before and after attention and MLP,
 * QK-norm, GeGLU, sliding-window and global layers; the embedding scaled
 * by sqrt(dim)). */
typedef enum coda_block { CODA_BLOCK_LLAMA, CODA_BLOCK_GPT2, CODA_BLOCK_GEMMA3 } coda_block;

typedef enum coda_pwhere { CODA_P_BEFORE, CODA_P_LAYER, CODA_P_AFTER } coda_pwhere;

typedef struct coda_family_param {
  const char *name;     /* coda's name; a per-layer one holds one %d */
  coda_pwhere where;    /* before the layers, once per layer, or after them */
  int ndim;
  coda_pdim rows, cols;
  int decay;            /* AdamW's weight decay applies */
  coda_pinit init;
  int untied_only;      /* absent when the head is tied to the embedding */
  coda_hf_conv hf_conv;
  const char *hf[3];    /* the HF tensor names (%d: the layer): one, q/k/v or gate/up */
} coda_family_param;

typedef struct coda_family {
  coda_model_family id;
  const char *name;        /* coda_model_family_name */
  const char *hf_arch[2];  /* accepted HF "architectures"; [0] is what export writes */
  const char *hf_type[2];  /* accepted "model_type"s; [0] is what export writes */
  int qk_norm;             /* per-head RMSNorm of q and k before RoPE */
  coda_block block;        /* the layers' block */
  int nparams;
  const coda_family_param *params; /* in flat order: before, per layer, after */
} coda_family;

/* The table entry of f; NULL for a value that names no family. */
const coda_family *coda_family_of(coda_model_family f);
/* The size of dimension d in configuration c. */
int64_t coda_family_dim(const coda_model_config *c, coda_pdim d);
/* Parameters of a model of c: per layer and in all. */
int coda_family_layer_params(const coda_family *f);
int coda_family_count_params(const coda_family *f, const coda_model_config *c);

#endif
