/* The JSON reader (src/io/json.c on jansson): values and the tree's
 * shape (member order, strings with NULs, numbers as doubles), and the
 * bounds it keeps: nesting depth, text size, a key twice, invalid UTF-8,
 * each refused with "line L, column C: what". */
#include "io/io.h"

#include <stdlib.h>
#include <string.h>

#include "check.h"

static char err[300];

static coda_json_doc *parse(const char *s) { return coda_json_parse(s, strlen(s), err, sizeof err); }

/* s refused, the message starting with `where` and holding `what`. */
static void refused(const char *s, size_t n, const char *where, const char *what) {
  coda_json_doc *d = coda_json_parse(s, n, err, sizeof err);
  CHECK_MSG(!d, "accepted: %.60s", s);
  coda_json_free(d);
  CHECK_MSG(!strncmp(err, where, strlen(where)) && strstr(err, what), "\"%s\" is not \"%s...%s\"", err, where, what);
}

static void values(void) {
  coda_json_doc *d = parse(" {\"z\": 1, \"a\": [true, false, null, -2.5e3, 12345678901234567890],"
                           " \"s\": \"x\\u0000y\\u00e9\\ud83d\\ude42\", \"e\": {}, \"ea\": []} ");
  CHECK_MSG(d, "%s", err);
  if (!d) return;
  const coda_json *r = coda_json_root(d);
  CHECK(r->kind == CODA_JSON_OBJECT && r->n == 5);
  /* the file's order, not sorted */
  CHECK(!strcmp(r->u.members[0].key, "z") && !strcmp(r->u.members[1].key, "a") &&
        !strcmp(r->u.members[4].key, "ea"));
  const coda_json *a = coda_json_get(r, "a");
  CHECK(a && a->kind == CODA_JSON_ARRAY && a->n == 5);
  CHECK(a->u.items[0].kind == CODA_JSON_TRUE && a->u.items[1].kind == CODA_JSON_FALSE &&
        a->u.items[2].kind == CODA_JSON_NULL);
  CHECK(a->u.items[3].kind == CODA_JSON_NUMBER && a->u.items[3].u.num == -2500.0);
  /* an integer past 64 bits is a double, not a refusal */
  CHECK(a->u.items[4].kind == CODA_JSON_NUMBER && a->u.items[4].u.num == 12345678901234567890.0);
  const coda_json *s = coda_json_get(r, "s");
  CHECK(s && s->kind == CODA_JSON_STRING && s->n == 1 + 1 + 1 + 2 + 4);
  CHECK(s && !memcmp(s->u.str, "x\0y\xc3\xa9\xf0\x9f\x99\x82", 9) && s->u.str[9] == '\0');
  CHECK(coda_json_get(r, "e")->kind == CODA_JSON_OBJECT && coda_json_get(r, "e")->n == 0);
  CHECK(coda_json_get(r, "ea")->kind == CODA_JSON_ARRAY && coda_json_get(r, "ea")->n == 0);
  CHECK(coda_json_get(r, "missing") == NULL && coda_json_get(a, "z") == NULL);
  CHECK(coda_json_is_str(coda_json_get(r, "s"), "x") == 0);
  coda_json_free(d);
  d = parse("\"top\"");
  CHECK(d && coda_json_is_str(coda_json_root(d), "top"));
  coda_json_free(d);
}

static void bounds(void) {
  /* depth: 256 nested arrays are read, 257 are refused at the 257th '[' */
  char deep[600];
  for (int k = 256; k <= 257; k++) {
    memset(deep, '[', (size_t)k);
    memset(deep + k, ']', (size_t)k);
    deep[2 * k] = '\0';
    coda_json_doc *d = parse(deep);
    if (k == 256) {
      CHECK_MSG(d, "%s", err);
    } else {
      CHECK(!d);
      CHECK_MSG(!strcmp(err, "line 1, column 257: nesting deeper than 256"), "%s", err);
    }
    coda_json_free(d);
  }
  /* brackets inside strings are not nesting */
  char wide[1200] = "[\"";
  memset(wide + 2, '[', 1000);
  strcpy(wide + 1002, "\"]");
  coda_json_doc *d = parse(wide);
  CHECK_MSG(d, "%s", err);
  coda_json_free(d);
  /* size: refused before a byte is read */
  refused("{}", ((size_t)1 << 30) + 1, "line 1, column 1: ", "more than 1073741824");
  /* a key twice, at the second one's end; in a nested object too */
  refused("{\"model\": {}, \"model\": {}}", 26, "line 1, column 21: ", "the key \"model\" appears twice");
  const char *nested = "{\"a\": {\n  \"b\": 1,\n  \"b\": 2}}";
  refused(nested, strlen(nested), "line 3, column 5: ", "the key \"b\" appears twice");
  /* invalid UTF-8 (a stray byte, an overlong form, an encoded surrogate,
   * a truncated sequence) with its byte offset; escaped lone surrogates */
  refused("[\"ok \xff\"]", 8, "line 1, column 6: ", "byte 0xff at byte offset 5");
  refused("\n\"\xc0\xaf\"", 5, "line 2, column 2: ", "byte 0xc0 at byte offset 2");
  refused("\"\xed\xa0\x80\"", 5, "line 1, column 2: ", "byte 0xed at byte offset 1");
  refused("\"\xe2\x82\"", 4, "line 1, column 2: ", "byte 0xe2 at byte offset 1");
  refused("\"\\udc00\"", 8, "line 1, ", "invalid Unicode");
  /* syntax: at the end of the text, the column just past it */
  refused("{\"model\": ", 10, "line 1, column 11: ", "end of file");
  refused("[1,\n  x]", 8, "line 2, column 3: ", "invalid token");
  refused("[1] 2", 5, "line 1, column 5: ", "end of file expected");
  refused("", 0, "line 1, column 1: ", "end of file");
}

int main(void) {
  values();
  bounds();
  return CHECK_DONE();
}
