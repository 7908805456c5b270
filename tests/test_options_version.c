/* Versioned option structs (coda.h, "Versioned option structs"): every
 * coda_*_options struct a call takes (and coda_generate_params) begins
 * with struct_size, and
 *  - the *_default_options() functions set it to the struct's size;
 *  - 0 (unset), a size larger than the library's struct, and a size of no
 *    known layout are refused with CODA_ERR_INVALID_ARGUMENT and a message
 *    naming the struct, the size given and the size expected, before
 *    anything else is done;
 *  - coda_context_options of its first layout (the struct as a caller
 *    built against that header has it, without own_stream) is accepted:
 *    the fields it has are taken, own_stream gets its default, and the
 *    bytes past the caller's struct are never read (they hold garbage
 *    here); so is its second layout (without arch and compile_cc). */
#define _POSIX_C_SOURCE 200809L /* unsetenv */
#include "coda_decode.h"
#include "base/internal.h" /* the context's options as taken */
#include "check.h"

#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* msg holds every one of the NULL-terminated strings. */
static int holds(const char *msg, ...) {
  va_list ap;
  va_start(ap, msg);
  int ok = 1;
  for (const char *s; (s = va_arg(ap, const char *));)
    if (!strstr(msg, s)) ok = 0;
  va_end(ap);
  return ok;
}

static const char *zu(size_t v, char buf[32]) {
  snprintf(buf, 32, "%zu", v);
  return buf;
}

/* coda_context_options as the header of its first layout declares it. */
typedef struct context_options_old {
  size_t struct_size;
  coda_backend backend;
  coda_precision precision;
  int num_threads, device, autotune, debug_sync;
  void *stream;
  int retune;
  coda_epi_schedule epi_schedule;
  int epi_tma_loads;
  coda_attn_impl attn_impl;
  const char *cache_dir;
} context_options_old;

/* ... and of its second layout (own_stream appended). */
typedef struct context_options_second {
  context_options_old first;
  int own_stream;
} context_options_second;

static void test_context(void) {
  char msg[512], a[32], b[32], c[32];
  const size_t cur = sizeof(coda_context_options), old = sizeof(context_options_old);
  CHECK(old < cur);
  coda_context_options o = coda_context_default_options();
  CHECK_EQ_INT(o.struct_size, cur);
  coda_context ctx = (coda_context)1;

  /* unset */
  o.struct_size = 0;
  CHECK_EQ_INT(coda_context_create(&o, &ctx), CODA_ERR_INVALID_ARGUMENT);
  CHECK(ctx == NULL);
  CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(holds(msg, "coda_context_options.struct_size is 0", zu(cur, a), zu(old, b),
                  "coda_context_default_options()", NULL), "%s", msg);

  /* larger: a caller built against a newer header */
  struct {
    coda_context_options o;
    int64_t later_member;
  } newer;
  memset(&newer, 0, sizeof newer);
  newer.o = coda_context_default_options();
  newer.o.struct_size = sizeof newer;
  CHECK(sizeof newer > cur);
  CHECK_EQ_INT(coda_context_create(&newer.o, &ctx), CODA_ERR_INVALID_ARGUMENT);
  CHECK_EQ_INT(coda_context_options_check(&newer.o, msg, sizeof msg), CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(holds(msg, "coda_context_options.struct_size is", zu(sizeof newer, a), "larger than",
                  zu(cur, b), "newer header", NULL), "%s", msg);

  /* between the layouts, and below the oldest: no layout's size */
  const size_t odd[] = {cur - 4, old - 8, sizeof(size_t)};
  for (int i = 0; i < 3; i++) {
    o = coda_context_default_options();
    o.struct_size = odd[i];
    CHECK_EQ_INT(coda_context_create(&o, &ctx), CODA_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_ERR_INVALID_ARGUMENT);
    CHECK_MSG(holds(msg, "coda_context_options.struct_size is", zu(odd[i], a),
                    "not the size of a coda_context_options layout", zu(old, b), zu(cur, c), NULL),
              "%s", msg);
  }

  /* the first layout, followed by garbage where own_stream would be */
  unsigned char *buf = malloc(cur + 64);
  memset(buf, 0xA5, cur + 64);
  context_options_old ov;
  memset(&ov, 0, sizeof ov);
  ov.struct_size = sizeof ov;
  ov.backend = CODA_BACKEND_CPU;
  ov.precision = CODA_PRECISION_F64;
  ov.num_threads = 3;
  ov.cache_dir = "an-old-callers-cache";
  memcpy(buf, &ov, sizeof ov);
  const coda_context_options *as_new = (const coda_context_options *)(void *)buf;
  CHECK_EQ_INT(coda_context_options_check(as_new, msg, sizeof msg), CODA_OK);
  CHECK_MSG(msg[0] == '\0', "%s", msg);
  ctx = NULL;
  CHECK_EQ_INT(coda_context_create(as_new, &ctx), CODA_OK);
  if (ctx) {
    CHECK_EQ_INT(ctx->opts.struct_size, cur);
    CHECK_EQ_INT(ctx->opts.own_stream, 0); /* the default, not the 0xA5 bytes */
    CHECK_EQ_INT(ctx->opts.num_threads, 3);
    CHECK_EQ_INT(coda_context_precision(ctx), CODA_PRECISION_F64);
    CHECK(ctx->opts.cache_dir && !strcmp(ctx->opts.cache_dir, "an-old-callers-cache"));
    coda_context_destroy(ctx);
  }
  free(buf);
  /* exactly the old struct's bytes on the heap: a read past them is an
   * error under AddressSanitizer */
  context_options_old *exact = malloc(sizeof *exact);
  memcpy(exact, &ov, sizeof ov);
  ctx = NULL;
  CHECK_EQ_INT(coda_context_create((const coda_context_options *)(void *)exact, &ctx), CODA_OK);
  coda_context_destroy(ctx);
  free(exact);

  /* the second layout, garbage where arch and compile_cc would be: they
   * take their defaults (the mainloop then is CODA_ARCH's, unset here) */
  unsetenv("CODA_ARCH");
  context_options_second sv;
  memset(&sv, 0, sizeof sv);
  sv.first = ov;
  sv.first.struct_size = sizeof sv;
  sv.own_stream = 1;
  CHECK(sizeof sv > sizeof ov && sizeof sv < cur);
  buf = malloc(cur + 64);
  memset(buf, 0xA5, cur + 64);
  memcpy(buf, &sv, sizeof sv);
  ctx = NULL;
  CHECK_EQ_INT(coda_context_create((const coda_context_options *)(void *)buf, &ctx), CODA_OK);
  if (ctx) {
    CHECK_EQ_INT(ctx->opts.struct_size, cur);
    CHECK_EQ_INT(ctx->opts.own_stream, 1);
    CHECK_EQ_INT(ctx->opts.arch, CODA_ARCH_AUTO);
    CHECK_EQ_INT(ctx->opts.compile_cc, 0);
    CHECK_EQ_INT(ctx->opts.num_threads, 3);
    coda_context_destroy(ctx);
  }
  free(buf);

  /* the field checks got messages too */
  o = coda_context_default_options();
  o.num_threads = -2;
  CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(holds(msg, "num_threads is -2", NULL), "%s", msg);
  o = coda_context_default_options();
  CHECK_EQ_INT(coda_context_options_check(&o, msg, sizeof msg), CODA_OK);
  CHECK_EQ_INT(coda_context_options_check(NULL, msg, sizeof msg), CODA_OK);
}

/* A struct refused for its size: status and the context's message. */
#define CHECK_SIZE_REFUSED(ctx, call, name, given, expected)                                 \
  do {                                                                                      \
    char g_[32], e_[32];                                                                    \
    coda_clear_error(ctx);                                                                  \
    CHECK_EQ_INT((call), CODA_ERR_INVALID_ARGUMENT);                                        \
    CHECK_MSG(holds(coda_last_error(ctx), name ".struct_size is", zu((given), g_),          \
                    zu((expected), e_), NULL),                                              \
              "%s: %s", #call, coda_last_error(ctx));                                       \
  } while (0)

/* For each struct: 0, one larger than the library's, one between. */
static void test_others(coda_context ctx) {
  const size_t wrong[3] = {0, 1, 2}; /* 0, +8, -8 bytes: applied per struct below */
  for (int w = 0; w < 3; w++) {
#define WRONG(T) (wrong[w] == 0 ? 0 : wrong[w] == 1 ? sizeof(T) + 8 : sizeof(T) - 8)
    coda_model_config mc;
    CHECK(coda_model_config_named("tiny", &mc) == CODA_OK);
    coda_decoder_options dopt = coda_decoder_default_options();
    CHECK_EQ_INT(dopt.struct_size, sizeof dopt);
    /* 8 bytes less is its first layout's size (accepted, test_decoder_layout1) */
    dopt.struct_size = wrong[w] == 2 ? sizeof dopt - 4 : WRONG(coda_decoder_options);
    coda_decoder d = NULL;
    CHECK_SIZE_REFUSED(ctx, coda_decoder_create_random(ctx, &mc, 1, &dopt, &d),
                       "coda_decoder_options", dopt.struct_size, sizeof dopt);
    CHECK(d == NULL);
    CHECK_SIZE_REFUSED(ctx, coda_decoder_load(ctx, "no-such-checkpoint", &dopt, &d),
                       "coda_decoder_options", dopt.struct_size, sizeof dopt);

    coda_train_options to = coda_train_default_options();
    CHECK_EQ_INT(to.struct_size, sizeof to);
    to.struct_size = WRONG(coda_train_options);
    coda_train_summary sum;
    CHECK_SIZE_REFUSED(ctx, coda_train(ctx, &to, &sum), "coda_train_options", to.struct_size,
                       sizeof to);
    if (w == 0) { /* the layouts before 0.2 (coda_model_config grew) are refused */
      const size_t old[2] = {offsetof(coda_train_options, validation_progress),
                             offsetof(coda_train_options, optim_state)};
      for (int k = 0; k < 2; k++) {
        to = coda_train_default_options();
        to.struct_size = old[k];
        CHECK_SIZE_REFUSED(ctx, coda_train(ctx, &to, &sum), "coda_train_options", old[k],
                           sizeof to);
      }
    }

    coda_generate_options go = coda_generate_default_options();
    CHECK_EQ_INT(go.struct_size, sizeof go);
    go.checkpoint = "no-such-checkpoint";
    go.struct_size = WRONG(coda_generate_options);
    char *text = NULL;
    CHECK_SIZE_REFUSED(ctx, coda_generate(ctx, &go, &text), "coda_generate_options",
                       go.struct_size, sizeof go);
    CHECK(text == NULL);

    coda_eval_options eo = coda_eval_default_options();
    CHECK_EQ_INT(eo.struct_size, sizeof eo);
    eo.checkpoint = eo.shard = "no-such-file";
    eo.struct_size = WRONG(coda_eval_options);
    coda_eval_result er;
    CHECK_SIZE_REFUSED(ctx, coda_evaluate(ctx, &eo, &er), "coda_eval_options", eo.struct_size,
                       sizeof eo);
    if (w == 0) { /* the layout before progress and user is still taken */
      eo = coda_eval_default_options();
      eo.checkpoint = eo.shard = "no-such-file";
      eo.struct_size = offsetof(coda_eval_options, progress);
      coda_clear_error(ctx);
      CHECK(coda_evaluate(ctx, &eo, &er) != CODA_OK && !strstr(coda_last_error(ctx), "struct_size"));
    }

    coda_data_options da = coda_data_default_options();
    CHECK_EQ_INT(da.struct_size, sizeof da);
    da.path = "no-such-corpus";
    da.struct_size = WRONG(coda_data_options);
    CHECK_SIZE_REFUSED(ctx, coda_prepare_data(ctx, &da, "no-such-output", NULL, NULL, NULL),
                       "coda_data_options", da.struct_size, sizeof da);
#undef WRONG
  }
  /* the same structs with their size set: they get past the size check
   * (to the missing file, an error of its own) */
  coda_eval_options eo = coda_eval_default_options();
  eo.checkpoint = eo.shard = "no-such-file";
  coda_eval_result er;
  CHECK(coda_evaluate(ctx, &eo, &er) != CODA_OK);
  CHECK_MSG(!strstr(coda_last_error(ctx), "struct_size"), "%s", coda_last_error(ctx));
  coda_decoder_options dopt = coda_decoder_default_options();
  coda_decoder d = NULL;
  CHECK_EQ_INT(coda_decoder_load(ctx, "no-such-checkpoint", &dopt, &d), CODA_ERR_IO);
  /* designated initializers that set the size work as the defaults do */
  coda_model_config mc;
  CHECK(coda_model_config_named("tiny", &mc) == CODA_OK);
  coda_decoder_options di = {.struct_size = sizeof di, .batch = 2, .max_len = 8};
  CHECK_STATUS(ctx, coda_decoder_create_random(ctx, &mc, 1, &di, &d), CODA_OK);
  if (d) {
    CHECK_EQ_INT(coda_decoder_batch(d), 2);
    CHECK_EQ_INT(coda_decoder_max_len(d), 8);
    /* coda_generate_params: 0, +8 and -8 bytes refused before anything
     * runs; the defaults generate */
    const int32_t prompt[2] = {1, 2};
    const int32_t *pr[1] = {prompt};
    const int len[1] = {2};
    coda_generate_result res[1];
    coda_generate_params gp = coda_generate_default_params();
    CHECK_EQ_INT(gp.struct_size, sizeof gp);
    const size_t bad[3] = {0, sizeof gp + 8, sizeof gp - 8};
    for (int w = 0; w < 3; w++) {
      gp.struct_size = bad[w];
      CHECK_SIZE_REFUSED(ctx, coda_decoder_generate(d, pr, len, 1, &gp, res, NULL, NULL),
                         "coda_generate_params", bad[w], sizeof gp);
    }
    gp.struct_size = sizeof gp;
    gp.max_new_tokens = 3;
    CHECK_STATUS(ctx, coda_decoder_generate(d, pr, len, 1, &gp, res, NULL, NULL), CODA_OK);
    CHECK_EQ_INT(res[0].n, 3);
    coda_generate_result_free(res, 1);
    coda_decoder_destroy(d);
  }
}

/* coda_decoder_options as the header of its first layout declares it
 * (before prefill). */
typedef struct decoder_options_old {
  size_t struct_size;
  int batch, max_len, no_graphs;
  const char *tokenizer;
} decoder_options_old;

/* The first layout is accepted, followed by garbage where prefill would be
 * (read, 0xA5A5A5A5 would be refused as no coda_prefill_path), and exactly
 * its bytes on the heap (a read past them is an AddressSanitizer error). */
static void test_decoder_layout1(coda_context ctx) {
  CHECK(sizeof(decoder_options_old) < sizeof(coda_decoder_options));
  coda_model_config mc;
  CHECK(coda_model_config_named("tiny", &mc) == CODA_OK);
  decoder_options_old ov;
  memset(&ov, 0, sizeof ov);
  ov.struct_size = sizeof ov;
  ov.batch = 2;
  ov.max_len = 8;
  unsigned char *buf = malloc(sizeof(coda_decoder_options) + 64);
  memset(buf, 0xA5, sizeof(coda_decoder_options) + 64);
  memcpy(buf, &ov, sizeof ov);
  coda_decoder d = NULL;
  CHECK_STATUS(ctx, coda_decoder_create_random(ctx, &mc, 1, (const coda_decoder_options *)(void *)buf,
                                               &d), CODA_OK);
  if (d) CHECK_EQ_INT(coda_decoder_batch(d), 2);
  coda_decoder_destroy(d);
  free(buf);
  decoder_options_old *exact = malloc(sizeof *exact);
  memcpy(exact, &ov, sizeof ov);
  d = NULL;
  CHECK_STATUS(ctx, coda_decoder_create_random(ctx, &mc, 1, (const coda_decoder_options *)(void *)exact,
                                               &d), CODA_OK);
  if (d) CHECK_EQ_INT(coda_decoder_max_len(d), 8);
  coda_decoder_destroy(d);
  free(exact);
  /* the current layout's prefill is checked */
  coda_decoder_options o = coda_decoder_default_options();
  o.prefill = (coda_prefill_path)7;
  d = NULL;
  coda_clear_error(ctx);
  CHECK_EQ_INT(coda_decoder_create_random(ctx, &mc, 1, &o, &d), CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(holds(coda_last_error(ctx), "coda_decoder_options.prefill is 7", NULL), "%s",
            coda_last_error(ctx));
  CHECK(d == NULL);
  /* and its chunk_rows */
  o = coda_decoder_default_options();
  o.chunk_rows = -3;
  coda_clear_error(ctx);
  CHECK_EQ_INT(coda_decoder_create_random(ctx, &mc, 1, &o, &d), CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(holds(coda_last_error(ctx), "coda_decoder_options.chunk_rows is -3", NULL), "%s",
            coda_last_error(ctx));
  CHECK(d == NULL);
}

/* coda_decoder_options as its second layout had it (before chunk_rows). */
typedef struct decoder_options_layout2 {
  size_t struct_size;
  int batch, max_len, no_graphs;
  const char *tokenizer;
  coda_prefill_path prefill;
} decoder_options_layout2;

/* The second layout, exactly its bytes on the heap, followed by nothing
 * (a read of chunk_rows past them is an AddressSanitizer error), and its
 * prefill still checked. */
static void test_decoder_layout2(coda_context ctx) {
  CHECK(sizeof(decoder_options_layout2) < sizeof(coda_decoder_options));
  coda_model_config mc;
  CHECK(coda_model_config_named("tiny", &mc) == CODA_OK);
  decoder_options_layout2 *o2 = calloc(1, sizeof *o2);
  o2->struct_size = sizeof *o2;
  o2->batch = 3;
  o2->max_len = 9;
  o2->prefill = CODA_PREFILL_DIRECT;
  coda_decoder d = NULL;
  CHECK_STATUS(ctx, coda_decoder_create_random(ctx, &mc, 1, (const coda_decoder_options *)(void *)o2,
                                               &d), CODA_OK);
  if (d) CHECK_EQ_INT(coda_decoder_batch(d), 3);
  coda_decoder_destroy(d);
  o2->prefill = (coda_prefill_path)9;
  d = NULL;
  coda_clear_error(ctx);
  CHECK_EQ_INT(coda_decoder_create_random(ctx, &mc, 1, (const coda_decoder_options *)(void *)o2,
                                          &d), CODA_ERR_INVALID_ARGUMENT);
  CHECK_MSG(holds(coda_last_error(ctx), "coda_decoder_options.prefill is 9", NULL), "%s",
            coda_last_error(ctx));
  free(o2);
}

static void test_gradcheck(void) {
  coda_context_options co = coda_context_default_options();
  co.precision = CODA_PRECISION_F64;
  coda_context ctx = NULL;
  CHECK(coda_context_create(&co, &ctx) == CODA_OK);
  if (!ctx) return;
  coda_program f = NULL, b = NULL;
  CHECK(coda_program_parse(ctx, "input x : tile f64\noutput y : f64\nstore y = x * 2\n", &f) ==
        CODA_OK);
  CHECK(coda_program_parse(ctx, "input dy : tile f64\noutput dx : f64\nstore dx = dy * 2\n", &b) ==
        CODA_OK);
  coda_grad_link l[] = {{CODA_GRAD_WRT, "x", "dx", 0, 0}, {CODA_GRAD_SEED, "y", "dy", 0, 0}};
  coda_gradcheck_report r;
  coda_gradcheck_options o = coda_gradcheck_default_options();
  CHECK_EQ_INT(o.struct_size, sizeof o);
  CHECK_STATUS(ctx, coda_program_gradcheck(ctx, f, b, l, 2, &o, &r), CODA_OK);
  CHECK(r.pass);
  /* the first layout (before `points`) is still taken */
  o.struct_size = offsetof(coda_gradcheck_options, points);
  CHECK_STATUS(ctx, coda_program_gradcheck(ctx, f, b, l, 2, &o, &r), CODA_OK);
  o.struct_size = 0;
  CHECK_SIZE_REFUSED(ctx, coda_program_gradcheck(ctx, f, b, l, 2, &o, &r),
                     "coda_gradcheck_options", (size_t)0, sizeof o);
  o.struct_size = sizeof o + 8;
  CHECK_SIZE_REFUSED(ctx, coda_program_gradcheck(ctx, f, b, l, 2, &o, &r),
                     "coda_gradcheck_options", sizeof o + 8, sizeof o);
  coda_program_destroy(f);
  coda_program_destroy(b);
  coda_context_destroy(ctx);
}

int main(void) {
  test_context();
  coda_context ctx = NULL;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  if (ctx) {
    test_others(ctx);
    test_decoder_layout1(ctx);
    test_decoder_layout2(ctx);
    coda_context_destroy(ctx);
  }
  test_gradcheck();
  return CHECK_DONE();
}
