/* The unfused-program pass over the IR (ir_unfuse, src/lang/pass_unfuse.c)
 * gives the same program as the text rewrite plans used before it:
 * declare `input gemm_acc : tile DTYPE` after the optional `mode` and `math` lines of
 * the canonical text, rename every `acc` token to gemm_acc, parse. That
 * rewrite is kept here, as the reference. Compared (canonical text, and
 * the IR structurally with register names):
 *   - every built-in program (programs/NAME.coda), verbatim and retyped to
 *     f64 (exact mode), with the bf16 and f64 accumulator input; where the
 *     rewrite does not parse, the pass must fail too;
 *   - the example programs (programs/examples);
 *   - every GEMM step's program of the Llama-3 block and head plans (all
 *     flag combinations) and GPT-2 block plans (all flags), bf16 and
 *     exact mode, through plan_unfused_program (the plans' own path);
 *   - a pass failure for a name already taken and a reserved name. */
#include "coda.h"
#include "base/internal.h"
#include "lang/ir.h"
#include "nn/plan.h"
#include "test_util.h"
#include "check.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int ident_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The former text rewrite (plan_unfused_program before the IR pass), verbatim
 * but for the error wrapping. */
static coda_status old_rewrite(coda_context ctx, coda_program prog, coda_dtype dtype,
                               coda_program *out) {
  const char *src = coda_program_text(prog);
  const size_t n = strlen(src);
  size_t cap = 2 * n + 128, k = 0;
  char *t = malloc(cap);
  if (!t) return CODA_ERR_OUT_OF_MEMORY;
  size_t i = 0;
  /* the header lines (`mode`, then `math`) stay first */
  for (int h = 0; h < 2; h++)
    if (!strncmp(src + i, h ? "math " : "mode ", 5)) {
      while (i < n && src[i] != '\n') t[k++] = src[i++];
      if (i < n) t[k++] = src[i++];
    }
  k += (size_t)snprintf(t + k, cap - k, "input %s : tile %s\n", PLAN_ACC_INPUT,
                        coda_dtype_name(dtype));
  while (i < n) {
    if (k + 2 * (sizeof PLAN_ACC_INPUT) + 2 >= cap) {
      char *q = realloc(t, cap *= 2);
      if (!q) {
        free(t);
        return CODA_ERR_OUT_OF_MEMORY;
      }
      t = q;
    }
    const char c = src[i];
    if (ident_char(c)) { /* a whole identifier or number */
      size_t j = i;
      while (j < n && (ident_char(src[j]) || (c >= '0' && c <= '9' && src[j] == '.'))) j++;
      if (j - i == 3 && !strncmp(src + i, "acc", 3)) {
        memcpy(t + k, PLAN_ACC_INPUT, sizeof PLAN_ACC_INPUT - 1);
        k += sizeof PLAN_ACC_INPUT - 1;
        i = j;
        continue;
      }
      while (i < j) {
        if (k + 2 >= cap) {
          char *q = realloc(t, cap *= 2);
          if (!q) {
            free(t);
            return CODA_ERR_OUT_OF_MEMORY;
          }
          t = q;
        }
        t[k++] = src[i++];
      }
      continue;
    }
    t[k++] = src[i++];
  }
  t[k] = '\0';
  coda_status st = coda_program_parse(ctx, t, out);
  free(t);
  return st;
}

static int n_same, n_both_fail;

/* Old rewrite vs the pass on one program; `got` (optional) is the pass's
 * result as a caller obtained it, else the pass runs here. */
static void compare(coda_context ctx, const char *what, coda_program prog, coda_dtype dtype,
                    coda_program got) {
  coda_program old = NULL, neu = got;
  const coda_status so = old_rewrite(ctx, prog, dtype, &old);
  char old_err[CODA_ERRMSG_LEN];
  snprintf(old_err, sizeof old_err, "%s", so == CODA_OK ? "" : coda_last_error(ctx));
  coda_status sn = CODA_OK;
  if (!got) sn = ir_unfuse(ctx, prog, PLAN_ACC_INPUT, dtype, &neu);
  if (so != CODA_OK) {
    CHECK_MSG(sn != CODA_OK, "%s (%s): the text rewrite fails (%s) but the pass does not", what,
              coda_dtype_name(dtype), old_err);
    if (sn != CODA_OK) n_both_fail++;
    if (!got) coda_program_destroy(neu);
    return;
  }
  CHECK_MSG(sn == CODA_OK, "%s (%s): the pass fails: %s", what, coda_dtype_name(dtype),
            coda_last_error(ctx));
  if (sn == CODA_OK) {
    const int same_text = !strcmp(coda_program_text(old), coda_program_text(neu));
    CHECK_MSG(same_text, "%s (%s): canonical texts differ:\n--- rewrite\n%s--- pass\n%s", what,
              coda_dtype_name(dtype), coda_program_text(old), coda_program_text(neu));
    char why[256] = "";
    const int same_ir = ir_equal(old, neu, 1, why, sizeof why);
    CHECK_MSG(same_ir, "%s (%s): IR differs: %s", what, coda_dtype_name(dtype), why);
    /* the pass's result prints to text that parses back to itself */
    coda_program re = NULL;
    CHECK(coda_program_parse(ctx, coda_program_text(neu), &re) == CODA_OK);
    if (re) CHECK(!strcmp(coda_program_text(re), coda_program_text(neu)));
    coda_program_destroy(re);
    n_same += same_text && same_ir;
  }
  coda_program_destroy(old);
  if (!got) coda_program_destroy(neu);
}

static void builtins(coda_context ctx) {
  for (int i = 0; coda_builtin_program_name(i); i++) {
    const char *name = coda_builtin_program_name(i);
    coda_program prog = NULL;
    if (plan_builtin(ctx, name, &prog) != CODA_OK) continue; /* x2 programs have no f64 form */
    compare(ctx, name, prog, CODA_BF16, NULL);
    compare(ctx, name, prog, CODA_F64, NULL);
    coda_program_destroy(prog);
  }
}

static void examples(coda_context ctx) {
  DIR *d = opendir(CODA_PROGRAMS_DIR "/examples");
  CHECK(d != NULL);
  if (!d) return;
  struct dirent *e;
  int n = 0;
  while ((e = readdir(d))) {
    const size_t len = strlen(e->d_name);
    if (len < 6 || strcmp(e->d_name + len - 5, ".coda")) continue;
    char path[1024];
    snprintf(path, sizeof path, "%s/examples/%s", CODA_PROGRAMS_DIR, e->d_name);
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL);
    if (!f) continue;
    char *text = calloc(1, 1 << 20);
    const size_t got = text ? fread(text, 1, (1 << 20) - 1, f) : 0;
    fclose(f);
    coda_program prog = NULL;
    CHECK_MSG(got > 0 && coda_program_parse(ctx, text, &prog) == CODA_OK, "%s: %s", path,
              coda_last_error(ctx));
    free(text);
    if (!prog) continue;
    compare(ctx, e->d_name, prog, CODA_BF16, NULL);
    coda_program_destroy(prog);
    n++;
  }
  closedir(d);
  CHECK(n > 0);
}

/* Every GEMM step of plan p: the plan's unfused program against the
 * rewrite of the program the plan loaded. */
static void plan_steps(coda_context ctx, coda_plan p, int *nsteps) {
  const coda_dtype dt =
      coda_context_precision(ctx) == CODA_PRECISION_F64 ? CODA_F64 : CODA_BF16;
  for (int k = 0; k < p->nstep; k++) {
    const plan_step *s = &p->steps[k];
    if (s->kind != PLAN_GEMM) continue;
    coda_program up = NULL;
    CHECK_MSG(plan_unfused_program(p, s->prog, &up) == CODA_OK, "plan %s step %s: %s", p->name,
              s->label, coda_last_error(ctx));
    if (!up) continue;
    char what[256];
    snprintf(what, sizeof what, "plan %s step %d (%s, %s)", p->name, k, s->label,
             p->progs[s->prog].name);
    compare(ctx, what, p->progs[s->prog].prog, dt, up);
    (*nsteps)++;
  }
}

static void plans(coda_context ctx) {
  const coda_dtype dt =
      coda_context_precision(ctx) == CODA_PRECISION_F64 ? CODA_F64 : CODA_BF16;
  int nplans = 0, nsteps = 0;
  for (unsigned flags = 0; flags < 64; flags++)
    for (int head = 0; head < 2; head++) {
      coda_llama_config c = coda_llama_default_config();
      c.dtype = dt;
      c.flags = flags;
      coda_plan p = NULL;
      const coda_status s = head ? coda_llama_head_plan(ctx, &c, &p) : coda_llama_block_plan(ctx, &c, &p);
      if (s == CODA_OK) {
        plan_steps(ctx, p, &nsteps);
        nplans++;
      }
      coda_plan_destroy(p);
    }
  for (unsigned flags = 0; flags < 4; flags++) {
    coda_gpt2_config c = coda_gpt2_default_config();
    c.dtype = dt;
    c.flags = flags;
    coda_plan p = NULL;
    CHECK_MSG(coda_gpt2_block_plan(ctx, &c, &p) == CODA_OK, "gpt2 flags %u: %s", flags,
              coda_last_error(ctx));
    if (p) {
      plan_steps(ctx, p, &nsteps);
      nplans++;
    }
    coda_plan_destroy(p);
  }
  printf("  %s: %d plans, %d gemm steps compared\n", coda_dtype_name(dt), nplans, nsteps);
  CHECK(nplans >= 4 && nsteps > 0);
}

/* The pass refuses what the parser of the rewritten text refused. */
static void failures(coda_context ctx) {
  coda_program prog = NULL, out = NULL;
  CHECK_MSG(coda_program_parse(ctx,
                               "input gemm_acc : row f32\noutput y : bf16\nstore y = acc * gemm_acc\n",
                               &prog) == CODA_OK, "%s", coda_last_error(ctx));
  if (!prog) return;
  CHECK(ir_unfuse(ctx, prog, PLAN_ACC_INPUT, CODA_BF16, &out) == CODA_ERR_TYPE && !out);
  compare(ctx, "input named gemm_acc", prog, CODA_BF16, NULL);
  CHECK(ir_unfuse(ctx, prog, "acc", CODA_BF16, &out) == CODA_ERR_TYPE && !out);
  coda_program_destroy(prog);
  prog = NULL;
  CHECK_MSG(coda_program_parse(ctx, "output y : bf16\ngemm_acc = acc * 2\nstore y = gemm_acc\n",
                               &prog) == CODA_OK, "%s", coda_last_error(ctx));
  if (!prog) return;
  CHECK(ir_unfuse(ctx, prog, PLAN_ACC_INPUT, CODA_BF16, &out) == CODA_ERR_TYPE && !out);
  compare(ctx, "value named gemm_acc", prog, CODA_BF16, NULL);
  coda_program_destroy(prog);
}

int main(void) {
  coda_context ctx = test_context(CODA_PRECISION_F32, 1), c64 = test_context(CODA_PRECISION_F64, 1);
  CHECK(ctx != NULL);
  CHECK(c64 != NULL);

  builtins(ctx);
  builtins(c64);
  examples(ctx);
  plans(ctx);
  plans(c64);
  failures(ctx);
  printf("  %d programs the same as the text rewrite, %d refused by both\n", n_same, n_both_fail);
  CHECK(n_same > 0);

  coda_context_destroy(ctx);
  coda_context_destroy(c64);
  return CHECK_DONE();
}
