/* `coda eval`: the validation loss and perplexity of a checkpoint on a token
 * shard, a directory of shards, or a corpus (prepared as coda train
 * prepares it); see --help. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "tool_util.h"
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The numeric options (tool_util.h): ranges and meanings in one table. */
static const coda_tool_num eval_nums[] = {
    {"--batch", 1, 1, 65536, 0, 0, "windows per forward"},
    {"--seq", 1, 1, 1 << 20, 0, 0, "window length, at most the model's; default: the model's"},
    {"--max-windows", 1, 0, 1099511627776.0, 0, 0, "at most this many windows per shard; 0 = all"},
    {NULL, 0, 0, 0, 0, 0, NULL}};

static void eval_usage(FILE *f) {
  fprintf(f,
      "usage: coda eval --checkpoint PATH --data PATH [OPTIONS]\n"
      "  --checkpoint PATH  a coda checkpoint, or a Hugging Face directory (config.json,\n"
      "                     model.safetensors or its shards; Llama, Qwen3), imported in memory\n"
      "  --data PATH        a token shard (.tok), a directory holding train.tok/val.tok, or a\n"
      "                     corpus as coda train --data takes it (prepared into OUT/data);\n"
      "                     shards whose source.txt names another tokenizer than the\n"
      "                     checkpoint's, byte shards on a model with a tokenizer,\n"
      "                     tokenizer shards on a model without one (none named or beside\n"
      "                     it), and a binary file that is no shard are refused\n"
      "  --split NAME       val (default) | train | all: the shards scored\n"
      "  --tokenizer FILE --data-format F --text-field NAME   for a corpus (coda train --help);\n"
      "                     the tokenizer defaults to the checkpoint's (the one it names,\n"
      "                     checksum verified, or a tokenizer.json beside it or in the folder)\n"
      "  --out DIR          where a corpus is prepared (default runs/eval)\n"
      "  --batch N          windows per forward (default 8)\n"
      "  --seq N            window length (default: the model's)\n"
      "  --max-windows N    at most N windows per shard (default: all)\n"
      "  --device NAME      cpu (default) | gpu\n"
      "  --engine NAME      auto (default: the plans, bf16 weights and activations) |\n"
      "                     reference (the host fp32 engine: transformers' fp32 numbers) |\n"
      "                     plans\n"
      "Scores consecutive windows of seq + 1 tokens and prints the mean loss (nats per\n"
      "token) and the perplexity exp(loss).\n");
  coda_tool_num_help(f, eval_nums);
}

/* coda_eval_options.progress: the bar (stderr, a terminal only). */
static void eval_progress(int64_t done, int64_t total, void *user) {
  char detail[64];
  snprintf(detail, sizeof detail, "%lld of %lld windows", (long long)done, (long long)total);
  coda_tool_bar_update(user, (double)done, (double)total, detail);
}

/* A coda token shard: named .tok, or any file with the shard's magic (a
 * .tok that lacks it is refused by coda_evaluate, by name). */
static int is_token_shard(const char *path) {
  const size_t n = strlen(path);
  if (n > 4 && !strcmp(path + n - 4, ".tok")) return 1;
  char m[8];
  FILE *f = fopen(path, "rb");
  const int yes = f && fread(m, 1, 8, f) == 8 && !memcmp(m, "CODATOKS", 8);
  if (f) fclose(f);
  return yes;
}

int cmd_eval(int argc, char **argv) {
  coda_eval_options eo = coda_eval_default_options();
  coda_data_options d = coda_data_default_options();
  const char *data = NULL, *split = "val", *out = "runs/eval";
  int gpu = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    long long x;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { eval_usage(stdout); return 0; }
    const coda_tool_num *num = coda_tool_num_find(eval_nums, a);
    if (num) {
      if (coda_tool_num_parse_ll("eval", num, v, &x)) return 2;
      if (!strcmp(a, "--batch")) eo.batch = (int)x;
      else if (!strcmp(a, "--seq")) eo.seq = (int)x;
      else eo.max_windows = x;
      i++;
      continue;
    }
    if (!v) { fprintf(stderr, "coda eval: unknown or incomplete option '%s'\n", a); eval_usage(stderr); return 2; }
    i++;
    if (!strcmp(a, "--checkpoint")) eo.checkpoint = v;
    else if (!strcmp(a, "--data")) data = v;
    else if (!strcmp(a, "--split")) split = v;
    else if (!strcmp(a, "--tokenizer")) d.tokenizer = v;
    else if (!strcmp(a, "--text-field")) d.text_field = v;
    else if (!strcmp(a, "--out")) out = v;
    else if (!strcmp(a, "--engine")) {
      if (!strcmp(v, "auto")) eo.engine = CODA_TRAIN_ENGINE_AUTO;
      else if (!strcmp(v, "reference")) eo.engine = CODA_TRAIN_ENGINE_REFERENCE;
      else if (!strcmp(v, "plans")) eo.engine = CODA_TRAIN_ENGINE_PLANS;
      else { fprintf(stderr, "coda eval: --engine is auto, reference or plans\n"); return 2; }
    } else if (!strcmp(a, "--device")) {
      if (!strcmp(v, "gpu") || !strcmp(v, "cuda")) gpu = 1;
      else if (strcmp(v, "cpu")) { fprintf(stderr, "coda eval: --device is cpu or gpu\n"); return 2; }
    } else if (!strcmp(a, "--data-format")) {
      if (!strcmp(v, "auto")) d.format = CODA_DATA_AUTO;
      else if (!strcmp(v, "text")) d.format = CODA_DATA_TEXT;
      else if (!strcmp(v, "jsonl")) d.format = CODA_DATA_JSONL;
      else if (!strcmp(v, "llmc")) d.format = CODA_DATA_LLMC;
      else { fprintf(stderr, "coda eval: --data-format is auto, text, jsonl or llmc\n"); return 2; }
    } else {
      fprintf(stderr, "coda eval: unknown option '%s'\n", a);
      eval_usage(stderr);
      return 2;
    }
  }
  if (!eo.checkpoint || !data) {
    fprintf(stderr, "coda eval: --checkpoint and --data are required\n");
    eval_usage(stderr);
    return 2;
  }
  const int sv = !strcmp(split, "val"), st = !strcmp(split, "train"), sa = !strcmp(split, "all");
  if (!sv && !st && !sa) { fprintf(stderr, "coda eval: --split is val, train or all\n"); return 2; }
  if (gpu && !coda_cuda_available()) {
    fprintf(stderr, "coda eval: --device gpu: no usable CUDA GPU (or this build has no CUDA)\n");
    return 1;
  }
  coda_context_options co = coda_context_default_options();
  co.backend = gpu ? CODA_BACKEND_CUDA : CODA_BACKEND_CPU;
  coda_context ctx;
  if (coda_tool_context(&co, &ctx, "eval", gpu ? "CUDA" : "CPU") != CODA_OK) return 1;
  struct stat sb;
  char dir[4096], tr[4200], va[4200];
  const char *shards[2] = {NULL, NULL};
  int rc = 0;
  if (stat(data, &sb) != 0) {
    fprintf(stderr, "coda eval: %s: no such file or directory\n", data);
    rc = 1;
  } else if (S_ISREG(sb.st_mode) && is_token_shard(data)) {
    shards[0] = data; /* one shard, whatever --split says */
  } else {
    snprintf(tr, sizeof tr, "%s/train.tok", data);
    snprintf(va, sizeof va, "%s/val.tok", data);
    struct stat s2;
    const int have = S_ISDIR(sb.st_mode) && (stat(tr, &s2) == 0 || stat(va, &s2) == 0);
    if (!have) { /* a corpus */
      coda_model_config mc;
      struct stat cs;
      const int hf = stat(eo.checkpoint, &cs) == 0 && S_ISDIR(cs.st_mode);
      if (hf ? coda_hf_config(ctx, eo.checkpoint, &mc)
             : coda_checkpoint_config(ctx, eo.checkpoint, &mc)) {
        fprintf(stderr, "coda eval: %s\n", coda_last_error(ctx));
        coda_context_destroy(ctx);
        return 1;
      }
      char *carried = NULL;
      int recorded = 0;
      if (!d.tokenizer) {
        if (coda_checkpoint_tokenizer(ctx, eo.checkpoint, &carried, &recorded)) {
          fprintf(stderr, "coda eval: %s\n", coda_last_error(ctx));
          coda_context_destroy(ctx);
          return 1;
        }
        d.tokenizer = carried;
      }
      if (d.tokenizer)
        fprintf(stderr, "coda eval: tokenizer %s%s\n", d.tokenizer,
                !carried ? " (--tokenizer)"
                         : recorded ? " (named by the checkpoint, checksum verified)" : "");
      d.path = data;
      d.min_tokens = (uint64_t)(eo.seq > 0 ? eo.seq : mc.seq) + 1;
      d.progress = coda_tool_prep_progress;
      uint32_t vocab;
      rc = coda_tool_prepare_corpus(ctx, "eval", &d, out, dir, sizeof dir, &vocab);
      free(carried);
      d.tokenizer = NULL;
      snprintf(tr, sizeof tr, "%s/train.tok", dir);
      snprintf(va, sizeof va, "%s/val.tok", dir);
    }
    shards[0] = st ? tr : va;
    if (sa) shards[1] = tr;
  }
  double sum = 0.0;
  int64_t tokens = 0;
  for (int k = 0; k < 2 && !rc && shards[k]; k++) {
    eo.shard = shards[k];
    coda_eval_result r;
    coda_tool_bar bar;
    coda_tool_bar_start(&bar, "evaluating");
    eo.progress = eval_progress;
    eo.user = &bar;
    const coda_status es = coda_evaluate(ctx, &eo, &r);
    coda_tool_bar_end(&bar);
    coda_tool_warnings(ctx, "eval");
    if (es != CODA_OK) {
      fprintf(stderr, "coda eval: %s\n", coda_last_error(ctx));
      rc = 1;
      break;
    }
    printf("%s: loss %.6f  perplexity %.4f  (%lld tokens in %lld windows)\n", shards[k], r.loss,
           r.perplexity, (long long)r.tokens, (long long)r.windows);
    sum += r.loss * (double)r.tokens;
    tokens += r.tokens;
  }
  if (!rc && shards[1])
    printf("all: loss %.6f  perplexity %.4f  (%lld tokens)\n", sum / (double)tokens,
           exp(sum / (double)tokens), (long long)tokens);
  coda_context_destroy(ctx);
  return rc;
}
