/* Internal interface of src/io: the file formats and file operations the
 * layers above read and write. CRC-32, bounded whole-file reads and atomic
 * writes (files.c), safetensors (safetensors.c) and a small JSON reader
 * (json.c). Nothing here knows a model or a tokenizer. */
#ifndef CODA_IO_H
#define CODA_IO_H

#include "base/internal.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ------------------------------------------------------------ checksums */

/* CRC-32 (IEEE 802.3, reflected, as zlib's crc32): crc = coda_crc32(0, p, n)
 * then chained as coda_crc32(crc, p2, n2). */
uint32_t coda_crc32(uint32_t crc, const void *p, size_t n);

/* ---------------------------------------------------------- safetensors */

#define CODA_ST_MAX_DIMS 8
typedef struct coda_st_tensor {
  char *name;
  char dtype[8]; /* "F32", "BF16", "F16", "F64", "I32", "I64", "U16", "U8" */
  int ndim;
  int64_t shape[CODA_ST_MAX_DIMS];
  uint64_t begin, end; /* offsets into the data region */
  const unsigned char *data; /* points into the loaded file */
} coda_st_tensor;

typedef struct coda_st_file {
  unsigned char *buf;
  size_t size;
  size_t data_start;
  int n;
  coda_st_tensor *t;
  int nmeta;
  char **meta_key;
  char **meta_val;
} coda_st_file;

/* Loads and validates: header length within the file, JSON structure,
 * known dtypes, shape · dtype size == end − begin, offsets within the data
 * region and not overlapping, unique names. If the metadata has "crc32"
 * the data region's CRC-32 must match, and likewise "header_crc32" for
 * the header; require_crc makes both mandatory. */
coda_status coda_st_load(coda_context ctx, const char *path, int require_crc,
                         coda_st_file *out);
/* The largest header a reader accepts. */
#define CODA_ST_MAX_HEADER (100u << 20)
/* The same, bounded: a file of more than max bytes is refused before it is
 * read. header_only: reads only the length and the header (offsets are
 * checked against the file size, the header checksum is verified, the data
 * is not read: tensors' data is NULL). */
coda_status coda_st_load_ex(coda_context ctx, const char *path, int require_crc,
                            uint64_t max, int header_only, coda_st_file *out);
/* Same from memory (the buffer is copied). */
coda_status coda_st_parse(coda_context ctx, const void *bytes, size_t n,
                          int require_crc, const char *what, coda_st_file *out);
void coda_st_free(coda_st_file *f);
const coda_st_tensor *coda_st_find(const coda_st_file *f, const char *name);
const char *coda_st_meta(const coda_st_file *f, const char *key);
size_t coda_st_dtype_size(const char *dtype);

typedef struct coda_st_entry {
  const char *name;
  const char *dtype;
  int ndim;
  int64_t shape[CODA_ST_MAX_DIMS];
  const void *data; /* little-endian bytes, product(shape) · dtype size */
} coda_st_entry;

/* Writes atomically (a temporary file in the same directory, fsync,
 * rename). Metadata pairs are strings; "crc32" is added (CRC-32 of the
 * data region, 8 hex digits) and "header_crc32" (CRC-32 of the length
 * bytes and the header, its own 8 digits read as '0'). */
coda_status coda_st_save(coda_context ctx, const char *path,
                         const coda_st_entry *e, int n,
                         const char *const *meta_kv, int nmeta);
/* The same with the tensors' bytes from read (entries' data unused):
 * read(user, i, off, dst, n) fills bytes off .. off+n of entry i, in
 * order, a chunk at a time, so the tensors need not be in host memory
 * (e.g. a download from a device). The file is written in one pass: the
 * data first, then the header with its CRCs at the front. */
typedef coda_status (*coda_st_reader)(void *user, int i, uint64_t off, void *dst, size_t n);
coda_status coda_st_save_from(coda_context ctx, const char *path, const coda_st_entry *e, int n,
                              const char *const *meta_kv, int nmeta, coda_st_reader read,
                              void *user);

/* Reads a whole file into *buf (malloc'ed, *n bytes); IO errors and
 * allocation failures become errors naming the path. Only a regular file
 * is read (a directory, FIFO or device is refused without blocking), and
 * only the size fstat gives: the read is bounded. */
coda_status coda_read_file(coda_context ctx, const char *path, unsigned char **buf, size_t *n);
/* The same, refusing a file of more than max bytes. */
coda_status coda_read_file_max(coda_context ctx, const char *path, uint64_t max,
                               unsigned char **buf, size_t *n);
/* What a file that is not a regular one is, for messages ("a directory",
 * "a FIFO", "a device", "a socket", "not a file"), from st_mode. */
const char *coda_file_kind(unsigned mode);
/* Opens path for reading: a regular file of at most max bytes (else an
 * error naming it); *fd_out and its *size. */
coda_status coda_open_regular(coda_context ctx, const char *path, uint64_t max, int *fd_out,
                              uint64_t *size);
/* Reads exactly n bytes at offset off of fd (path names it in errors). */
coda_status coda_read_fd(coda_context ctx, int fd, const char *path, uint64_t off, void *dst,
                         size_t n);

/* A file written in place of path atomically: a temporary next to it,
 * written anywhere (pwrite), then fsync + rename (commit) or removed
 * (abort; a failed write or commit aborts by itself). */
typedef struct coda_atomic_file {
  int fd;
  char *tmp;
  const char *path;
} coda_atomic_file;
coda_status coda_atomic_open(coda_context ctx, const char *path, coda_atomic_file *f);
coda_status coda_atomic_write_at(coda_context ctx, coda_atomic_file *f, uint64_t off,
                                 const void *buf, size_t n);
coda_status coda_atomic_commit(coda_context ctx, coda_atomic_file *f);
void coda_atomic_abort(coda_atomic_file *f);

/* The files of dir whose names end in suffix (hidden names left out), in
 * name order, each a regular file once links are followed; *out holds
 * *n malloc'ed paths (free each, then the array). strict: an entry that
 * is not one is refused by name; else it is left out. */
coda_status coda_list_dir(coda_context ctx, const char *dir, const char *suffix, int strict,
                          char ***out, size_t *n);

/* Writes a whole buffer to path atomically (temp file + fsync + rename). */
coda_status coda_write_atomic(coda_context ctx, const char *path,
                              const void *const *parts, const size_t *sizes,
                              int nparts);

/* ----------------------------------------------------------------- JSON */

/* A small JSON reader for the configuration files the library loads
 * (tokenizer.json): the whole text is parsed into a tree of values that
 * lives in one arena, freed at once. Strings are decoded to UTF-8 (\u
 * escapes included, surrogate pairs joined) and NUL-terminated; object
 * members keep the file's order, and an object with a key twice is
 * refused (readers disagree on which one counts). */

#include <stddef.h>
#include <stdint.h>

typedef enum coda_json_kind {
  CODA_JSON_NULL = 0,
  CODA_JSON_FALSE,
  CODA_JSON_TRUE,
  CODA_JSON_NUMBER,
  CODA_JSON_STRING,
  CODA_JSON_ARRAY,
  CODA_JSON_OBJECT
} coda_json_kind;

typedef struct coda_json_member coda_json_member;

typedef struct coda_json {
  coda_json_kind kind;
  size_t n; /* string: bytes; array: items; object: members */
  union {
    double num;
    const char *str;
    struct coda_json *items;
    coda_json_member *members;
  } u;
} coda_json;

struct coda_json_member {
  const char *key;
  size_t key_len;
  coda_json value;
};

typedef struct coda_json_doc coda_json_doc;

/* Parses n bytes of text. On failure returns NULL and writes
 * "line L, column C: what" to err (err_len bytes). */
coda_json_doc *coda_json_parse(const char *text, size_t n, char *err, size_t err_len);
const coda_json *coda_json_root(const coda_json_doc *d);
void coda_json_free(coda_json_doc *d);

/* The member `key` of an object (NULL if v is not an object or has none). */
const coda_json *coda_json_get(const coda_json *v, const char *key);
/* 1 if v is a string equal to s. */
int coda_json_is_str(const coda_json *v, const char *s);
/* Name of a kind, for messages ("string", "object"...). */
const char *coda_json_kind_name(coda_json_kind k);

#endif
