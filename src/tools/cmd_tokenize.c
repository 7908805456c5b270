/* `coda tokenize`: text to token ids and back with a tokenizer.json (see
 * --help). */
#include "coda.h"
#include "coda_tokenizer.h"
#include "tool_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tok_usage(FILE *f) {
  fprintf(f,
      "usage: coda tokenize --tokenizer FILE [OPTIONS] < INPUT\n"
      "\n"
      "Reads text on standard input and writes the token ids of each input line,\n"
      "separated by spaces, one output line per input line (the newline that ends\n"
      "a line is not encoded). With --decode, reads such lines of ids and writes\n"
      "the text back, one line each.\n"
      "\n"
      "options:\n"
      "  --tokenizer FILE  a Hugging Face tokenizer.json (byte-level BPE)\n"
      "  --decode          ids to text\n"
      "  --add-special     add the post-processor's special tokens (BOS/EOS)\n"
      "  --skip-special    --decode: leave out special tokens\n"
      "  -z, --null        records end with a NUL byte instead of a newline (the\n"
      "                    text side: input when encoding, output when decoding),\n"
      "                    so a record may hold newlines\n");
}

/* Reads one record ending with `sep` (not included) into *buf; returns its
 * length, or -1 at the end of the input. */
static long read_record(FILE *in, int sep, char **buf, size_t *cap, int *err) {
  size_t n = 0;
  int c;
  while ((c = getc(in)) != EOF && c != sep) {
    if (n + 1 >= *cap) {
      size_t nc = *cap ? *cap * 2 : 4096;
      char *nb = realloc(*buf, nc);
      if (!nb) {
        *err = 1;
        return -1;
      }
      *buf = nb;
      *cap = nc;
    }
    (*buf)[n++] = (char)c;
  }
  if (c == EOF && n == 0) return -1;
  return (long)n;
}

static int encode_stream(coda_context ctx, coda_tokenizer tok, int sep, unsigned flags) {
  char *line = NULL, *text = NULL;
  size_t cap = 0, text_cap = 0, n, ids_cap = 0, tlen = 0;
  int32_t *ids = NULL;
  int err = 0, rc = 0;
  long len;
  while ((len = read_record(stdin, sep, &line, &cap, &err)) >= 0) {
    if (coda_tokenizer_encode_alloc(tok, line, (size_t)len, flags, &ids, &ids_cap, &n) != CODA_OK) {
      fprintf(stderr, "coda tokenize: %s\n", coda_last_error(ctx));
      rc = 1;
      break;
    }
    if (text_cap < n * 12 + 2) {
      text_cap = n * 12 + 2;
      char *nt = realloc(text, text_cap);
      if (!nt) { err = 1; break; }
      text = nt;
    }
    tlen = 0;
    for (size_t i = 0; i < n; i++) {
      char tmp[12];
      int k = 0;
      uint32_t v = (uint32_t)ids[i];
      do { tmp[k++] = (char)('0' + v % 10); v /= 10; } while (v);
      if (i) text[tlen++] = ' ';
      while (k) text[tlen++] = tmp[--k];
    }
    text[tlen++] = '\n';
    fwrite(text, 1, tlen, stdout);
  }
  if (err) {
    fprintf(stderr, "coda tokenize: out of memory\n");
    rc = 1;
  }
  free(line);
  free(text);
  free(ids);
  return rc;
}

static int decode_stream(coda_context ctx, coda_tokenizer tok, int sep, unsigned flags) {
  char *line = NULL, *out = NULL;
  size_t cap = 0, out_cap = 0, ids_cap = 0, olen;
  int32_t *ids = NULL;
  int err = 0, rc = 0;
  long len, lineno = 0;
  while ((len = read_record(stdin, '\n', &line, &cap, &err)) >= 0) {
    lineno++;
    size_t n = 0;
    char *p = line, *end = line + len;
    while (p < end) {
      while (p < end && (*p == ' ' || *p == '\t' || *p == '\r')) p++;
      if (p == end) break;
      char *q;
      errno = 0;
      char save = line[len];
      line[len] = '\0';
      long v = strtol(p, &q, 10);
      line[len] = save;
      if (q == p || errno || v < 0 || v > INT32_MAX || (q < end && *q != ' ' && *q != '\t' && *q != '\r')) {
        fprintf(stderr, "coda tokenize: line %ld: not a list of token ids\n", lineno);
        rc = 1;
        goto done;
      }
      if (n == ids_cap) {
        size_t nc = ids_cap ? ids_cap * 2 : 256;
        int32_t *ni = realloc(ids, nc * sizeof *ni);
        if (!ni) { err = 1; goto done; }
        ids = ni;
        ids_cap = nc;
      }
      ids[n++] = (int32_t)v;
      p = q;
    }
    if (coda_tokenizer_decode_alloc(tok, ids, n, flags, &out, &out_cap, &olen) != CODA_OK) {
      fprintf(stderr, "coda tokenize: line %ld: %s\n", lineno, coda_last_error(ctx));
      rc = 1;
      goto done;
    }
    fwrite(out, 1, olen, stdout);
    putchar(sep);
  }
done:
  if (err) {
    fprintf(stderr, "coda tokenize: out of memory\n");
    rc = 1;
  }
  free(line);
  free(out);
  free(ids);
  return rc;
}

int cmd_tokenize(int argc, char **argv) {
  const char *path = NULL;
  int decode = 0, sep = '\n';
  unsigned flags = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) { tok_usage(stdout); return 0; }
    if (!strcmp(a, "--tokenizer")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "coda tokenize: --tokenizer needs a file\n");
        return 2;
      }
      path = argv[++i];
    } else if (!strcmp(a, "--decode")) {
      decode = 1;
    } else if (!strcmp(a, "--add-special")) {
      flags |= CODA_TOKENIZER_ADD_SPECIAL;
    } else if (!strcmp(a, "--skip-special")) {
      flags |= CODA_TOKENIZER_SKIP_SPECIAL;
    } else if (!strcmp(a, "-z") || !strcmp(a, "--null")) {
      sep = '\0';
    } else {
      fprintf(stderr, "coda tokenize: unknown option '%s'\n", a);
      tok_usage(stderr);
      return 2;
    }
  }
  if (!path) {
    fprintf(stderr, "coda tokenize: --tokenizer FILE is required\n");
    tok_usage(stderr);
    return 2;
  }
  coda_context_options co = coda_context_default_options();
  co.backend = CODA_BACKEND_CPU;
  coda_context ctx;
  if (coda_tool_context(&co, &ctx, "tokenize", "CPU") != CODA_OK) return 1;
  coda_tokenizer tok;
  if (coda_tokenizer_load(ctx, path, &tok) != CODA_OK) {
    fprintf(stderr, "coda tokenize: %s\n", coda_last_error(ctx));
    coda_context_destroy(ctx);
    return 1;
  }
  int rc = decode ? decode_stream(ctx, tok, sep, flags) : encode_stream(ctx, tok, sep, flags);
  if (fflush(stdout) != 0) {
    fprintf(stderr, "coda tokenize: write error\n");
    rc = 1;
  }
  coda_tokenizer_destroy(tok);
  coda_context_destroy(ctx);
  return rc;
}
