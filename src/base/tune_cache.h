/* The autotuners' tables of choices and their on-disk form (small text
 * files). Backend-independent so that the file formats are tested on
 * machines without a GPU; the measuring sides are src/backends/cuda/gemm_tune.cu (plain
 * GEMM) and coda_plan_tune_fusion in src/nn/plan_tune.c (fused GEMM steps).
 *
 * GEMM file (gemm-tune.txt): one entry per line, whitespace-separated fields
 *
 *   <device> <lib> <M> <N> <K> <layout> <ab dtype> <d dtype> <accumulate> <config> <splits> <us>
 *
 * e.g. "NVIDIA_H200/132sm 0.1.0+c2 512 2048 16384 TN bf16 bf16 0 0 4 60.1".
 * <device> and <lib> are tags without spaces (GPU name and SM count; library
 * version and tile-table size): entries whose tags differ from the running
 * ones are kept in the file but never used. Lines starting with '#', and lines
 * that do not parse or hold out-of-range values, are ignored. The file is
 * rewritten whole through a temporary file and rename(), so a reader sees the
 * old or the new file, never a torn one.
 *
 * Fused-step file (fused-tune.txt, beside it; same rules for tags, comments,
 * bad lines and rewriting):
 *
 *   <device> <lib> <program> <M> <N> <K> <layout> <ab dtype> <tile> <choice> <us0> <us1> <us2>
 *
 * e.g. "NVIDIA_H200/132sm 0.1.0+k3f9a0c1e 80035118be60db00 4096 2048 2048 NT
 * bf16 64x128 cooperative 61.20 58.90 63.00". <program> is the FNV-1a hash
 * of the program's canonical text (16 lower-case hex digits), <tile> the
 * step's tiling, <choice> one of fused (the backend's own schedule),
 * pingpong, cooperative, unfused, and us0..us2 the measured times of fused
 * (pingpong on CUDA), fused cooperative and unfused (0 = not measured). */
#ifndef CODA_TUNE_CACHE_H
#define CODA_TUNE_CACHE_H
#include "base/knobs.h"

#include "coda.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

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
int coda_tune_cache_default_path(const coda_knobs *k, char *buf, size_t n);

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

/* ------------------------------------------------ fused-step choices */

/* Choice for a GEMM + epilogue step: the first three equal CODA_SCHED_*
 * (fused with that schedule), the last is the plain GEMM + map pair. */
enum {
  CODA_FUSED_CHOICE_FUSED = 0,
  CODA_FUSED_CHOICE_PINGPONG = 1,
  CODA_FUSED_CHOICE_COOPERATIVE = 2,
  CODA_FUSED_CHOICE_UNFUSED = 3
};

typedef struct coda_fused_key {
  uint64_t program; /* coda_fnv1a64 of the program's canonical text */
  int64_t m, n, k;
  int trans_a, trans_b; /* 0 = N, 1 = T */
  coda_dtype ab;        /* operand type */
  int tile_m, tile_n;   /* the step's tiling */
} coda_fused_key;

typedef struct coda_fused_entry {
  char device[CODA_TUNE_TAG_LEN];
  char lib[CODA_TUNE_TAG_LEN];
  coda_fused_key key;
  int choice;   /* CODA_FUSED_CHOICE_* */
  double us[3]; /* fused (pingpong on CUDA), fused cooperative, unfused; 0 = not measured */
} coda_fused_entry;

typedef struct coda_fused_cache {
  char device[CODA_TUNE_TAG_LEN]; /* tags of the running process */
  char lib[CODA_TUNE_TAG_LEN];
  char path[CODA_TUNE_PATH_LEN]; /* "" = memory only */
  coda_fused_entry *e;
  int n, cap;
  int loaded;  /* the file was read (once) */
  int disk_ok; /* cleared after a failed write: no retry */
} coda_fused_cache;


/* As the GEMM table's functions above, for the fused-step choices. The
 * default file is fused-tune.txt in the GEMM file's directory. */
void coda_fused_cache_init(coda_fused_cache *c, const char *device, const char *lib,
                           const char *path);
void coda_fused_cache_free(coda_fused_cache *c);
int coda_fused_cache_default_path(const coda_knobs *k, char *buf, size_t n);
int coda_fused_cache_load(coda_fused_cache *c);
const coda_fused_entry *coda_fused_cache_find(const coda_fused_cache *c, const coda_fused_key *key);
/* CODA_ERR_INVALID_ARGUMENT for a choice out of range or a negative or
 * non-finite time. */
coda_status coda_fused_cache_put(coda_fused_cache *c, const coda_fused_key *key, int choice,
                                 const double us[3]);
coda_status coda_fused_cache_save(coda_context ctx, coda_fused_cache *c);
int coda_fused_format_line(const coda_fused_entry *e, char *buf, size_t n);
int coda_fused_parse_line(const char *line, coda_fused_entry *out);
/* Name of a choice ("fused", "pingpong", "cooperative", "unfused"). */
const char *coda_fused_choice_name(int choice);

/* The context's table of fused-step choices (ctx->fused_tune): _state
 * returns it or NULL before the first _create, which makes it with the
 * running tags and file and reads the file (NULL when out of memory).
 * Freed by coda_fused_tune_release (context destruction). */
coda_fused_cache *coda_fused_tune_state(coda_context ctx);
coda_fused_cache *coda_fused_tune_create(coda_context ctx, const char *device, const char *lib,
                                         const char *path);
void coda_fused_tune_release(coda_context ctx);

#ifdef __cplusplus
}
#endif

#endif
