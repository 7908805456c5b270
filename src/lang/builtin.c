/* The built-in programs: the .coda files of programs/ (embedded at build
 * time) and their variants, each derived from its one source by the IR
 * passes (docs/language.md, "Variants as passes"):
 *
 *   _folded  ir_fold with the statistics rule of the norm the program
 *            follows (RMSNorm's r, LayerNorm's mu and rs) and, for a
 *            backward, the rule reading a row dot's partials as they are;
 *   _infer   ir_drop of the outputs only the backward reads;
 *   _keep    ir_keep of the logits as an output;
 *   and for a producer whose consumer reads its partials, ir_drop of the
 *   finisher nobody reads any more. */
#include "lang/ir.h"
#include "base/internal.h"

#include <stdio.h>
#include <string.h>

/* Generated from the .coda files of programs/ at build time (cmake/embed_programs.cmake). */
struct coda_builtin_program { const char *name; const char *text; };
extern const struct coda_builtin_program coda_builtin_programs[];
extern const int coda_builtin_program_count;

/* The fold rules. */
/* RMSNorm: r[m] = rsqrt(mean(x^2) + eps) from the rowsum(x^2) partials. */
static const char kRmsnormStats[] =
    "param eps = 1e-5\n"
    "input ss : rowsum f32\n"
    "input inv_n : scalar f32\n"
    "r = rsqrt(ss * inv_n + eps)\n";
/* LayerNorm: mu and rs = rsqrt(var + eps) from the rowsum partials of x and x^2. */
static const char kLayernormStats[] =
    "param eps = 1e-5\n"
    "input psum : rowsum f32\n"
    "input psq : rowsum f32\n"
    "input invd : scalar f32\n"
    "mu = psum * invd\n"
    "rs = rsqrt(psq * invd - mu * mu + eps)\n";
/* RMSNorm backward: zdz = sum_n z dz, read as the partials zp of its producer. */
static const char kRowDot[] = "input zp : rowsum f32\nzdz = zp\n";
/* LayerNorm backward: the two row dots s1, s2 as the partials p1, p2. */
static const char kRowDots[] = "input p1 : rowsum f32\ninput p2 : rowsum f32\ns1 = p1\ns2 = p2\n";

/* A variant: source, then its folds in order, then the drop, then the keep
 * (coda_program_variant). */
typedef struct variant {
  const char *name, *source;
  const char *fold[2];
  const char *drop;              /* output or finisher */
  const char *keep, *keep_as;    /* value kept as a bf16 output */
} variant;

static const variant kVariants[] = {
  {"gpt2_ln_bwd_folded", "gpt2_ln_bwd", {kLayernormStats, kRowDots}, NULL, NULL, NULL},
  {"gpt2_ln_linear_folded", "gpt2_ln_linear", {kLayernormStats, NULL}, NULL, NULL, NULL},
  {"gpt2_ln_linear_gelu_folded", "gpt2_ln_linear_gelu", {kLayernormStats, NULL}, NULL, NULL, NULL},
  {"llama_ce_bwd_folded", "llama_ce_bwd", {kRmsnormStats, NULL}, "zdz", NULL, NULL},
  {"llama_head_norm_bwd_folded", "llama_head_norm_bwd", {kRmsnormStats, kRowDot}, NULL, NULL, NULL},
  {"llama_lm_head_folded", "llama_lm_head", {kRmsnormStats, NULL}, NULL, NULL, NULL},
  {"llama_lm_head_folded_keep", "llama_lm_head", {kRmsnormStats, NULL}, NULL, "l", "z"},
  {"llama_lm_head_keep", "llama_lm_head", {NULL, NULL}, NULL, "l", "z"},
  {"llama_norm_bwd_folded", "llama_norm_bwd", {kRmsnormStats, kRowDot}, NULL, NULL, NULL},
  {"llama_qkv_rope_folded", "llama_qkv_rope", {kRmsnormStats, NULL}, NULL, NULL, NULL},
  {"llama_swiglu_folded", "llama_swiglu", {kRmsnormStats, NULL}, NULL, NULL, NULL},
  {"llama_swiglu_folded_infer", "llama_swiglu", {kRmsnormStats, NULL}, "z", NULL, NULL},
  {"llama_swiglu_infer", "llama_swiglu", {NULL, NULL}, "z", NULL, NULL},
};
enum { kNumVariants = (int)(sizeof kVariants / sizeof kVariants[0]) };

int ir_builtin_count(void) { return coda_builtin_program_count + kNumVariants; }

const char *coda_builtin_program_name(int i) {
  if (i < 0 || i >= ir_builtin_count()) return NULL;
  return i < coda_builtin_program_count ? coda_builtin_programs[i].name
                                        : kVariants[i - coda_builtin_program_count].name;
}

static coda_status parse_source(coda_context ctx, const char *name, coda_program *out) {
  for (int i = 0; i < coda_builtin_program_count; i++)
    if (!strcmp(coda_builtin_programs[i].name, name))
      return coda_program_parse(ctx, coda_builtin_programs[i].text, out);
  return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "no program file named '%s'", name);
}

static coda_status derive(coda_context ctx, const variant *v, coda_program *out) {
  coda_program src = NULL, rules[2] = {NULL, NULL};
  coda_status st = parse_source(ctx, v->source, &src);
  int nfold = 0;
  for (; nfold < 2 && st == CODA_OK && v->fold[nfold]; nfold++)
    st = coda_program_parse(ctx, v->fold[nfold], &rules[nfold]);
  if (st == CODA_OK) {
    coda_variant_options o = coda_variant_default_options();
    o.fold = rules;
    o.nfold = nfold;
    o.drop = v->drop ? &v->drop : NULL;
    o.ndrop = v->drop ? 1 : 0;
    o.keep = v->keep;
    o.keep_as = v->keep_as;
    st = coda_program_variant(ctx, src, &o, out);
  }
  coda_program_destroy(src);
  coda_program_destroy(rules[0]);
  coda_program_destroy(rules[1]);
  return st;
}

coda_status ir_builtin_variant(coda_context ctx, const char *name, coda_program *out) {
  *out = NULL;
  for (int i = 0; i < kNumVariants; i++)
    if (!strcmp(kVariants[i].name, name)) return derive(ctx, &kVariants[i], out);
  return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "'%.64s' is not a derived built-in program", name);
}

const char *ir_builtin_variant_source(const char *name) {
  for (int i = 0; i < kNumVariants; i++)
    if (!strcmp(kVariants[i].name, name)) return kVariants[i].source;
  return NULL;
}

coda_status coda_program_builtin(coda_context ctx, const char *name, coda_program *out) {
  if (!out) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_builtin: out is NULL");
  *out = NULL;
  if (!name) return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "coda_program_builtin: name is NULL");
  for (int i = 0; i < ir_builtin_count(); i++) {
    if (strcmp(coda_builtin_program_name(i), name)) continue;
    coda_status s = i < coda_builtin_program_count
                        ? coda_program_parse(ctx, coda_builtin_programs[i].text, out)
                        : derive(ctx, &kVariants[i - coda_builtin_program_count], out);
    if (s && ctx) {
      char msg[CODA_ERRMSG_LEN];
      snprintf(msg, sizeof msg, "%s", coda_last_error(ctx));
      coda_fail(ctx, s, "built-in program '%s': %s", name, msg);
    }
    return s;
  }
  char known[256] = "";
  size_t len = 0;
  for (int i = 0; i < ir_builtin_count(); i++) {
    size_t room = sizeof known - 8 - len; /* keep room for ", ..." */
    int n = snprintf(known + len, room, "%s%s", i ? ", " : "", coda_builtin_program_name(i));
    if (n < 0 || (size_t)n >= room) { /* list too long: cut at a whole name */
      snprintf(known + len, sizeof known - len, ", ...");
      break;
    }
    len += (size_t)n;
  }
  return coda_fail(ctx, CODA_ERR_INVALID_ARGUMENT, "no built-in program named '%.64s' (known: %s)",
                   name, len ? known : "none");
}
