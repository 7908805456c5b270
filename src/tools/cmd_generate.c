/* `coda generate`: text from a checkpoint with the KV-cache decoder
 * (coda_decode.h), or a timing of the decoder on random weights
 * (--bench); see --help. */
#define _POSIX_C_SOURCE 200809L /* stat */
#include "coda_decode.h"
#include "tool_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define MAX_PROMPTS 64
#define MAX_STOPS 32

/* The numeric options (tool_util.h): their ranges and meanings, checked
 * and listed in the help from this one table. */
static const coda_tool_num gen_nums[] = {
    {"--tokens", 1, 0, 1 << 24, 0, 0, "new tokens per prompt (bench: decode steps)"},
    {"--temperature", 0, 0, 1e6, 0, 0, "sampling temperature; 0 = greedy"},
    {"--top-k", 1, 0, 1 << 24, 0, 0, "sample among the K most likely tokens; 0 = all"},
    {"--top-p", 0, 0, 1, 1, 0, "nucleus sampling: the most likely tokens holding P of the "
                               "probability; 1 = off"},
    {"--seed", 1, 0, 4611686018427387904.0, 0, 0, "sampling seed: the same seed, the same text"},
    {"--stop", 1, 0, 1 << 24, 0, 0, "a token id that ends a sequence (repeatable)"},
    {"--max-len", 1, 0, 1 << 24, 0, 0, "cache positions per sequence; 0 = prompt + tokens"},
    {"--threads", 1, 0, 4096, 0, 0, "CPU threads; 0 = the OpenMP default"},
    {"--prompt-len", 1, 1, 1 << 20, 0, 0, "bench: prompt tokens"},
    {"--hbm-gbps", 0, 1, 1e6, 0, 0, "bench: the memory bandwidth of the floor column, GB/s"},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static void gen_usage(FILE *f) {
  fprintf(f,
      "usage: coda generate --checkpoint PATH [OPTIONS]\n"
      "       coda generate --bench [--device gpu|cpu] [BENCH OPTIONS]\n"
      "  --checkpoint PATH   a coda checkpoint (.safetensors) or a Hugging Face model folder\n"
      "                      (config.json, model.safetensors). The tokenizer is the one the\n"
      "                      checkpoint names (saved beside it by coda train --tokenizer;\n"
      "                      its checksum verified), else a tokenizer.json in the folder or\n"
      "                      beside the checkpoint, else tokens are bytes\n"
      "  --tokenizer FILE    use this tokenizer.json instead (its vocab must fit the model's)\n"
      "  --prompt TEXT       text to continue (default: a newline); repeat for a batch\n"
      "  --prompt-ids LIST   a prompt given as token ids (comma- or space-separated, each\n"
      "                      below the model's vocab); mixes with --prompt in a batch\n"
      "  --print-ids         write the generated token ids instead of text: one line per\n"
      "                      sequence, ids separated by spaces (the prompt not repeated)\n"
      "  --stats             after the text, one line on stderr: the prompt tokens and the\n"
      "                      time to the first new token, the new tokens and their rate\n"
      "                      (wall clock, as a user sees the stream)\n"
      "  --tokens N          new tokens per prompt (default 200)\n"
      "  --temperature X     0 = greedy (default 0.8)\n"
      "  --top-k N           sample among the N most likely (default 40, 0 = all)\n"
      "  --top-p X           nucleus: the most likely tokens holding X of the probability\n"
      "                      (default 1 = off)\n"
      "  --seed N            sampling seed (default 1): the same seed gives the same text\n"
      "  --stop ID           stop a sequence at token ID (repeatable; the tokenizer's EOS\n"
      "                      always stops)\n"
      "  --max-len N         cache positions per sequence (default: prompt + tokens, at most\n"
      "                      the model's window)\n"
      "  --device NAME       cpu (default) | gpu\n"
      "  --threads N         CPU threads\n"
      "  --no-graphs         GPU: launch each decode step's kernels one by one instead of\n"
      "                      replaying the step's recorded CUDA graph\n"
      "  --prefill PATH      how fresh prompts are prefilled: auto (default: the fused\n"
      "                      block plans on the GPU, the fp32 reference path on the CPU)\n"
      "                      | plans | direct\n"
      "With one prompt the text is written as it is produced; with several, each\n"
      "sequence's text once all have finished, separated by lines \"--- sequence I\".\n"
      "Bench: random weights of a Llama-like shape, random prompts; prints the prefill\n"
      "time and the decode rate for each batch size.\n"
      "  --shape NAME        1.1b (default: 16 layers, d 2048, 32/8 heads, ffn 8192, vocab\n"
      "                      32768) | 8b (32 layers, d 4096, ffn 14336, vocab 128256) | tiny\n"
      "  --batches LIST      batch sizes, comma-separated (default 1,16)\n"
      "  --prompt-len N      prompt tokens (default 512)\n"
      "  --tokens N          decode steps (default 128 in bench mode)\n"
      "  --hbm-gbps X        memory bandwidth of the floor column, GB/s (default 4300)\n"
      "  --profile           GPU: after the timed run, one more step with a timing marker\n"
      "                      after each kernel: its device time by phase\n");
  coda_tool_num_help(f, gen_nums);
}

/* Streams the bytes of one sequence, or keeps each sequence's bytes for
 * the end (a batch). */
typedef struct {
  int streaming, failed;
  char *text[MAX_PROMPTS];
  size_t len[MAX_PROMPTS], cap[MAX_PROMPTS];
  long tokens;                   /* new tokens seen, all sequences */
  double t_start, t_first, t_last; /* wall clock: generate called, first and last token */
} text_sink;

static double wall_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int on_token(void *user, int b, int32_t t, const char *bytes, size_t n) {
  text_sink *s = user;
  (void)t;
  s->t_last = wall_s();
  if (s->tokens++ == 0) s->t_first = s->t_last;
  if (s->streaming) {
    fwrite(bytes, 1, n, stdout); /* bytes, not a C string: byte 0 too */
    fflush(stdout);
    return 0;
  }
  if (s->len[b] + n > s->cap[b]) {
    size_t cap = (s->len[b] + n) * 2 + 64;
    char *p = realloc(s->text[b], cap);
    if (!p) {
      s->failed = 1;
      return 1;
    }
    s->text[b] = p;
    s->cap[b] = cap;
  }
  memcpy(s->text[b] + s->len[b], bytes, n);
  s->len[b] += n;
  return 0;
}

static int parse_batches(const char *v, int *out, int max) {
  int n = 0;
  const char *p = v;
  while (*p) {
    char *end;
    errno = 0;
    long x = strtol(p, &end, 10);
    if (errno || end == p || x < 1 || x > 4096 || n == max) return -1;
    out[n++] = (int)x;
    if (*end == ',') end++;
    else if (*end) return -1;
    p = end;
  }
  return n;
}

static int run_bench(coda_context ctx, const char *shape, const int *batches, int nb,
                     int prompt_len, int steps, int gpu, int no_graphs, int profile,
                     double hbm_gbps, coda_prefill_path prefill) {
  coda_model_config c;
  memset(&c, 0, sizeof c);
  c.rope_theta = 500000.0;
  c.norm_eps = 1e-5;
  if (!strcmp(shape, "1.1b")) {
    c.vocab = 32768; c.dim = 2048; c.layers = 16; c.heads = 32; c.kv_heads = 8; c.ffn = 8192;
  } else if (!strcmp(shape, "8b")) {
    c.vocab = 128256; c.dim = 4096; c.layers = 32; c.heads = 32; c.kv_heads = 8; c.ffn = 14336;
  } else if (!strcmp(shape, "tiny")) {
    c.vocab = 256; c.dim = 128; c.layers = 2; c.heads = 4; c.kv_heads = 2; c.ffn = 384;
  } else {
    fprintf(stderr, "coda generate: unknown --shape '%s' (1.1b, 8b or tiny)\n", shape);
    return 2;
  }
  c.seq = prompt_len + steps + 1;
  int maxb = 1;
  for (int i = 0; i < nb; i++) maxb = batches[i] > maxb ? batches[i] : maxb;
  double params = (double)c.vocab * c.dim * 2 +
                  (double)c.layers * ((double)c.dim * c.dim * 2 + (double)c.dim * c.dim / 2 +
                                      3.0 * c.dim * c.ffn);
  printf("decoder bench: %s shape (%.1f M parameters, random weights), %s, prompt %d tokens, "
         "%d decode steps (greedy), step graphs %s, prefill %s\n", shape, params / 1e6,
         gpu ? "GPU (bf16)" : "CPU (fp32)", prompt_len, steps, no_graphs ? "off" : "on",
         prefill == CODA_PREFILL_PLANS ? "plans" : prefill == CODA_PREFILL_DIRECT ? "direct" : "auto");
  /* The floor of a step: the bf16 weights (of the embedding table only the
   * batch's rows) and the cache at its mean length over the steps, read
   * once at hbm_gbps (--hbm-gbps: the measured copy bandwidth; default an
   * H200's nominal 4.3 TB/s). */
  const double hbm = hbm_gbps * 1e9;
  printf("%6s %12s %16s %14s %16s %14s %10s %7s\n", "batch", "prefill ms", "prefill tok/s",
         "step ms", "decode tok/s", "floor ms", "of floor", "graphs");
  int rc = 0;
  for (int i = 0; i < nb && !rc; i++) {
    int B = batches[i];
    coda_decoder_options o = {.struct_size = sizeof o, .batch = B,
                              .max_len = prompt_len + steps + 2, /* + a profiled step */
                              .no_graphs = no_graphs, .prefill = prefill};
    coda_decoder d = NULL;
    if (coda_decoder_create_random(ctx, &c, 1, &o, &d) != CODA_OK) {
      fprintf(stderr, "coda generate: %s\n", coda_last_error(ctx));
      return 1;
    }
    int32_t *tok = malloc((size_t)B * prompt_len * sizeof *tok);
    const int32_t **pr = malloc((size_t)B * sizeof *pr);
    int *ln = malloc((size_t)B * sizeof *ln);
    coda_generate_result *res = calloc((size_t)B, sizeof *res);
    if (!tok || !pr || !ln || !res) {
      fprintf(stderr, "coda generate: out of memory\n");
      rc = 1;
    }
    uint64_t r = 12345;
    for (int64_t k = 0; !rc && k < (int64_t)B * prompt_len; k++) {
      r = r * 6364136223846793005ull + 1442695040888963407ull;
      tok[k] = (int32_t)((r >> 33) % (uint64_t)c.vocab);
    }
    for (int b = 0; !rc && b < B; b++) {
      pr[b] = tok + (int64_t)b * prompt_len;
      ln[b] = prompt_len;
    }
    coda_generate_params g = coda_generate_default_params();
    g.max_new_tokens = steps + 1; /* the first token comes from the prefill */
    double pre = 0, dec = 0;
    /* one warm-up run (kernel loading, first allocations), then the timed one */
    for (int rep = 0; rep < 2 && !rc; rep++) {
      if (coda_decoder_generate(d, pr, ln, B, &g, res, &pre, &dec) != CODA_OK) {
        fprintf(stderr, "coda generate: %s\n", coda_last_error(ctx));
        rc = 1;
      }
      coda_generate_result_free(res, B);
    }
    const double kv = (double)B * c.layers * (prompt_len + steps / 2.0) * 2.0 *
                      ((double)c.kv_heads * (c.dim / c.heads)) * 2.0;
    const double wbytes = (params - (double)c.vocab * c.dim + (double)B * c.dim) * 2.0;
    const double floor_ms = (wbytes + kv) / hbm * 1e3, step_ms = dec * 1e3 / steps;
    if (!rc)
      printf("%6d %12.2f %16.0f %14.3f %16.1f %14.3f %9.0f%% %7d\n", B, pre * 1e3,
             (double)B * prompt_len / pre, step_ms, (double)B * steps / dec, floor_ms,
             100.0 * floor_ms / step_ms, coda_decoder_graphs(d));
    if (!rc && profile && gpu) { /* one more step, by phase */
      double ms[CODA_DECODE_PHASES], by[CODA_DECODE_PHASES], sum = 0.0;
      int32_t *zero = calloc((size_t)B, sizeof *zero);
      if (!zero || coda_decoder_step_bytes(d, zero, by) != CODA_OK ||
          coda_decoder_step_profile(d, zero, ms) != CODA_OK) {
        fprintf(stderr, "coda generate: profile: %s\n", coda_last_error(ctx));
        rc = 1;
      } else {
        /* Each phase against the floor of the bytes it must read (the
         * library's count: its weights, the attention its cache at the
         * profiled step's length) at the floor column's bandwidth; the
         * rest of a phase's time is its kernels' launch gaps, dependency
         * waits and tails. */
        printf("       step by phase: %-26s %9s %9s %9s %9s\n", "phase", "ms", "MB",
               "floor ms", "of floor");
        double fsum = 0.0, bsum = 0.0;
        for (int p = 0; p < CODA_DECODE_PHASES; p++) {
          const double f = by[p] / hbm * 1e3;
          printf("       step by phase: %-26s %9.3f %9.2f %9.3f %8.0f%%\n",
                 coda_decoder_phase_name(p), ms[p], by[p] / 1e6, f,
                 ms[p] > 0 ? 100.0 * f / ms[p] : 0.0);
          sum += ms[p];
          fsum += f;
          bsum += by[p];
        }
        printf("       step by phase: %-26s %9.3f %9.2f %9.3f %8.0f%%\n", "sum", sum, bsum / 1e6,
               fsum, sum > 0 ? 100.0 * fsum / sum : 0.0);
      }
      free(zero);
    }
    fflush(stdout);
    free(tok); free(pr); free(ln); free(res);
    coda_decoder_destroy(d);
  }
  return rc;
}

/* Token ids "1,2 3" (commas and/or spaces); *out malloc'ed. */
static int parse_ids(const char *v, int32_t **out, int *n) {
  size_t cap = strlen(v) / 2 + 1, k = 0;
  int32_t *ids = malloc(cap * sizeof *ids);
  if (!ids) return -1;
  const char *p = v;
  for (;;) {
    while (*p == ' ' || *p == ',') p++;
    if (!*p) break;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (errno || end == p || x < 0 || x >= (1LL << 31) || (*end && *end != ' ' && *end != ',') ||
        k == cap) {
      free(ids);
      return -1;
    }
    ids[k++] = (int32_t)x;
    p = end;
  }
  if (k == 0) {
    free(ids);
    return -1;
  }
  *out = ids;
  *n = (int)k;
  return 0;
}

/* The tokenizer coda_decoder_load will use: `given` (--tokenizer), else
 * the checkpoint's (coda_checkpoint_tokenizer); *out NULL: byte tokens.
 * Says which on stderr. */
static coda_status load_tokenizer(coda_context ctx, const char *ckpt, const char *given,
                                  coda_tokenizer *out) {
  *out = NULL;
  char *p = NULL;
  int recorded = 0;
  struct stat st;
  if (!given && stat(ckpt, &st) != 0) return CODA_OK; /* coda_decoder_load names the path */
  coda_status s = given ? CODA_OK : coda_checkpoint_tokenizer(ctx, ckpt, &p, &recorded);
  const char *path = given ? given : p;
  if (!s && path) {
    s = coda_tokenizer_load(ctx, path, out);
    if (!s)
      fprintf(stderr, "coda generate: tokenizer %s%s\n", path,
              given ? " (--tokenizer)" : recorded ? " (named by the checkpoint, checksum verified)"
                                                  : "");
  }
  free(p);
  return s;
}

/* The command line of `coda generate`. */
typedef struct {
  const char *ckpt, *prompts[MAX_PROMPTS], *shape, *tokenizer;
  int np, tokens, top_k, threads, gpu, bench, max_len;
  int as_ids[MAX_PROMPTS], print_ids, stats; /* as_ids[i]: prompts[i] is a list of token ids */
  int prompt_len, batches[16], nb, no_graphs, profile;
  coda_prefill_path prefill;
  double hbm_gbps;
  int32_t stops[MAX_STOPS];
  int nstop;
  double temperature, top_p;
  uint64_t seed;
} gen_opts;

/* The flags into o (defaults set here); GO_ON, or the exit status. */
#define GO_ON (-1)
static int gen_parse(gen_opts *o, int argc, char **argv) {
  *o = (gen_opts){.shape = "1.1b", .tokens = -1, .top_k = 40, .prompt_len = 512, .batches = {1, 16},
                  .nb = 2, .prefill = CODA_PREFILL_AUTO, .hbm_gbps = 4300.0, .temperature = 0.8,
                  .top_p = 1.0, .seed = 1};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { gen_usage(stdout); return 0; }
    if (!strcmp(a, "--bench")) { o->bench = 1; continue; }
    if (!strcmp(a, "--print-ids")) { o->print_ids = 1; continue; }
    if (!strcmp(a, "--stats")) { o->stats = 1; continue; }
    if (!strcmp(a, "--no-graphs")) { o->no_graphs = 1; continue; }
    if (!strcmp(a, "--profile")) { o->profile = 1; continue; }
    const coda_tool_num *num = coda_tool_num_find(gen_nums, a);
    const char *allowed = NULL; /* what a bad value of a word flag may be */
    if (!v && num) return coda_tool_num_parse("generate", num, v, NULL);
    if (!v) {
      fprintf(stderr, "coda generate: unknown or incomplete option '%s'\n", a);
      gen_usage(stderr);
      return 2;
    }
    if (!strcmp(a, "--checkpoint")) o->ckpt = v;
    else if (!strcmp(a, "--tokenizer")) o->tokenizer = v;
    else if (!strcmp(a, "--prompt") || !strcmp(a, "--prompt-ids")) {
      if (o->np == MAX_PROMPTS) {
        fprintf(stderr, "coda generate: at most %d prompts\n", MAX_PROMPTS);
        return 2;
      }
      o->as_ids[o->np] = !strcmp(a, "--prompt-ids");
      o->prompts[o->np++] = v;
    } else if (!strcmp(a, "--shape")) o->shape = v;
    else if (!strcmp(a, "--device")) {
      if (!strcmp(v, "cpu")) o->gpu = 0;
      else if (!strcmp(v, "gpu") || !strcmp(v, "cuda")) o->gpu = 1;
      else { allowed = "cpu or gpu"; goto bad; }
    } else if (!strcmp(a, "--prefill")) {
      if (!strcmp(v, "auto")) o->prefill = CODA_PREFILL_AUTO;
      else if (!strcmp(v, "plans")) o->prefill = CODA_PREFILL_PLANS;
      else if (!strcmp(v, "direct")) o->prefill = CODA_PREFILL_DIRECT;
      else { allowed = "auto, plans or direct"; goto bad; }
    } else if (!strcmp(a, "--batches")) {
      o->nb = parse_batches(v, o->batches, 16);
      if (o->nb < 1) { allowed = "batch sizes, comma-separated, at most 16, each in [1, 4096]"; goto bad; }
    } else if (num) {
      double x = 0;
      long long k = 0; /* integers exactly (--seed up to 2^62) */
      if (num->integer ? coda_tool_num_parse_ll("generate", num, v, &k)
                       : coda_tool_num_parse("generate", num, v, &x))
        return 2;
      if (num->integer) x = (double)k;
      if (!strcmp(a, "--hbm-gbps")) o->hbm_gbps = x;
      else if (!strcmp(a, "--top-p")) o->top_p = x;
      else if (!strcmp(a, "--temperature")) o->temperature = x;
      else if (!strcmp(a, "--tokens")) o->tokens = (int)x;
      else if (!strcmp(a, "--top-k")) o->top_k = (int)x;
      else if (!strcmp(a, "--seed")) o->seed = (uint64_t)k;
      else if (!strcmp(a, "--threads")) o->threads = (int)x;
      else if (!strcmp(a, "--max-len")) o->max_len = (int)x;
      else if (!strcmp(a, "--prompt-len")) o->prompt_len = (int)x;
      else if (o->nstop < MAX_STOPS) o->stops[o->nstop++] = (int32_t)x; /* --stop */
      else {
        fprintf(stderr, "coda generate: --stop: at most %d stop tokens\n", MAX_STOPS);
        return 2;
      }
    } else {
      fprintf(stderr, "coda generate: unknown option '%s'\n", a);
      gen_usage(stderr);
      return 2;
    }
    i++;
    continue;
  bad:
    fprintf(stderr, "coda generate: bad value '%s' for %s%s%s\n", v, a, allowed ? ": allowed are " : "",
            allowed ? allowed : "");
    return 2;
  }
  if (!o->ckpt && !o->bench) {
    fprintf(stderr, "coda generate: --checkpoint PATH is required\n");
    gen_usage(stderr);
    return 2;
  }
  return GO_ON;
}

/* The prompts as token ids (ids[i] allocated, lens[i] tokens): lists of
 * ids, or text through the tokenizer tk (NULL: bytes). CODA_OK with *rc
 * set to 2 after saying why for a bad prompt; *longest the longest. */
static coda_status encode_prompts(const gen_opts *o, coda_tokenizer tk, int32_t **ids, int *lens,
                                  int *longest, int *rc) {
  coda_status s = CODA_OK;
  *longest = 0;
  for (int i = 0; !s && i < o->np; i++) {
    size_t n = 0, cap = 0;
    const size_t pl = strlen(o->prompts[i]);
    if (o->as_ids[i]) {
      int k = 0;
      if (parse_ids(o->prompts[i], &ids[i], &k)) {
        fprintf(stderr, "coda generate: --prompt-ids '%s' is not a list of token ids (integers "
                "0 .. 2^31-1 separated by commas or spaces)\n", o->prompts[i]);
        *rc = 2;
        break;
      }
      n = (size_t)k;
    } else if (tk) {
      s = coda_tokenizer_encode_alloc(tk, o->prompts[i], pl, CODA_TOKENIZER_ADD_SPECIAL, &ids[i],
                                      &cap, &n);
    } else {
      ids[i] = malloc((pl ? pl : 1) * sizeof(int32_t));
      if (!ids[i]) s = CODA_ERR_OUT_OF_MEMORY;
      for (size_t k = 0; !s && k < pl; k++) ids[i][k] = (unsigned char)o->prompts[i][k];
      n = pl;
    }
    if (!s && (n == 0 || n > (1u << 24))) {
      fprintf(stderr, "coda generate: prompt %d has %zu tokens\n", i + 1, n);
      *rc = 2;
      break;
    }
    lens[i] = (int)n;
    *longest = lens[i] > *longest ? lens[i] : *longest;
  }
  return s;
}

/* --stats: the first token's wait holds the prefill (all prompts at once)
 * and one sampling step; the rate counts the tokens after each sequence's
 * first, over the time after the first token. */
static void print_stats(const text_sink *s, const int *lens, int np) {
  long prompt = 0;
  for (int i = 0; i < np; i++) prompt += lens[i];
  if (s->tokens == 0) {
    fprintf(stderr, "coda generate: %ld prompt tokens, no new token\n", prompt);
    return;
  }
  fprintf(stderr, "coda generate: %d sequence%s, %ld prompt tokens, first new token after %.1f ms; "
          "%ld new tokens", np, np == 1 ? "" : "s", prompt, 1e3 * (s->t_first - s->t_start), s->tokens);
  const long later = s->tokens - np;
  if (later > 0 && s->t_last > s->t_first)
    fprintf(stderr, ", %.1f tokens/s after the first", (double)later / (s->t_last - s->t_first));
  fputc('\n', stderr);
}

/* Generates from the encoded prompts with the sampling of o: one stream
 * printed as it comes, several printed at the end (or the ids). The
 * status, with *rc set to 1 where the tool already said why. */
static coda_status generate_text(const gen_opts *o, coda_decoder d, int32_t **ids, const int *lens,
                                 coda_generate_result *res, int *rc) {
  coda_status s = CODA_OK;
  const int np = o->np;
  text_sink *sink = calloc(1, sizeof *sink);
  if (!sink) s = CODA_ERR_OUT_OF_MEMORY;
  coda_generate_params g = coda_generate_default_params();
  g.sampling.temperature = o->temperature;
  g.sampling.top_k = o->top_k;
  g.sampling.top_p = o->top_p;
  g.sampling.seed = o->seed;
  g.max_new_tokens = o->tokens;
  g.stop = o->stops;
  g.nstop = o->nstop;
  g.stop_at_eos = 1;
  g.on_token = on_token;
  g.user = sink;
  if (sink) {
    sink->streaming = np == 1 && !o->print_ids;
    if (sink->streaming && !o->as_ids[0]) {
      fputs(o->prompts[0], stdout);
      fflush(stdout);
    }
    sink->t_start = wall_s();
    s = coda_decoder_generate(d, (const int32_t *const *)ids, lens, np, &g, res, NULL, NULL);
  }
  if (!s && sink && o->stats) print_stats(sink, lens, np);
  if (!s && sink->failed) {
    fprintf(stderr, "coda generate: out of memory\n");
    *rc = 1;
  }
  for (int i = 0; !s && !*rc && o->print_ids && i < np; i++) {
    for (int k = 0; k < res[i].n; k++) printf(k ? " %d" : "%d", (int)res[i].tokens[k]);
    putchar('\n');
  }
  for (int i = 0; !s && !*rc && !o->print_ids && i < np; i++) {
    if (np > 1 && o->as_ids[i]) printf("--- sequence %d\n", i + 1);
    else if (np > 1) printf("--- sequence %d\n%s", i + 1, o->prompts[i]);
    if (np > 1 && sink->len[i]) fwrite(sink->text[i], 1, sink->len[i], stdout);
    if (np > 1 || i == 0) putchar('\n');
  }
  for (int i = 0; sink && i < np; i++) free(sink->text[i]);
  free(sink);
  for (int i = 0; !s && i < np; i++)
    if (res[i].stop == CODA_STOP_WINDOW)
      fprintf(stderr, "coda generate: sequence %d stopped at the cache's end (%d tokens: "
              "--max-len, the model's window)\n", i + 1, coda_decoder_max_len(d));
  if (fflush(stdout) != 0 || ferror(stdout)) {
    fprintf(stderr, "coda generate: cannot write the text: %s\n", strerror(errno));
    *rc = 1;
  }
  return s;
}

int cmd_generate(int argc, char **argv) {
  gen_opts opts, *o = &opts;
  int prc = gen_parse(o, argc, argv);
  if (prc != GO_ON) return prc;
  coda_context_options co = coda_context_default_options();
  co.num_threads = o->threads;
  co.backend = o->gpu ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
  co.own_stream = 1; /* a stream of its own, so decode steps can be recorded as graphs */
  coda_context ctx;
  if (coda_tool_context(&co, &ctx, "generate", o->gpu ? "CUDA" : "CPU") != CODA_OK) return 1;
  if (o->bench) {
    int rc = run_bench(ctx, o->shape, o->batches, o->nb, o->prompt_len, o->tokens < 0 ? 128 : o->tokens,
                       o->gpu, o->no_graphs, o->profile, o->hbm_gbps, o->prefill);
    coda_context_destroy(ctx);
    return rc;
  }
  if (o->tokens < 0) o->tokens = 200;
  if (o->np == 0) {
    o->as_ids[o->np] = 0;
    o->prompts[o->np++] = "\n";
  }
  int rc = 0;
  coda_decoder d = NULL;
  int32_t *ids[MAX_PROMPTS] = {0};
  int lens[MAX_PROMPTS];
  coda_generate_result res[MAX_PROMPTS];
  memset(res, 0, sizeof res);
  /* The prompts are measured first (with the tokenizer the decoder will
   * load), so that the cache holds the longest prompt plus the new tokens
   * and no more than that. */
  coda_tokenizer tk = NULL;
  coda_status s = load_tokenizer(ctx, o->ckpt, o->tokenizer, &tk);
  int longest = 0;
  if (!s) s = encode_prompts(o, tk, ids, lens, &longest, &rc);
  coda_tokenizer_destroy(tk);
  coda_decoder_options dopt = {.struct_size = sizeof dopt, .batch = o->np,
                               .max_len = o->max_len > 0 ? o->max_len : longest + o->tokens,
                               .no_graphs = o->no_graphs, .tokenizer = o->tokenizer,
                               .prefill = o->prefill};
  if (!s && !rc) {
    s = coda_decoder_load(ctx, o->ckpt, &dopt, &d);
    coda_tool_warnings(ctx, "generate");
  }
  if (!s && !rc) {
    for (int i = 0; i < o->np; i++)
      if (lens[i] > coda_decoder_max_len(d)) {
        fprintf(stderr, "coda generate: prompt %d has %d tokens, more than the cache of %d "
                "(--max-len, the model's window)\n", i + 1, lens[i], coda_decoder_max_len(d));
        rc = 2;
        break;
      }
  }
  if (!s && !rc) s = generate_text(o, d, ids, lens, res, &rc);
  if (s) {
    if (o->np == 1) fflush(stdout);
    fprintf(stderr, "coda generate: %s\n", coda_last_error(ctx));
    rc = 1;
  }
  coda_generate_result_free(res, o->np);
  for (int i = 0; i < o->np; i++) free(ids[i]);
  coda_decoder_destroy(d);
  coda_context_destroy(ctx);
  return rc;
}
