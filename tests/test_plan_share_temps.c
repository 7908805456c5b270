/* Temporaries share memory by liveness (coda_plan_set_share_temps).
 *
 * - The interval packer (plan_pack) on random interval sets: blocks that
 *   are live at a common step never share a byte, offsets are aligned, the
 *   arena is at least the largest total live at one step and at most the
 *   sum of the (aligned) sizes, the same input gives the same layout, and
 *   with every block live at once it is exactly that sum.
 * - The Llama-3 block, the head and the GPT-2 block (bf16 storage with
 *   fp32 compute, and exact mode), forward + backward with sharing on and
 *   off, fused and unfused: every output, gradient and saved buffer
 *   bit-identical, and a second backward on the same forward too; the
 *   context's peak memory strictly lower with sharing on.
 * - Which temporaries may not share: one read, or accumulated into,
 *   before it is written, one with initial values, one the caller binds.
 * - coda_plan_text shows the arena and each temporary's steps and offset. */
#include "coda_nn.h"
#include "check.h"
#include "plan_test_util.h"
#include "test_util.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>


static size_t align_up(size_t x) { return (x + PLAN_ARENA_ALIGN - 1) / PLAN_ARENA_ALIGN * PLAN_ARENA_ALIGN; }

/* ------------------------------------------------------------ packer */

static void pack_random(void) {
  uint64_t s = 12345;
  plan_interval iv[64];
  size_t off[64], off2[64];
  for (int trial = 0; trial < 400; trial++) {
    const int n = 1 + (int)(lcg64_next(&s) % 64), nsteps = 1 + (int)(lcg64_next(&s) % 30);
    for (int i = 0; i < n; i++) {
      int a = (int)(lcg64_next(&s) % (uint64_t)nsteps), b = (int)(lcg64_next(&s) % (uint64_t)nsteps);
      if (a > b) { int t = a; a = b; b = t; }
      iv[i].first = a;
      iv[i].last = trial % 3 == 0 ? a : b; /* some sets of short lives */
      /* sizes: small, odd, 256-multiples and large, with repeats */
      const uint64_t k = lcg64_next(&s) % 4;
      iv[i].bytes = k == 0 ? 1 + lcg64_next(&s) % 300 : k == 1 ? 256 * (1 + lcg64_next(&s) % 8)
                  : k == 2 ? 1 + lcg64_next(&s) % 100000 : 4096;
    }
    size_t arena = 0, arena2 = 0;
    CHECK(plan_pack(iv, n, off, &arena) == 0);
    CHECK(plan_pack(iv, n, off2, &arena2) == 0);
    CHECK(arena == arena2 && memcmp(off, off2, (size_t)n * sizeof *off) == 0);
    size_t sum = 0, top = 0;
    for (int i = 0; i < n; i++) {
      CHECK_MSG(off[i] % PLAN_ARENA_ALIGN == 0, "offset %zu not aligned", off[i]);
      sum += align_up(iv[i].bytes);
      if (off[i] + iv[i].bytes > top) top = off[i] + iv[i].bytes;
      for (int j = i + 1; j < n; j++) {
        const int live = iv[i].first <= iv[j].last && iv[j].first <= iv[i].last;
        const int mem = off[i] < off[j] + iv[j].bytes && off[j] < off[i] + iv[i].bytes;
        CHECK_MSG(!(live && mem), "trial %d: blocks %d and %d live together and overlap", trial,
                  i, j);
      }
    }
    size_t most = 0; /* largest total live at one step */
    for (int t = 0; t < nsteps; t++) {
      size_t at = 0;
      for (int i = 0; i < n; i++) at += iv[i].first <= t && t <= iv[i].last ? iv[i].bytes : 0;
      if (at > most) most = at;
    }
    CHECK(arena % PLAN_ARENA_ALIGN == 0 && arena >= top);
    CHECK_MSG(arena >= most && arena <= sum, "arena %zu, live %zu, sum %zu", arena, most, sum);
    /* everything live at once: side by side */
    for (int i = 0; i < n; i++) iv[i].first = iv[i].last = 0;
    CHECK(plan_pack(iv, n, off, &arena) == 0);
    CHECK_EQ_INT(arena, sum);
  }
  size_t arena = 7;
  CHECK(plan_pack(iv, 0, off, &arena) == 0 && arena == 0);
  /* a size that cannot be placed is refused, not wrapped */
  iv[0] = (plan_interval){0, 0, SIZE_MAX - 10};
  iv[1] = (plan_interval){0, 0, 1000};
  CHECK(plan_pack(iv, 2, off, &arena) != 0);
}

/* ------------------------------------------------------------- blocks */

static const char *kName[3] = {"llama block", "llama head", "gpt2 block"};

/* The kind at the library's default sizes. */
static coda_plan make(coda_context ctx, pt_kind k, coda_dtype dt) {
  coda_plan p = NULL;
  const coda_status s = pt_build(ctx, k, NULL, dt, (coda_tiling){0, 0}, 0, &p);
  CHECK_MSG(s == CODA_OK, "%s: %s", kName[k], coda_last_error(ctx));
  return p;
}

/* Every input and weight from a fixed stream (norm gains near 1; targets
 * in range but for one ignored row). */
static void fill(coda_plan p) {
  uint64_t s = 99;
  for (int i = 0; i < p->nbuf; i++) {
    const plan_buf *b = &p->bufs[i];
    if (b->role != PLAN_ROLE_INPUT && b->role != PLAN_ROLE_PARAM) continue;
    coda_tensor t;
    CHECK(coda_plan_tensor(p, b->name, &t) == CODA_OK);
    const int gain = strstr(b->name, "wn") || strstr(b->name, "_g");
    for (int64_t r = 0; r < t.rows; r++)
      for (int64_t c = 0; c < t.cols; c++) {
        const double u = (double)lcg64_next(&s) / 9007199254740992.0 * 2 - 1;
        if (t.dtype == CODA_I32) /* targets: vocab 256 */
          ((int32_t *)t.data)[r * t.ld + c] = r == 3 ? -100 : (int32_t)(lcg64_next(&s) % 256);
        else coda_store(&t, r, c, gain ? 1 + 0.1 * u : 0.5 * u);
      }
  }
}

static int is_kept(const plan_buf *b) {
  return b->role == PLAN_ROLE_OUTPUT || b->role == PLAN_ROLE_GRAD || b->role == PLAN_ROLE_SAVED;
}

static size_t buf_bytes(const plan_buf *b) {
  return (size_t)(b->rows * b->cols) * coda_dtype_size(b->dtype);
}

/* Copies of every output, gradient and saved buffer, in buffer order. */
static unsigned char *snapshot(coda_plan p, size_t *total) {
  size_t n = 0;
  for (int i = 0; i < p->nbuf; i++) n += is_kept(&p->bufs[i]) ? buf_bytes(&p->bufs[i]) : 0;
  unsigned char *v = malloc(n ? n : 1), *o = v;
  for (int i = 0; i < p->nbuf; i++) {
    const plan_buf *b = &p->bufs[i];
    if (!is_kept(b)) continue;
    CHECK(b->data && b->ld == b->cols);
    memcpy(o, b->data, buf_bytes(b));
    o += buf_bytes(b);
  }
  *total = n;
  return v;
}

/* Names the first kept buffer where a and b differ. */
static const char *first_diff(coda_plan p, const unsigned char *a, const unsigned char *b) {
  size_t o = 0;
  for (int i = 0; i < p->nbuf; i++) {
    const plan_buf *u = &p->bufs[i];
    if (!is_kept(u)) continue;
    if (memcmp(a + o, b + o, buf_bytes(u))) return u->name;
    o += buf_bytes(u);
  }
  return "(none)";
}

typedef struct result {
  unsigned char *v; /* after forward + backward */
  unsigned char *v2; /* after a second backward */
  size_t n;
  size_t peak, arena, temps;
} result;

/* One plan on a fresh context: forward, backward, backward again. */
static result run(pt_kind k, coda_precision prec, coda_dtype dt, int share, int fused) {
  result r;
  memset(&r, 0, sizeof r);
  coda_context_options o = coda_context_default_options();
  o.num_threads = 2;
  o.precision = prec;
  coda_context ctx;
  CHECK(coda_context_create(&o, &ctx) == CODA_OK);
  coda_plan p = make(ctx, k, dt);
  if (!p) {
    coda_context_destroy(ctx);
    return r;
  }
  CHECK(coda_plan_set_share_temps(p, share) == CODA_OK);
  CHECK(coda_plan_set_fused(p, fused) == CODA_OK);
  fill(p);
  CHECK_MSG(coda_plan_run(ctx, p, CODA_PHASE_FORWARD) == CODA_OK, "%s", coda_last_error(ctx));
  CHECK_MSG(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK, "%s", coda_last_error(ctx));
  r.v = snapshot(p, &r.n);
  CHECK_MSG(coda_plan_run(ctx, p, CODA_PHASE_BACKWARD) == CODA_OK, "%s", coda_last_error(ctx));
  r.v2 = snapshot(p, &r.n);
  CHECK_MSG(memcmp(r.v, r.v2, r.n) == 0, "%s: a second backward changed '%s'", kName[k],
            first_diff(p, r.v, r.v2));
  coda_memory_info mi;
  CHECK(coda_memory_stats(ctx, &mi) == CODA_OK);
  r.peak = mi.peak_bytes;
  r.arena = p->arena_bytes;
  r.temps = p->temp_bytes;
  /* the arena is the context's memory, given back with the plan */
  CHECK(mi.current_bytes >= p->arena_bytes);
  const char *text = coda_plan_text(p);
  CHECK(strstr(text, "temporaries: ") != NULL);
  CHECK(strstr(text, share ? "shared where their steps do not overlap" : "sharing off") != NULL);
  CHECK(strstr(text, " @ ") != NULL); /* offsets */
  if (!fused && share) CHECK(strstr(text, "(" PLAN_ACC_INPUT " @ ") != NULL);
  CHECK(strstr(text, ", own memory") == NULL); /* every temporary of these plans shares */
  coda_plan_destroy(p);
  CHECK(coda_memory_stats(ctx, &mi) == CODA_OK);
  CHECK_EQ_INT(mi.current_bytes, 0);
  coda_context_destroy(ctx);
  return r;
}

static void blocks(void) {
  for (int k = PT_LLAMA_BLOCK; k <= PT_GPT2_BLOCK; k++)
    for (int exact = 0; exact < 2; exact++)
      for (int fused = 1; fused >= 0; fused--) {
        const coda_precision prec = exact ? CODA_PRECISION_F64 : CODA_PRECISION_F32;
        const coda_dtype dt = exact ? CODA_F64 : CODA_BF16;
        result on = run((pt_kind)k, prec, dt, 1, fused), off = run((pt_kind)k, prec, dt, 0, fused);
        if (!on.v || !off.v) continue;
        CHECK(on.n == off.n);
        CHECK_MSG(memcmp(on.v, off.v, on.n) == 0, "%s (%s, %s): sharing changed the results",
                  kName[k], exact ? "exact" : "bf16", fused ? "fused" : "unfused");
        printf("  %-11s %-5s %-7s temporaries %7zu B, arena %7zu B shared, %7zu B not; "
               "peak %8zu B vs %8zu B\n",
               kName[k], exact ? "exact" : "bf16", fused ? "fused" : "unfused", on.temps,
               on.arena, off.arena, on.peak, off.peak);
        CHECK_MSG(on.peak < off.peak, "%s: peak %zu with sharing, %zu without", kName[k], on.peak,
                  off.peak);
        CHECK(off.arena >= off.temps);
        if (fused) CHECK(on.arena < off.arena); /* unfused: the on arena also holds the accumulators */
        free(on.v);
        free(on.v2);
        free(off.v);
        free(off.v2);
      }
}

/* ----------------------------------------- temporaries that keep memory */

static void exclusions(void) {
  coda_context ctx = lt_context(CODA_PRECISION_F64);
  const int64_t M = 8, K = 16, N = 16;
  const coda_tiling tl = {8, 8};
  coda_plan p;
  CHECK(plan_create(ctx, "keep", &p) == CODA_OK);
  plan_buffer(p, "h", CODA_F64, M, K, PLAN_ROLE_INPUT);
  plan_buffer(p, "W", CODA_F64, N, K, PLAN_ROLE_PARAM);
  plan_buffer(p, "r", CODA_F64, M, N, PLAN_ROLE_TEMP);    /* read before written */
  plan_buffer(p, "a", CODA_F64, M, N, PLAN_ROLE_TEMP);    /* accumulated into first */
  plan_buffer(p, "c", CODA_F64, M, N, PLAN_ROLE_TEMP);    /* initial values */
  plan_buffer(p, "t", CODA_F64, M, N, PLAN_ROLE_TEMP);    /* shares */
  plan_buffer(p, "u", CODA_F64, M, N, PLAN_ROLE_TEMP);    /* shares with t */
  plan_buffer(p, "b", CODA_F64, M, N, PLAN_ROLE_TEMP);    /* bound by the caller */
  plan_buffer(p, "y", CODA_F64, M, N, PLAN_ROLE_OUTPUT);
  plan_buffer(p, "G", CODA_F64, N, K, PLAN_ROLE_GRAD);
  double *init = calloc((size_t)(M * N), sizeof *init);
  plan_buffer_init(p, "c", init);
  free(init);
  const coda_phase FW = CODA_PHASE_FORWARD, BW = CODA_PHASE_BACKWARD;
  plan_gemm(p, FW, "t = hW^T + r", "llama_residual", CODA_N, "h", CODA_T, "W", tl, "res=r x=t");
  plan_matmul(p, FW, "a += hW^T", CODA_N, "h", CODA_T, "W", "a", 1.0f, 1);
  plan_gemm(p, FW, "b = hW^T + c", "llama_residual", CODA_N, "h", CODA_T, "W", tl, "res=c x=b");
  plan_gemm(p, FW, "y = hW^T + t", "llama_residual", CODA_N, "h", CODA_T, "W", tl, "res=t x=y");
  plan_copy(p, BW, "u = y", "y", "u");
  plan_matmul(p, BW, "G = u^T h", CODA_T, "u", CODA_N, "h", "G", 1.0f, 0);
  CHECK_MSG(plan_status(p) == CODA_OK, "%s", coda_last_error(ctx));
  double bound[8 * 16] = {0};
  coda_tensor bt = coda_tensor_2d(bound, CODA_F64, M, N);
  CHECK(coda_plan_bind(p, "b", &bt) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, FW) == CODA_OK);
  CHECK(coda_plan_run(ctx, p, BW) == CODA_OK);
  const char *own[4] = {"r", "a", "c", "b"};
  for (int i = 0; i < 4; i++) CHECK_MSG(p->bufs[plan_find(p, own[i])].arena_off < 0, "%s", own[i]);
  const plan_buf *t = &p->bufs[plan_find(p, "t")], *u = &p->bufs[plan_find(p, "u")];
  CHECK(t->arena_off >= 0 && u->arena_off >= 0);
  CHECK_EQ_INT(t->live_first, 0);
  CHECK_EQ_INT(t->live_last, 3);
  CHECK_EQ_INT(u->live_first, 4);
  CHECK(t->arena_off == u->arena_off); /* t is dead when u is born */
  CHECK(p->bufs[plan_find(p, "b")].data == (void *)bound);
  CHECK_EQ_INT(p->arena_bytes, (size_t)(M * N) * 8);
  const char *text = coda_plan_text(p);
  CHECK(strstr(text, "temporaries: 2 in one arena of 1024 B (2048 B side by side") != NULL);
  CHECK(strstr(text, "steps 0-3 @ 0 B") != NULL && strstr(text, "steps 4-5 @ 0 B") != NULL);
  CHECK(strstr(text, "steps 0-0, own memory") != NULL); /* r */
  /* a view of a temporary into the arena; set_share_temps gives it back */
  coda_tensor v;
  CHECK(coda_plan_tensor(p, "t", &v) == CODA_OK && v.data == t->data);
  CHECK(coda_plan_set_share_temps(p, 0) == CODA_OK);
  CHECK(p->arena == NULL && t->data == NULL);
  CHECK(coda_plan_tensor(p, "t", &v) == CODA_OK && p->arena != NULL);
  CHECK(t->arena_off != u->arena_off && p->arena_bytes == 2 * (size_t)(M * N) * 8);
  CHECK(coda_plan_set_share_temps(NULL, 1) == CODA_ERR_INVALID_ARGUMENT);
  coda_plan_destroy(p);
  coda_context_destroy(ctx);
}

int main(void) {
  pack_random();
  exclusions();
  blocks();
  return CHECK_DONE();
}
