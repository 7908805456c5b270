/* `coda generate`: samples text from a checkpoint (see --help). */
#include "coda_train.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void gen_usage(FILE *f) {
  fprintf(f,
      "usage: coda generate --checkpoint PATH [OPTIONS]\n"
      "  --prompt TEXT       text to continue (default: a newline)\n"
      "  --tokens N          bytes to generate (default 200)\n"
      "  --temperature X     0 = greedy (default 0.8)\n"
      "  --top-k N           sample among the N most likely (default 40, 0 = all)\n"
      "  --seed N            sampling seed (default 1)\n"
      "  --threads N         CPU threads\n");
}

int cmd_generate(int argc, char **argv) {
  coda_generate_options o = {NULL, NULL, 200, 0.8, 40, 1};
  int threads = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { gen_usage(stdout); return 0; }
    if (!v) {
      fprintf(stderr, "coda generate: unknown or incomplete option '%s'\n", a);
      gen_usage(stderr);
      return 2;
    }
    char *end;
    errno = 0;
    if (!strcmp(a, "--checkpoint")) o.checkpoint = v;
    else if (!strcmp(a, "--prompt")) o.prompt = v;
    else if (!strcmp(a, "--temperature")) {
      o.temperature = strtod(v, &end);
      if (end == v || *end || !(o.temperature >= 0)) goto bad;
    } else {
      long long x = strtoll(v, &end, 10);
      if (errno || end == v || *end || x < 0) goto bad;
      if (!strcmp(a, "--tokens") && x <= (1 << 24)) o.max_tokens = (int)x;
      else if (!strcmp(a, "--top-k") && x <= (1 << 24)) o.top_k = (int)x;
      else if (!strcmp(a, "--seed")) o.seed = (uint64_t)x;
      else if (!strcmp(a, "--threads") && x <= 4096) threads = (int)x;
      else goto bad;
    }
    i++;
    continue;
  bad:
    fprintf(stderr, "coda generate: bad value '%s' for %s\n", v, a);
    return 2;
  }
  if (!o.checkpoint) {
    fprintf(stderr, "coda generate: --checkpoint PATH is required\n");
    gen_usage(stderr);
    return 2;
  }
  coda_context_options co = coda_context_default_options();
  co.num_threads = threads;
  coda_context ctx;
  if (coda_context_create(&co, &ctx) != CODA_OK) {
    fprintf(stderr, "coda generate: cannot create a context\n");
    return 1;
  }
  char *text = NULL;
  size_t len = 0;
  coda_status s = coda_generate_n(ctx, &o, &text, &len);
  int rc = 0;
  if (s) {
    fprintf(stderr, "coda generate: %s\n", coda_last_error(ctx));
    rc = 1;
  } else {
    /* bytes, not a C string: a sampled byte 0 is output too */
    fwrite(text, 1, len, stdout);
    fputc('\n', stdout);
    if (fflush(stdout) != 0 || ferror(stdout)) {
      fprintf(stderr, "coda generate: cannot write the text: %s\n", strerror(errno));
      rc = 1;
    }
  }
  free(text);
  coda_context_destroy(ctx);
  return rc;
}
