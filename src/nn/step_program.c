/* The steps that run a built-in program (PLAN_GEMM, PLAN_MAP,
 * PLAN_FINISH): built with their bindings resolved to the program's
 * argument indices, so that a run binds in one call (coda_run_program),
 * with fusion off a GEMM step as a plain GEMM then its program as a map
 * pass; their buffer references, printing and kernel precompilation. */
#include "nn/plan_internal.h"

#include "base/internal.h"
#include "api/api.h" /* coda_run_program, kernel precompilation */

#include <stdio.h>
#include <string.h>

#define STEP_MAX_ARGS 96 /* a program's arguments, and the unfused form's acc */

static coda_dtype partial_dtype(coda_plan p) {
  return coda_context_precision(p->ctx) == CODA_PRECISION_F64 ? CODA_F64 : CODA_F32;
}

/* ------------------------------------------------------------ building */

/* The index of argument `arg` in prog's signature and its info, or -1. */
static int find_arg(coda_program prog, const char *arg, coda_arg_info *info) {
  for (int i = 0; i < coda_program_num_args(prog); i++)
    if (coda_program_arg(prog, i, info) == CODA_OK && !strcmp(info->name, arg)) return i;
  return -1;
}

/* A binding to a buffer that does not exist yet: a reduction partial,
 * with the shape the program gives it for this step; -1 otherwise. */
static int partial_buffer(coda_plan p, const plan_step *s, coda_program prog, const char *arg,
                          const char *buf) {
  coda_arg_info info;
  if (find_arg(prog, arg, &info) < 0 || info.kind != CODA_ARG_PARTIAL) return -1;
  int64_t r = 0, cc = 0;
  coda_status st = coda_program_arg_shape(prog, arg, s->M, s->N, s->tiling.tile_m,
                                          s->tiling.tile_n, &r, &cc);
  if (st != CODA_OK) {
    char inner[CODA_ERRMSG_LEN];
    snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
    plan_fail(p, st, "step '%s': shape of partial '%s': %s", s->label, arg, inner);
    return -1;
  }
  return plan_buffer(p, buf, partial_dtype(p), r, cc, PLAN_ROLE_TEMP);
}

/* Parses "arg=buf arg=buf ..." into the step's bindings, each with its
 * argument's index (-1 for a name the program lacks: the run says so),
 * creating the partial buffers the program asks for. */
static void parse_binds(coda_plan p, plan_step *s, const char *binds) {
  if (!binds) return;
  coda_program prog = s->prog >= 0 ? p->progs[s->prog].prog : NULL;
  const char *c = binds;
  while (p->status == CODA_OK) {
    while (*c == ' ' || *c == '\t' || *c == '\n') c++;
    if (!*c) break;
    const char *eq = strchr(c, '=');
    const char *end = c;
    while (*end && *end != ' ' && *end != '\t' && *end != '\n') end++;
    if (!eq || eq > end || eq == c || eq + 1 == end || eq - c >= PLAN_NAME_MAX ||
        end - eq - 1 >= PLAN_NAME_MAX) {
      plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': bad binding near '%.20s'",
                s->label, c);
      return;
    }
    if (s->nbind >= PLAN_MAX_BINDS) {
      plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': too many bindings", s->label);
      return;
    }
    char arg[PLAN_NAME_MAX], buf[PLAN_NAME_MAX];
    snprintf(arg, sizeof arg, "%.*s", (int)(eq - c), c);
    snprintf(buf, sizeof buf, "%.*s", (int)(end - eq - 1), eq + 1);
    int bi = plan_find(p, buf);
    if (bi < 0 && prog) bi = partial_buffer(p, s, prog, arg, buf);
    if (p->status != CODA_OK) return;
    if (bi < 0) {
      plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': argument '%s' bound to unknown buffer '%s'",
                s->label, arg, buf);
      return;
    }
    coda_arg_info info;
    plan_bind *b = &s->bind[s->nbind++];
    snprintf(b->arg, PLAN_NAME_MAX, "%s", arg);
    b->index = prog ? find_arg(prog, arg, &info) : -1;
    b->buf = bi;
    c = end;
  }
}

/* Loads the program and checks its size; 0 after a failure. */
static int load(coda_plan p, plan_step *s, const char *program) {
  s->prog = plan_program_load(p, program);
  if (p->status != CODA_OK) return 0;
  if (coda_program_num_args(p->progs[s->prog].prog) >= STEP_MAX_ARGS) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': program %s has too many arguments",
              s->label, program);
    return 0;
  }
  return 1;
}

void plan_gemm(coda_plan p, coda_phase phase, const char *label, const char *program,
               coda_transpose ta, const char *A, coda_transpose tb, const char *B,
               coda_tiling tiling, const char *binds) {
  plan_step *s = plan_new_step(p, PLAN_GEMM, phase, label);
  if (!s) return;
  load(p, s, program);
  s->ta = ta;
  s->tb = tb;
  s->a = plan_need_buf(p, label, A);
  s->b = plan_need_buf(p, label, B);
  s->tiling = tiling;
  if (p->status != CODA_OK) return;
  const plan_buf *a = &p->bufs[s->a], *b = &p->bufs[s->b];
  if (op_cols(a, ta) != op_rows(b, tb)) {
    plan_fail(p, CODA_ERR_SHAPE, "step '%s': op(%s) is %lld x %lld but op(%s) is %lld x %lld",
              label, A, (long long)op_rows(a, ta), (long long)op_cols(a, ta), B,
              (long long)op_rows(b, tb), (long long)op_cols(b, tb));
    return;
  }
  s->M = op_rows(a, ta);
  s->N = op_cols(b, tb);
  parse_binds(p, s, binds);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_map(coda_plan p, coda_phase phase, const char *label, const char *program,
              int64_t M, int64_t N, coda_tiling tiling, const char *binds) {
  plan_step *s = plan_new_step(p, PLAN_MAP, phase, label);
  if (!s || !load(p, s, program)) return;
  s->M = M;
  s->N = N;
  s->tiling = tiling;
  parse_binds(p, s, binds);
  if (p->status == CODA_OK) p->nstep++;
}

void plan_finish(coda_plan p, coda_phase phase, const char *label, const char *program,
                 const char *finish, int64_t M, int64_t N, coda_tiling tiling,
                 const char *binds) {
  plan_step *s = plan_new_step(p, PLAN_FINISH, phase, label);
  if (!s || !load(p, s, program)) return;
  if (!plan_name_ok(finish)) {
    plan_fail(p, CODA_ERR_INVALID_ARGUMENT, "step '%s': bad finish name", label);
    return;
  }
  snprintf(s->finish, sizeof s->finish, "%s", finish);
  coda_arg_info info;
  s->finish_index = find_arg(p->progs[s->prog].prog, finish, &info);
  s->M = M;
  s->N = N;
  s->tiling = tiling;
  parse_binds(p, s, binds);
  if (p->status == CODA_OK) p->nstep++;
}

/* ------------------------------------------------------ fusion turned off */

coda_status plan_unfused_program(coda_plan p, int prog, coda_program *out) {
  if (!p || !out || prog < 0 || prog >= p->nprog) return CODA_ERR_INVALID_ARGUMENT;
  plan_program *pp = &p->progs[prog];
  if (pp->unfused) {
    *out = pp->unfused;
    return CODA_OK;
  }
  /* the IR pass: acc read from the tile input PLAN_ACC_INPUT, declared
   * first, so every other argument's index is one more than in prog */
  coda_status st = coda_program_unfused(p->ctx, pp->prog, PLAN_ACC_INPUT, acc_dtype(p), &pp->unfused);
  if (st != CODA_OK) {
    char inner[CODA_ERRMSG_LEN];
    snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
    return coda_fail(p->ctx, st, "plan '%s': program %s without fusion: %s", p->name, pp->name,
                     inner);
  }
  coda_arg_info a0;
  if (coda_program_num_args(pp->unfused) != coda_program_num_args(pp->prog) + 1 ||
      coda_program_arg(pp->unfused, 0, &a0) != CODA_OK || strcmp(a0.name, PLAN_ACC_INPUT)) {
    coda_program_destroy(pp->unfused);
    pp->unfused = NULL;
    return coda_fail(p->ctx, CODA_ERR_INTERNAL, "plan '%s': program %s without fusion does not "
                     "read " PLAN_ACC_INPUT " first", p->name, pp->name);
  }
  *out = pp->unfused;
  return CODA_OK;
}

/* With fusion off: the unfused program and the accumulator it reads
 * (argument 0), acc_tmp = op(A)·op(B) (a plain GEMM), laid out with the
 * temporaries or the plan's own; the run does the GEMM, then the map. */
static coda_status unfused_setup(coda_context ctx, coda_plan p, const plan_step *s, coda_run *r,
                                 coda_tensor *acc_view) {
  coda_status st = plan_unfused_program(p, s->prog, &r->prog);
  const coda_dtype dt = acc_dtype(p);
  const size_t bytes = (size_t)s->M * (size_t)s->N * coda_dtype_size(dt);
  void *acc = p->acc_tmp;
  if (st == CODA_OK && s->acc_off >= 0 && p->arena) {
    acc = (char *)p->arena + s->acc_off;
  } else if (st == CODA_OK && bytes > p->acc_tmp_bytes) {
    if (p->acc_tmp) coda_free(p->ctx, p->acc_tmp);
    p->acc_tmp = NULL;
    p->acc_tmp_bytes = 0;
    st = coda_malloc(p->ctx, bytes, &p->acc_tmp);
    if (st == CODA_OK) p->acc_tmp_bytes = bytes;
    acc = p->acc_tmp;
  }
  if (st != CODA_OK) {
    if (ctx != p->ctx) coda_fail(ctx, st, "%s", coda_last_error(p->ctx));
    return st;
  }
  *acc_view = (coda_tensor){acc, dt, s->M, s->N, s->N};
  r->kind = CODA_RUN_GEMM_UNFUSED;
  return CODA_OK;
}

/* ---------------------------------------------------------------- entry */

/* The step's tensors by argument index (after the accumulator, with
 * fusion off), then one run. */
static coda_status run(coda_context ctx, coda_plan p, const plan_step *s) {
  coda_tensor view[PLAN_MAX_BINDS];
  const coda_tensor A = s->a >= 0 ? view_of(&p->bufs[s->a]) : (coda_tensor){0};
  const coda_tensor B = s->b >= 0 ? view_of(&p->bufs[s->b]) : (coda_tensor){0};
  const coda_tensor *args[STEP_MAX_ARGS] = {0};
  const int shift = s->kind == PLAN_GEMM && s->unfused; /* acc comes first there */
  for (int i = 0; i < s->nbind; i++) {
    view[i] = view_of(&p->bufs[s->bind[i].buf]);
    if (s->bind[i].index >= 0) args[s->bind[i].index + shift] = &view[i];
  }
  coda_run r = {s->kind == PLAN_GEMM     ? CODA_RUN_GEMM_EPILOGUE
                : s->kind == PLAN_FINISH ? CODA_RUN_FINISH
                                         : CODA_RUN_MAP,
                p->progs[s->prog].prog, s->ta, s->tb, &A, &B, s->sched, s->M, s->N, s->tiling,
                s->finish_index, args};
  for (int i = 0; i < s->nbind; i++)
    if (s->bind[i].index < 0)
      return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT,
                       "binding '%s' is not an argument of the program", s->bind[i].arg);
  if (s->kind == PLAN_FINISH && s->finish_index < 0)
    return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "the program has no finish statement '%s'",
                     s->finish);
  coda_tensor acc;
  coda_status st = shift ? unfused_setup(ctx, p, s, &r, &acc) : CODA_OK;
  if (shift) args[0] = &acc;
  return st != CODA_OK ? st : coda_run_program(ctx, &r);
}

/* 1 if argument i of prog is a finisher's result: one after a partial
 * that is no partial (arguments come as inputs, outputs, partials, then
 * finisher results). */
static int is_result(coda_program prog, int i, const coda_arg_info *ai) {
  if (ai->kind == CODA_ARG_PARTIAL) return 0;
  coda_arg_info aj;
  for (int j = 0; j < i; j++)
    if (coda_program_arg(prog, j, &aj) == CODA_OK && aj.kind == CODA_ARG_PARTIAL) return 1;
  return 0;
}

/* How the step uses each bound buffer, by its argument's entry: outputs
 * and partials are written whole ("every declared output is stored
 * exactly once"), an accumulating output is read too; a finish step
 * writes its finisher and reads the rest; a program of several passes
 * finishes, during its run, the results a later pass reads
 * (docs/language.md), so it reads and writes them. An argument the
 * program lacks counts as read and written (the run rejects it anyway). */
static void refs(coda_plan p, const plan_step *s, plan_refs *r) {
  if (s->kind == PLAN_GEMM) {
    plan_ref(r, s->a, REF_READ);
    plan_ref(r, s->b, REF_READ);
  }
  const coda_program prog = p->progs[s->prog].prog;
  const int passes = coda_program_num_passes(prog) > 1;
  for (int i = 0; i < s->nbind; i++) {
    coda_arg_info ai;
    const int k = s->bind[i].index;
    int use = REF_READ | REF_WRITE;
    if (k >= 0 && coda_program_arg(prog, k, &ai) == CODA_OK) {
      if (s->kind == PLAN_FINISH) use = k == s->finish_index ? REF_WRITE : REF_READ;
      else if (ai.kind == CODA_ARG_OUTPUT) use = ai.accumulate ? REF_READ | REF_WRITE : REF_WRITE;
      else if (ai.kind == CODA_ARG_PARTIAL) use = REF_WRITE;
      else if (passes && is_result(prog, k, &ai)) use = REF_READ | REF_WRITE;
      else use = REF_READ;
    }
    plan_ref(r, s->bind[i].buf, use);
  }
}

/* GEMM steps: the fusion choice, where the unfused accumulator lies, the
 * times coda_plan_tune_fusion measured. */
static void print_gemm_tail(coda_strbuf *b, const plan_step *s) {
  if (s->unfused) coda_sb_printf(b, "  [unfused]");
  else if (s->sched != CODA_SCHED_AUTO)
    coda_sb_printf(b, "  [%s]", s->sched == CODA_SCHED_PINGPONG ? "pingpong" : "cooperative");
  if (s->unfused && s->acc_off >= 0) {
    char o[32];
    coda_sb_printf(b, " (" PLAN_ACC_INPUT " @ %s)", plan_fmt_bytes(o, (size_t)s->acc_off));
  }
  if (s->tuned_us[1] > 0)
    coda_sb_printf(b, "  (timed: fused pingpong %.1f us, fused cooperative %.1f us, unfused %.1f us%s)",
                   s->tuned_us[0], s->tuned_us[1], s->tuned_us[2],
                   s->tuned_cached ? "; from the tuning cache" : "");
  else if (s->tuned_us[0] > 0)
    coda_sb_printf(b, "  (timed: fused %.1f us, unfused %.1f us%s)", s->tuned_us[0], s->tuned_us[2],
                   s->tuned_cached ? "; from the tuning cache" : "");
}

static void print(coda_plan p, coda_strbuf *b, const plan_step *s) {
  const char *tn[2] = {"", "^T"};
  const char *prog = p->progs[s->prog].name;
  if (s->kind == PLAN_GEMM)
    coda_sb_printf(b, "gemm   %s%s . %s%s  [%lld x %lld, tile %dx%d]  %s: ", p->bufs[s->a].name,
                   tn[s->ta], p->bufs[s->b].name, tn[s->tb], (long long)s->M, (long long)s->N,
                   s->tiling.tile_m, s->tiling.tile_n, prog);
  else if (s->kind == PLAN_MAP)
    coda_sb_printf(b, "map    [%lld x %lld, tile %dx%d]  %s: ", (long long)s->M, (long long)s->N,
                   s->tiling.tile_m, s->tiling.tile_n, prog);
  else
    coda_sb_printf(b, "finish %s.%s: ", prog, s->finish);
  for (int i = 0; i < s->nbind; i++)
    coda_sb_printf(b, "%s%s=%s", i ? " " : "", s->bind[i].arg, p->bufs[s->bind[i].buf].name);
  if (s->kind == PLAN_GEMM) print_gemm_tail(b, s);
}

/* A GEMM step's fused kernel (both schedules, for coda_plan_tune_fusion)
 * or its program as a map kernel; a map step's kernel; none for finish. */
static coda_status precompile(coda_plan p, const plan_step *s, int unfused, int *cached,
                              int *skipped) {
  coda_program prog = p->progs[s->prog].prog;
  if (s->kind == PLAN_GEMM && !unfused)
    return coda_precompile_gemm_epilogue(p->ctx, prog, s->ta == CODA_T, s->tb == CODA_T,
                                         p->bufs[s->a].dtype == CODA_F16, cached);
  if (s->kind == PLAN_GEMM) {
    coda_program up;
    coda_status st = plan_unfused_program(p, s->prog, &up);
    return st == CODA_OK ? coda_precompile_map(p->ctx, up, cached) : st;
  }
  if (s->kind == PLAN_MAP && !unfused) return coda_precompile_map(p->ctx, prog, cached);
  *skipped = 1;
  return CODA_OK;
}

const plan_step_ops plan_program_steps = {run, refs, print, precompile};
