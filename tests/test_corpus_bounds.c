/* Corpus preparation (coda_prepare_data) holds a bounded amount of its
 * input: a JSON Lines file whose one line is 768 MiB (a sparse file of
 * zero bytes, no newline) is refused once the line passes the 64 MiB
 * limit, with a message naming the file, the line and the limit, and the
 * process' peak memory grows by far less than the line: under 384 MiB
 * (65 MiB measured, 216 MiB under AddressSanitizer, whose quarantine keeps
 * the buffers outgrown); a reader that holds the whole line before
 * checking it grows by 768 MiB. A line just
 * under a small document still prepares, so the limit is not a refusal of
 * everything. */
#define _POSIX_C_SOURCE 200809L
#include "coda_train.h"
#include "check.h"
#include "file_util.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

static long peak_kib(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

int main(void) {
  char dir[128], in[256], out[256];
  snprintf(dir, sizeof dir, "test_corpus_bounds.tmp.%d", (int)getpid());
  snprintf(in, sizeof in, "%s/long.jsonl", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  CHECK(mkdir(dir, 0777) == 0);
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);

  /* a small valid file first: prepared */
  const char *ok = "{\"text\": \"a first small document\"}\n{\"text\": \"and a second one\"}\n";
  CHECK(spit(in, (const unsigned char *)ok, strlen(ok)) == 0);
  coda_data_options o = coda_data_default_options();
  o.path = in;
  o.format = CODA_DATA_JSONL;
  uint64_t ntr = 0, nva = 0;
  CHECK_MSG(coda_prepare_data(ctx, &o, out, &ntr, &nva, NULL) == CODA_OK, "%s",
            coda_last_error(ctx));
  CHECK(ntr + nva == strlen("a first small document") + strlen("and a second one"));

  /* one line of 768 MiB: a sparse file, nothing written but its size */
  int fd = open(in, O_WRONLY | O_TRUNC);
  CHECK(fd >= 0 && ftruncate(fd, (off_t)768 << 20) == 0);
  close(fd);
  const long before = peak_kib();
  coda_status s = coda_prepare_data(ctx, &o, out, NULL, NULL, NULL);
  const long grew_mib = (peak_kib() - before) / 1024;
  char want[400];
  snprintf(want, sizeof want, "%s:1: line longer than %zu bytes", in, (size_t)64 << 20);
  CHECK_MSG(s == CODA_ERR_IO && strstr(coda_last_error(ctx), want),
            "status %d, message '%s', wanted '%s'", (int)s, coda_last_error(ctx), want);
  CHECK_MSG(grew_mib < 384, "peak memory grew by %ld MiB reading one 768 MiB line", grew_mib);
  printf("a 768 MiB line: refused, peak memory +%ld MiB\n", grew_mib);

  coda_context_destroy(ctx);
  CHECK(remove_tree(dir) == 0);
  return CHECK_DONE();
}
