/* The GEMM autotuner's table of choices and its on-disk form (a small text
 * file). Backend-independent so that the file format is tested on machines
 * without a GPU; the measuring side is src/cuda/gemm_tune.cu.
 *
 * File: one entry per line, whitespace-separated fields
 *
 *   <device> <lib> <M> <N> <K> <layout> <ab dtype> <d dtype> <accumulate> <config> <splits> <us>
 *
 * e.g. "NVIDIA_H200/132sm 0.1.0+c2 512 2048 16384 TN bf16 bf16 0 0 4 60.1".
 * <device> and <lib> are tags without spaces (GPU name and SM count; library
 * version and tile-table size): entries whose tags differ from the running
 * ones are kept in the file but never used. Lines starting with '#', and lines
 * that do not parse or hold out-of-range values, are ignored. The file is
 * rewritten whole through a temporary file and rename(), so a reader sees the
 * old or the new file, never a torn one. */
#ifndef CODA_TUNE_CACHE_H
#define CODA_TUNE_CACHE_H

#include "coda.h"

#include <stddef.h>
#include <stdint.h>

#define CODA_TUNE_TAG_LEN 96
#define CODA_TUNE_PATH_LEN 1024

typedef struct coda_tune_key {
  int64_t m, n, k;
  int trans_a, trans_b; /* 0 = N, 1 = T */
  coda_dtype ab, d;     /* operand and output types */
  int accumulate;       /* 0 or 1 */
} coda_tune_key;

typedef struct coda_tune_entry {
  char device[CODA_TUNE_TAG_LEN];
  char lib[CODA_TUNE_TAG_LEN];
  coda_tune_key key;
  int config; /* index into the tile table */
  int splits; /* k-splits, >= 1 */
  double us;  /* measured median time, microseconds */
} coda_tune_entry;

typedef struct coda_tune_cache {
  char device[CODA_TUNE_TAG_LEN]; /* tags of the running process */
  char lib[CODA_TUNE_TAG_LEN];
  char path[CODA_TUNE_PATH_LEN]; /* "" = memory only */
  coda_tune_entry *e;
  int n, cap;
  int loaded; /* the file was read (once) */
} coda_tune_cache;

/* Copies the tags (whitespace replaced by '_', truncated) and the path (NULL
 * or "" = no file). Does not read the file. */
void coda_tune_cache_init(coda_tune_cache *c, const char *device, const char *lib,
                          const char *path);
void coda_tune_cache_free(coda_tune_cache *c);

/* Default file: $CODA_CACHE_DIR/gemm-tune.txt, else
 * $HOME/.cache/coda/gemm-tune.txt. Returns 0 and leaves buf "" when neither
 * variable is set or the path does not fit. */
int coda_tune_cache_default_path(char *buf, size_t n);

/* Reads the file once (later calls do nothing) and merges its valid entries
 * into memory. A missing file is not an error. Returns the number of lines
 * ignored as corrupt (comments and blank lines do not count). */
int coda_tune_cache_load(coda_tune_cache *c);

/* The entry for key with the running tags, or NULL. */
const coda_tune_entry *coda_tune_cache_find(const coda_tune_cache *c, const coda_tune_key *key);

/* Records (or replaces) the choice for key with the running tags.
 * Returns CODA_ERR_OUT_OF_MEMORY or CODA_ERR_INVALID_ARGUMENT (config < 0,
 * splits < 1). */
coda_status coda_tune_cache_put(coda_tune_cache *c, const coda_tune_key *key, int config,
                                int splits, double us);

/* Writes every entry to the file atomically (temporary file in the same
 * directory, then rename), creating the directory if needed. Entries another
 * process wrote since the load are merged in first (memory wins on equal
 * keys). CODA_ERR_IO with ctx's message naming the path on failure; a cache
 * without a path is a no-op. */
coda_status coda_tune_cache_save(coda_context ctx, coda_tune_cache *c);

/* One line (without newline) for an entry / parse of one line. parse returns
 * 1 on a valid entry, 0 for a comment or blank line, -1 for a corrupt one. */
int coda_tune_format_line(const coda_tune_entry *e, char *buf, size_t n);
int coda_tune_parse_line(const char *line, coda_tune_entry *out);

#endif
