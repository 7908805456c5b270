/* coda gradcheck FORWARD BACKWARD: checks a backward program against
 * central finite differences of its forward in fp64
 * (coda_program_gradcheck), with the correspondence given on the command
 * line. */
#include "coda.h"
#include "tool_util.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The numeric options (tool_util.h): ranges and meanings in one table. */
static const coda_tool_num gc_nums[] = {
    {"--m", 1, 1, 4096, 0, 0, "rows of the forward's domain"},
    {"--n", 1, 1, 4096, 0, 0, "columns of the forward's domain"},
    {"--seed", 1, 1, 4096, 0, 0, "random seed"},
    {"--tol", 0, 0, INFINITY, 1, 1, "max |bwd - fd| / max |fd| allowed"},
    {"--step", 0, 0, INFINITY, 1, 1, "relative finite-difference step"},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static void usage(FILE *f) {
  fprintf(f,
          "usage: coda gradcheck [OPTIONS] FORWARD BACKWARD\n"
          "Checks that program BACKWARD computes the gradient of program FORWARD, against\n"
          "central finite differences of FORWARD in fp64 on random inputs. FORWARD and\n"
          "BACKWARD are files, or builtin:NAME for a built-in program. With X the\n"
          "forward's inputs and dY random gradients of the forward outputs named by\n"
          "--grad, L = sum(dY * Y(X)); every --wrt gradient must match dL/dX.\n"
          "Links (FWD names the forward, BWD the backward; lists are comma separated):\n"
          "  --wrt FWD=BWD,...   backward output/finisher BWD is dL/dFWD (FWD an input or\n"
          "                      acc, the forward's accumulator); for a scalar, row or\n"
          "                      column input BWD may be wider (a tile, a row of partials):\n"
          "                      it is summed over what FWD broadcasts to\n"
          "  --grad FWD=BWD,...  backward input BWD (or acc) receives dL/dFWD, random\n"
          "  --save FWD=BWD,...  backward input BWD receives the forward tensor FWD (an\n"
          "                      input or output); implied for equal names\n"
          "  --dot FWD=BWD,...   backward row/rowsum input BWD[m] = sum_n FWD dFWD\n"
          "  --value NAME=V,...  input NAME of either program = V (a number, N or 1/N\n"
          "                      with N the forward's N) instead of random\n"
          "  --range NAME=LO:HI  forward input NAME (or acc) uniform in [LO, HI] (default:\n"
          "                      +-[0.1, 1), positive for scalars and rowsum partials; acc\n"
          "                      +-[0.1, 4)); values within 1e3 steps of a threshold of the\n"
          "                      forward (a constant it compares with) are drawn again\n"
          "  --param NAME=V,...  parameter NAME (`param NAME`) = V in whichever program\n"
          "                      declares it (a constant: no gradient is taken for it)\n"
          "  --points            half of the random values just beside the forward's\n"
          "                      thresholds (the constants of its min, max, comparisons),\n"
          "                      on both sides, within each range given\n"
          "Options:\n"
          "  --m M --n N         forward domain (default 3 x 8)\n"
          "  --seed S            random seed (default 1)\n"
          "  --tol T             max |bwd - fd| / max |fd| allowed (default 1e-6)\n"
          "  --step H            relative finite-difference step (default 1e-6)\n"
          "Exit status: 0 all gradients match, 1 a mismatch or error, 2 usage.\n");
  coda_tool_num_help(f, gc_nums);
}

#define MAX_LINKS 64

typedef struct {
  coda_grad_link l[MAX_LINKS];
  int n;
  char *buf[MAX_LINKS]; /* owned copies of the option values */
  int nbuf;
} links_t;

static int parse_double(const char *s, double *out) {
  char *end;
  if (!s || !*s) return -1;
  double v = strtod(s, &end);
  if (*end || !isfinite(v)) return -1;
  *out = v;
  return 0;
}

static int add_links(links_t *L, coda_grad_role role, const char *flag, const char *v,
                     int64_t N) {
  if (!v) { fprintf(stderr, "coda gradcheck: %s needs a value\n", flag); return -1; }
  if (L->nbuf >= MAX_LINKS) { fprintf(stderr, "coda gradcheck: too many options\n"); return -1; }
  char *copy = malloc(strlen(v) + 1);
  if (!copy) return -1;
  strcpy(copy, v);
  L->buf[L->nbuf++] = copy;
  for (char *item = strtok(copy, ","); item; item = strtok(NULL, ",")) {
    char *eq = strchr(item, '=');
    if (!eq || eq == item || !eq[1]) {
      fprintf(stderr, "coda gradcheck: %s needs NAME=VALUE items, got '%s'\n", flag, item);
      return -1;
    }
    *eq = '\0';
    if (L->n >= MAX_LINKS) { fprintf(stderr, "coda gradcheck: too many links\n"); return -1; }
    coda_grad_link *l = &L->l[L->n++];
    memset(l, 0, sizeof *l);
    l->role = role;
    const char *rhs = eq + 1;
    if (role == CODA_GRAD_VALUE) {
      l->fwd = item; /* the library is told per program below */
      if (!strcmp(rhs, "N")) l->lo = (double)N;
      else if (!strcmp(rhs, "1/N")) l->lo = 1.0 / (double)N;
      else if (parse_double(rhs, &l->lo)) {
        fprintf(stderr, "coda gradcheck: %s %s: '%s' is not a number, N or 1/N\n", flag, item, rhs);
        return -1;
      }
    } else if (role == CODA_GRAD_RANGE) {
      l->fwd = item;
      char *colon = strchr(rhs, ':');
      if (!colon) {
        fprintf(stderr, "coda gradcheck: %s %s: expected LO:HI, got '%s'\n", flag, item, rhs);
        return -1;
      }
      *colon = '\0';
      if (parse_double(rhs, &l->lo) || parse_double(colon + 1, &l->hi) || !(l->lo <= l->hi)) {
        fprintf(stderr, "coda gradcheck: %s %s=%s:%s: expected numbers LO <= HI\n", flag, item, rhs,
                colon + 1);
        return -1;
      }
    } else {
      l->fwd = item;
      l->bwd = rhs;
    }
  }
  return 0;
}

static coda_status load(coda_context ctx, const char *spec, coda_program *out) {
  if (!strncmp(spec, "builtin:", 8)) return coda_program_builtin(ctx, spec + 8, out);
  const char *why = NULL;
  char *text = coda_tool_read_text(spec, &why);
  if (!text) {
    fprintf(stderr, "coda gradcheck: %s: %s\n", spec, why ? why : "cannot read");
    return CODA_ERR_IO;
  }
  coda_status s = coda_program_parse(ctx, text, out);
  free(text);
  return s;
}

static int has_input(coda_program p, const char *name) {
  coda_arg_info a;
  for (int i = 0; i < coda_program_num_args(p); i++)
    if (coda_program_arg(p, i, &a) == CODA_OK && !strcmp(a.name, name) && a.kind != CODA_ARG_OUTPUT &&
        a.kind != CODA_ARG_PARTIAL)
      return 1;
  return !strcmp(name, "acc");
}

int coda_cmd_gradcheck(int argc, char **argv) {
  coda_gradcheck_options o = coda_gradcheck_default_options();
  const char *pos[2] = {NULL, NULL};
  int npos = 0, rc = 2;
  links_t *L = calloc(1, sizeof *L);
  coda_tool_params params = {0};
  if (!L) return 1;
  /* --value 1/N needs N: read --n first */
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "--n")) o.N = strtoll(argv[i + 1], NULL, 10);
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int bad = 0;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); rc = 0; goto out; }
    else if (!strcmp(a, "--wrt")) { bad = add_links(L, CODA_GRAD_WRT, a, v, o.N); i++; }
    else if (!strcmp(a, "--grad")) { bad = add_links(L, CODA_GRAD_SEED, a, v, o.N); i++; }
    else if (!strcmp(a, "--save")) { bad = add_links(L, CODA_GRAD_SAVE, a, v, o.N); i++; }
    else if (!strcmp(a, "--dot")) { bad = add_links(L, CODA_GRAD_DOT, a, v, o.N); i++; }
    else if (!strcmp(a, "--value")) { bad = add_links(L, CODA_GRAD_VALUE, a, v, o.N); i++; }
    else if (!strcmp(a, "--range")) { bad = add_links(L, CODA_GRAD_RANGE, a, v, o.N); i++; }
    else if (!strcmp(a, "--param")) { bad = coda_tool_params_parse("gradcheck", v, &params); i++; }
    else if (!strcmp(a, "--points")) o.points = 1;
    else if (coda_tool_num_find(gc_nums, a)) {
      double x;
      if (coda_tool_num_parse("gradcheck", coda_tool_num_find(gc_nums, a), v, &x)) bad = 1;
      else if (!strcmp(a, "--m")) o.M = (int64_t)x;
      else if (!strcmp(a, "--n")) o.N = (int64_t)x;
      else if (!strcmp(a, "--seed")) o.seed = (uint64_t)x; /* at most 4096: exact */
      else if (!strcmp(a, "--tol")) o.tol = x;
      else o.step = x;
      i++;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "coda gradcheck: unknown option '%s'\n", a);
      usage(stderr);
      bad = 1;
    } else if (npos < 2) pos[npos++] = a;
    else { fprintf(stderr, "coda gradcheck: more than two programs given\n"); bad = 1; }
    if (bad) goto out;
  }
  if (npos != 2) { usage(stderr); goto out; }
  rc = 1;
  coda_context ctx = NULL;
  coda_program fwd = NULL, bwd = NULL;
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CPU;
  co.precision = CODA_PRECISION_F64;
  if (coda_tool_context(&co, &ctx, "gradcheck", "CPU") != CODA_OK) goto out;
  if (load(ctx, pos[0], &fwd) != CODA_OK || load(ctx, pos[1], &bwd) != CODA_OK) {
    if (*coda_last_error(ctx)) fprintf(stderr, "coda gradcheck: %s\n", coda_last_error(ctx));
    goto out_ctx;
  }
  /* a parameter value goes to the programs that declare it */
  for (int i = 0; i < params.n; i++)
    if (!coda_tool_program_has_param(fwd, params.name[i]) && !coda_tool_program_has_param(bwd, params.name[i])) {
      fprintf(stderr, "coda gradcheck: --param %s=%.17g: neither program declares a parameter of that name\n",
              params.name[i], params.value[i]);
      goto out_ctx;
    }
  if (coda_tool_params_bind(ctx, &fwd, &params, 1) != CODA_OK ||
      coda_tool_params_bind(ctx, &bwd, &params, 1) != CODA_OK) {
    fprintf(stderr, "coda gradcheck: %s\n", coda_last_error(ctx));
    goto out_ctx;
  }
  /* a value link names an input of either program or both */
  for (int i = 0; i < L->n; i++) {
    coda_grad_link *l = &L->l[i];
    if (l->role != CODA_GRAD_VALUE) continue;
    const char *name = l->fwd;
    int inf = has_input(fwd, name), inb = has_input(bwd, name);
    if (!inf && !inb) {
      fprintf(stderr, "coda gradcheck: --value %s=%.17g: neither program has an input of that name\n", name,
              l->lo);
      goto out_ctx;
    }
    l->fwd = inf ? name : NULL;
    l->bwd = inb ? name : NULL;
  }
  coda_gradcheck_report r;
  if (coda_program_gradcheck(ctx, fwd, bwd, L->l, L->n, &o, &r) != CODA_OK) {
    fprintf(stderr, "coda gradcheck: %s\n", coda_last_error(ctx));
    goto out_ctx;
  }
  printf("gradcheck %s -> %s: forward %lld x %lld, backward %lld x %lld, %d forward runs, "
         "tol %.3g\n", pos[0], pos[1], (long long)o.M, (long long)o.N, (long long)o.M,
         (long long)r.bwd_N, r.evaluations, o.tol);
  for (int i = 0; i < r.nentries; i++) {
    const coda_gradcheck_entry *e = &r.entry[i];
    printf("  d%-8s = %-8s max|fd| %.4g  max|bwd-fd| %.3g  rel %.3g at (%lld, %lld)  %s\n", e->fwd,
           e->bwd, e->max_abs_fd, e->max_abs_err, e->rel_err, (long long)e->worst_row,
           (long long)e->worst_col, e->pass ? "ok" : "MISMATCH");
  }
  printf("%s\n", r.pass ? "PASS" : "FAIL");
  rc = r.pass ? 0 : 1;
out_ctx:
  coda_program_destroy(fwd);
  coda_program_destroy(bwd);
  coda_context_destroy(ctx);
out:
  for (int i = 0; i < L->nbuf; i++) free(L->buf[i]);
  free(L);
  return rc;
}
