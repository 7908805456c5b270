/* Bad input through the C API, the classes tests/test_cpu_bad_input.c does
 * not cover: the plan API (NULL arguments, unknown buffers, wrong shapes
 * and dtypes on bind, bad phases, plans that failed to build), the
 * attention API (NULL tensors, bad head counts, wrong shapes, dtypes,
 * strides), and sizes that overflow 32-bit indices where the API takes
 * int64 (plan configurations, GEMM and map domains). Each must return the
 * documented status with a message, and nothing is allocated for a
 * request that is refused. */
#include "coda_nn.h"
#include "check.h"
#include "base/internal.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static coda_context ctx;

#define EXPECT(call, status) CHECK_STATUS(ctx, call, status)

/* Fresh random data: bad-input checks must not depend on the values. */
static uint64_t rs = 0x1234567;
static float frand(void) { return (float)lcg64_unit(&rs); }

static coda_tensor mk(coda_dtype dt, int64_t rows, int64_t cols) {
  coda_tensor t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rows = rows;
  t.cols = cols;
  t.ld = cols;
  t.data = calloc((size_t)(rows * cols > 0 ? rows * cols : 1), coda_dtype_size(dt));
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) coda_store(&t, r, c, frand());
  return t;
}

static void plan_api(void) {
  coda_llama_config c = coda_llama_default_config();
  coda_plan p = NULL;
  /* NULL arguments */
  EXPECT(coda_llama_block_plan(ctx, NULL, &p), CODA_ERR_INVALID_ARGUMENT);
  CHECK(p == NULL);
  EXPECT(coda_llama_block_plan(ctx, &c, NULL), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_llama_head_plan(ctx, NULL, &p), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_gpt2_block_plan(ctx, NULL, &p), CODA_ERR_INVALID_ARGUMENT);
  coda_gpt2_config g = coda_gpt2_default_config();
  EXPECT(coda_gpt2_block_plan(ctx, &g, NULL), CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_llama_qkv_row(NULL, 0) == -1);
  CHECK(coda_llama_qkv_row(&c, -1) == -1);
  CHECK(coda_llama_qkv_row(&c, INT64_MAX) == -1);
  coda_plan_destroy(NULL);
  CHECK(coda_plan_text(NULL) == NULL || coda_plan_text(NULL)[0] == '\0');
  coda_tensor t;
  CHECK(coda_plan_tensor(NULL, "x", &t) == CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_plan_bind(NULL, "x", &t) == CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_plan_run(ctx, NULL, CODA_PHASE_FORWARD), CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_llama_link(NULL, NULL) == CODA_ERR_INVALID_ARGUMENT);

  /* bad configurations */
  struct { const char *what; int64_t *field; int64_t value; coda_status want; } bad[] = {
    {"dim 0", &c.dim, 0, CODA_ERR_INVALID_ARGUMENT},
    {"dim -64", &c.dim, -64, CODA_ERR_INVALID_ARGUMENT},
    {"batch 0", &c.batch, 0, CODA_ERR_INVALID_ARGUMENT},
    {"seq -1", &c.seq, -1, CODA_ERR_INVALID_ARGUMENT},
    {"heads 3 / kv 2", &c.n_heads, 3, CODA_ERR_INVALID_ARGUMENT},
    {"kv heads 0", &c.n_kv_heads, 0, CODA_ERR_INVALID_ARGUMENT},
    {"head_dim 15", &c.head_dim, 15, CODA_ERR_INVALID_ARGUMENT},
    {"ffn 0", &c.ffn_dim, 0, CODA_ERR_INVALID_ARGUMENT},
    /* 32-bit index overflow: rows = batch*seq */
    {"batch 2^31", &c.batch, (int64_t)1 << 31, CODA_ERR_OVERFLOW},
    {"batch 2^40", &c.batch, (int64_t)1 << 40, CODA_ERR_OVERFLOW},
    {"batch 2^62", &c.batch, (int64_t)1 << 62, CODA_ERR_OVERFLOW},
    {"seq 2^40", &c.seq, (int64_t)1 << 40, CODA_ERR_INVALID_ARGUMENT},
    /* columns past 32-bit indices */
    {"dim 2^31", &c.dim, (int64_t)1 << 31, CODA_ERR_OVERFLOW},
    {"dim 2^62", &c.dim, (int64_t)1 << 62, CODA_ERR_OVERFLOW},
    {"ffn 2^40", &c.ffn_dim, (int64_t)1 << 40, CODA_ERR_OVERFLOW},
    {"head_dim 2^40", &c.head_dim, (int64_t)1 << 40, CODA_ERR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    coda_llama_config saved = c;
    *bad[i].field = bad[i].value;
    p = (coda_plan)(uintptr_t)1;
    coda_status s = coda_llama_block_plan(ctx, &c, &p);
    CHECK_MSG(s == bad[i].want, "llama block, %s -> %s (%s)", bad[i].what, coda_status_string(s),
              coda_last_error(ctx));
    CHECK_MSG(s == CODA_OK || p == NULL, "llama block, %s: *out not cleared", bad[i].what);
    if (s == CODA_OK) coda_plan_destroy(p);
    c = saved;
  }
  /* the head: vocab */
  {
    coda_llama_config h = coda_llama_default_config();
    int64_t vocabs[] = {0, -5, (int64_t)1 << 31, (int64_t)1 << 62};
    for (int i = 0; i < 4; i++) {
      h.vocab = vocabs[i];
      p = NULL;
      coda_status s = coda_llama_head_plan(ctx, &h, &p);
      CHECK_MSG(s == CODA_ERR_INVALID_ARGUMENT || s == CODA_ERR_OVERFLOW,
                "llama head, vocab %lld -> %s", (long long)vocabs[i], coda_status_string(s));
      CHECK(p == NULL);
    }
    h = coda_llama_default_config();
    h.dim = (int64_t)1 << 40;
    p = NULL;
    EXPECT(coda_llama_head_plan(ctx, &h, &p), CODA_ERR_OVERFLOW);
    CHECK(p == NULL);
  }
  c = coda_llama_default_config();
  c.dtype = CODA_F32;
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_ERR_DTYPE);
  c.dtype = CODA_F64; /* needs an exact-mode context */
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_ERR_DTYPE);
  c = coda_llama_default_config();
  c.rope_theta = 0.5;
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_ERR_INVALID_ARGUMENT);
  c.rope_theta = NAN;
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_ERR_INVALID_ARGUMENT);
  c = coda_llama_default_config();
  c.tiling.tile_m = 12;
  c.tiling.tile_n = 64;
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_ERR_INVALID_ARGUMENT);
  c = coda_llama_default_config();
  c.flags = CODA_LLAMA_GEMMA3 << 1; /* past the last flag */
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_ERR_INVALID_ARGUMENT);
  c.flags = CODA_LLAMA_NORM_OUT;
  EXPECT(coda_llama_head_plan(ctx, &c, &p), CODA_ERR_INVALID_ARGUMENT);

  /* GPT-2: the same classes */
  int64_t gbad[][5] = {{0, 4, 256, 2, 16}, {64, 3, 256, 2, 16}, {64, 4, -1, 2, 16},
                       {64, 4, 256, (int64_t)1 << 31, 16}, {(int64_t)1 << 40, 4, 256, 1, 1},
                       {64, 4, (int64_t)1 << 40, 1, 1}, {64, 4, 256, (int64_t)1 << 62, 4}};
  for (int i = 0; i < 7; i++) {
    g = coda_gpt2_default_config();
    g.dim = gbad[i][0]; g.n_heads = gbad[i][1]; g.ffn_dim = gbad[i][2];
    g.batch = gbad[i][3]; g.seq = gbad[i][4];
    p = NULL;
    coda_status s = coda_gpt2_block_plan(ctx, &g, &p);
    CHECK_MSG(s == CODA_ERR_INVALID_ARGUMENT || s == CODA_ERR_OVERFLOW, "gpt2 case %d -> %s", i,
              coda_status_string(s));
    CHECK(p == NULL);
  }

  /* A good plan: unknown buffers, wrong binds, bad phases. */
  c = coda_llama_default_config();
  EXPECT(coda_llama_block_plan(ctx, &c, &p), CODA_OK);
  if (!p) return;
  EXPECT(coda_plan_tensor(p, "no_such_buffer", &t), CODA_ERR_INVALID_ARGUMENT);
  CHECK(strstr(coda_last_error(ctx), "no_such_buffer") != NULL);
  EXPECT(coda_plan_tensor(p, NULL, &t), CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_plan_tensor(p, "x", NULL) == CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_plan_tensor(p, "x", &t), CODA_OK);
  int64_t M = c.batch * c.seq;
  CHECK(t.rows == M && t.cols == c.dim && t.dtype == CODA_BF16);
  coda_tensor x_f32 = mk(CODA_F32, M, c.dim);
  coda_tensor x_short = mk(CODA_BF16, M - 1, c.dim);
  coda_tensor x_wide = mk(CODA_BF16, M, c.dim + 2);
  coda_tensor x_ok = mk(CODA_BF16, M, c.dim);
  EXPECT(coda_plan_bind(p, "x", &x_f32), CODA_ERR_SHAPE);
  EXPECT(coda_plan_bind(p, "x", &x_short), CODA_ERR_SHAPE);
  EXPECT(coda_plan_bind(p, "x", &x_wide), CODA_ERR_SHAPE);
  EXPECT(coda_plan_bind(p, "x", NULL), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_plan_bind(p, "nope", &x_ok), CODA_ERR_INVALID_ARGUMENT);
  coda_tensor bad_ld = x_ok;
  bad_ld.ld = c.dim - 1;
  EXPECT(coda_plan_bind(p, "x", &bad_ld), CODA_ERR_LAYOUT);
  coda_tensor nodata = x_ok;
  nodata.data = NULL;
  EXPECT(coda_plan_bind(p, "x", &nodata), CODA_ERR_INVALID_ARGUMENT);
  coda_tensor odd = x_ok;
  odd.data = (char *)x_ok.data + 1; /* bf16 needs 2-byte alignment */
  EXPECT(coda_plan_bind(p, "x", &odd), CODA_ERR_LAYOUT);
  coda_tensor huge = x_ok;
  huge.rows = INT64_MAX / 2;
  EXPECT(coda_plan_bind(p, "x", &huge), CODA_ERR_OVERFLOW);
  EXPECT(coda_plan_run(ctx, p, (coda_phase)7), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_plan_run(ctx, p, (coda_phase)-1), CODA_ERR_INVALID_ARGUMENT);
  /* a correct bind and run still work after all that */
  EXPECT(coda_plan_bind(p, "x", &x_ok), CODA_OK);
  EXPECT(coda_plan_run(ctx, p, CODA_PHASE_FORWARD), CODA_OK);
  /* linking plans of different shapes */
  coda_llama_config c2 = coda_llama_default_config();
  c2.dim = 32;
  c2.head_dim = 8;
  coda_plan p2 = NULL;
  EXPECT(coda_llama_block_plan(ctx, &c2, &p2), CODA_OK);
  if (p2) {
    coda_status s = coda_llama_link(p, p2);
    CHECK_MSG(s == CODA_ERR_SHAPE || s == CODA_ERR_INVALID_ARGUMENT, "link of other shapes -> %s",
              coda_status_string(s));
    coda_plan_destroy(p2);
  }
  coda_plan_destroy(p);
  free(x_f32.data); free(x_short.data); free(x_wide.data); free(x_ok.data);
}

static void attention_api(void) {
  const int B = 2, T = 5, Hq = 4, Hkv = 2, hd = 8;
  const int64_t BT = B * T, qc = (Hq + 2 * Hkv) * hd, oc = Hq * hd;
  coda_tensor qkv = mk(CODA_BF16, BT, qc), out = mk(CODA_BF16, BT, oc);
  coda_tensor lse = mk(CODA_F32, BT, Hq), dout = mk(CODA_BF16, BT, oc);
  coda_tensor dqkv = mk(CODA_BF16, BT, qc);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &out, &lse), CODA_OK);
  /* NULL tensors and context */
  EXPECT(coda_attention_forward(ctx, NULL, B, T, Hq, Hkv, hd, &out, &lse), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, NULL, &lse), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &out, NULL), CODA_ERR_INVALID_ARGUMENT);
  CHECK(coda_attention_forward(NULL, &qkv, B, T, Hq, Hkv, hd, &out, &lse) ==
        CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_backward(ctx, &qkv, &out, &lse, NULL, B, T, Hq, Hkv, hd, &dqkv),
         CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_backward(ctx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, NULL),
         CODA_ERR_INVALID_ARGUMENT);
  /* bad sizes */
  EXPECT(coda_attention_forward(ctx, &qkv, 0, T, Hq, Hkv, hd, &out, &lse), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_forward(ctx, &qkv, B, -1, Hq, Hkv, hd, &out, &lse), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, 3, Hkv, hd, &out, &lse), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, 0, hd, &out, &lse), CODA_ERR_INVALID_ARGUMENT);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, 0, &out, &lse), CODA_ERR_INVALID_ARGUMENT);
  /* shapes that disagree with the sizes */
  EXPECT(coda_attention_forward(ctx, &qkv, B, T + 1, Hq, Hkv, hd, &out, &lse), CODA_ERR_SHAPE);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd / 2, &out, &lse), CODA_ERR_SHAPE);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &lse, &lse), CODA_ERR_SHAPE);
  {
    coda_status s = coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &out, &out);
    CHECK_MSG(s == CODA_ERR_SHAPE || s == CODA_ERR_DTYPE, "out as lse -> %s",
              coda_status_string(s));
  }
  EXPECT(coda_attention_backward(ctx, &qkv, &out, &lse, &dout, B, T, Hq, Hkv, hd, &out),
         CODA_ERR_SHAPE);
  /* dtypes: lse must be f32; i32 is never data */
  coda_tensor lse16 = mk(CODA_BF16, BT, Hq), qkv_i = mk(CODA_I32, BT, qc);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, Hq, Hkv, hd, &out, &lse16), CODA_ERR_DTYPE);
  EXPECT(coda_attention_forward(ctx, &qkv_i, B, T, Hq, Hkv, hd, &out, &lse), CODA_ERR_DTYPE);
  coda_tensor qkv64 = mk(CODA_F64, BT, qc); /* f64 only in exact mode */
  EXPECT(coda_attention_forward(ctx, &qkv64, B, T, Hq, Hkv, hd, &out, &lse), CODA_ERR_DTYPE);
  /* strides and alignment */
  coda_tensor q_ld = qkv;
  q_ld.ld = qc - 1;
  EXPECT(coda_attention_forward(ctx, &q_ld, B, T, Hq, Hkv, hd, &out, &lse), CODA_ERR_LAYOUT);
  coda_tensor q_mis = qkv;
  q_mis.data = (char *)qkv.data + 1;
  EXPECT(coda_attention_forward(ctx, &q_mis, B, T, Hq, Hkv, hd, &out, &lse), CODA_ERR_LAYOUT);
  /* sizes past 32-bit indices: rejected before any memory is touched */
  coda_tensor big = qkv;
  big.rows = (int64_t)1 << 40;
  EXPECT(coda_attention_forward(ctx, &big, 1 << 20, 1 << 20, Hq, Hkv, hd, &out, &lse),
         CODA_ERR_OVERFLOW);
  EXPECT(coda_attention_forward(ctx, &qkv, 1 << 30, 1 << 30, Hq, Hkv, hd, &out, &lse),
         CODA_ERR_OVERFLOW);
  EXPECT(coda_attention_forward(ctx, &qkv, B, T, 1 << 30, 1 << 29, 1 << 30, &out, &lse),
         CODA_ERR_OVERFLOW);
  free(qkv.data); free(out.data); free(lse.data); free(dout.data); free(dqkv.data);
  free(lse16.data); free(qkv_i.data); free(qkv64.data);
}

/* GEMM and map domains whose element count exceeds int32 while each int64
 * fits: refused with CODA_ERR_OVERFLOW or a shape error, never run. */
static void big_domains(void) {
  coda_tensor A = mk(CODA_F32, 4, 4), B = mk(CODA_F32, 4, 4), D = mk(CODA_F32, 4, 4);
  coda_tensor bigA = A, bigD = D;
  bigA.rows = (int64_t)1 << 33; /* claims 2^33 rows over 64 bytes */
  bigD.rows = (int64_t)1 << 33;
  coda_status s = coda_gemm(ctx, CODA_N, &bigA, CODA_N, &B, &bigD, 1.0f, 0);
  CHECK_MSG(s != CODA_OK && strlen(coda_last_error(ctx)) > 0, "gemm with 2^33 rows -> %s (%s)",
            coda_status_string(s), coda_last_error(ctx));
  s = coda_gemm(ctx, CODA_N, &bigA, CODA_N, &B, &D, 1.0f, 0);
  CHECK_MSG(s == CODA_ERR_SHAPE || s == CODA_ERR_ALIAS, "gemm 2^33 x 4 into 4 x 4 -> %s",
            coda_status_string(s));
  coda_tensor hugeA = A;
  hugeA.rows = INT64_MAX / 4;
  EXPECT(coda_gemm(ctx, CODA_N, &hugeA, CODA_N, &B, &D, 1.0f, 0), CODA_ERR_OVERFLOW);
  coda_program p = NULL;
  EXPECT(coda_program_parse(ctx, "input x : scalar f32\noutput o : f32\nstore o = x\n", &p),
         CODA_OK);
  if (p) {
    coda_args a;
    CHECK(coda_args_create(ctx, &a) == CODA_OK);
    coda_tiling tl = {64, 128};
    coda_status s2 = coda_map(ctx, p, (int64_t)1 << 40, (int64_t)1 << 40, a, tl);
    CHECK_MSG(s2 == CODA_ERR_OVERFLOW || s2 == CODA_ERR_SHAPE || s2 == CODA_ERR_INVALID_ARGUMENT,
              "map over 2^80 points -> %s", coda_status_string(s2));
    s2 = coda_map(ctx, p, -1, 4, a, tl);
    CHECK_MSG(s2 != CODA_OK, "map over -1 rows accepted");
    coda_tiling tl0 = {0, 0};
    s2 = coda_map(ctx, p, 4, 4, a, tl0);
    CHECK_MSG(s2 != CODA_OK, "tiling 0 x 0 accepted by coda_map");
    coda_tiling pt;
    s2 = coda_preferred_tiling(ctx, p, (int64_t)1 << 62, (int64_t)1 << 62, 1, &pt);
    CHECK_MSG(s2 == CODA_OK || s2 == CODA_ERR_OVERFLOW, "preferred tiling -> %s",
              coda_status_string(s2));
    coda_args_destroy(a);
    coda_program_destroy(p);
  }
  free(A.data); free(B.data); free(D.data);
}

int main(void) {
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  plan_api();
  attention_api();
  big_domains();
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
