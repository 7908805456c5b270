/* The loss chart (src/train/plot.c): a small loss.csv is charted and the
 * SVG read back here. It must be well-formed (every tag closed in order,
 * one <svg> root, attribute values quoted, no raw '<' or '&' in text), hold
 * the title, the axis labels and the legend, one point per finite row of
 * each series (a NaN row breaks the training line in two; rows without a
 * validation loss give no validation point), every point inside the plot,
 * the steps left to right and a higher loss higher up, and y tick values
 * that cover the losses. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include "file_util.h"
#include "train/train.h"
#include "base/rng.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ROWS = 40, NAN_ROW = 17, VAL_EVERY = 8 };

/* Tag balance: 1 when the document is one well-formed <svg> element
 * (after an optional <?xml ...?> declaration). */
static int well_formed(const char *s) {
  const char *stack[64];
  size_t len[64];
  int depth = 0, roots = 0;
  const char *p = s;
  if (!strncmp(p, "<?xml", 5)) {
    p = strstr(p, "?>");
    if (!p) return 0;
    p += 2;
  }
  while (*p) {
    if (*p != '<') {
      if (*p == '&') {
        const char *e = strchr(p, ';');
        if (!e || e - p > 6) return 0;
      }
      if (*p == '>') return 0;
      p++;
      continue;
    }
    if (p[1] == '/') {
      const char *n = p + 2, *e = strchr(n, '>');
      if (!e || !depth) return 0;
      depth--;
      if ((size_t)(e - n) != len[depth] || strncmp(n, stack[depth], len[depth])) return 0;
      p = e + 1;
      continue;
    }
    const char *n = p + 1;
    size_t nl = strcspn(n, " \t\n/>");
    if (!nl) return 0;
    const char *q = n + nl;
    /* attributes: name="value" */
    for (;;) {
      while (*q == ' ' || *q == '\n' || *q == '\t') q++;
      if (*q == '>' || (q[0] == '/' && q[1] == '>')) break;
      size_t an = strcspn(q, "=> \n");
      if (!an || q[an] != '=' || q[an + 1] != '"') return 0;
      const char *e = strchr(q + an + 2, '"');
      if (!e) return 0;
      for (const char *c = q + an + 2; c < e; c++)
        if (*c == '<') return 0;
      q = e + 1;
    }
    if (!depth) roots++;
    if (*q == '/') {
      p = q + 2;
      continue;
    }
    if (depth == 64) return 0;
    stack[depth] = n;
    len[depth++] = nl;
    p = q + 1;
  }
  return depth == 0 && roots == 1;
}

/* The text of the element whose start tag holds `attr` (e.g. id="title"). */
static int element_text(const char *s, const char *attr, char *out, size_t cap) {
  const char *a = strstr(s, attr);
  if (!a) return 0;
  const char *b = strchr(a, '>'), *e = b ? strchr(b, '<') : NULL;
  if (!e || (size_t)(e - b - 1) >= cap) return 0;
  memcpy(out, b + 1, (size_t)(e - b - 1));
  out[e - b - 1] = '\0';
  return 1;
}

typedef struct pts {
  double x[256], y[256];
  int n, lines, circles;
} pts;

/* The points of the polylines (and the circles) of <g id="NAME">. */
static void series(const char *s, const char *name, pts *o) {
  char key[64];
  snprintf(key, sizeof key, "<g id=\"%s\"", name);
  memset(o, 0, sizeof *o);
  const char *g = strstr(s, key), *end = g ? strstr(g, "</g>") : NULL;
  if (!end) return;
  for (const char *p = strstr(g, "<polyline points=\""); p && p < end; p = strstr(p, "<polyline points=\"")) {
    o->lines++;
    p += strlen("<polyline points=\"");
    const char *q = strchr(p, '"');
    while (p < q) {
      char *e;
      double x = strtod(p, &e);
      if (*e != ',') return;
      double y = strtod(e + 1, &e);
      if (o->n < 256) { o->x[o->n] = x; o->y[o->n] = y; }
      o->n++;
      p = e;
      while (*p == ' ') p++;
    }
  }
  for (const char *p = strstr(g, "<circle "); p && p < end; p = strstr(p + 1, "<circle ")) o->circles++;
}

int main(void) {
  coda_context ctx;
  CHECK(coda_context_create(NULL, &ctx) == CODA_OK);
  char csv[128], svg[128];
  snprintf(csv, sizeof csv, "test_train_plot.tmp.%d.csv", (int)getpid());
  snprintf(svg, sizeof svg, "test_train_plot.tmp.%d.svg", (int)getpid());
  /* the trainer's loss.csv: a falling loss, a NaN row, validation every 8 */
  char text[8192];
  size_t n = (size_t)snprintf(text, sizeof text, "step,loss,lr,grad_norm,val_loss\n");
  double lmin = INFINITY, lmax = -INFINITY;
  int nval = 0;
  for (int i = 1; i <= ROWS; i++) {
    const double loss = 2 + 3 * exp(-i / 10.0), val = loss + 0.1;
    const int has_val = i % VAL_EVERY == 0;
    nval += has_val;
    if (i != NAN_ROW) {
      lmin = fmin(lmin, fmin(loss, has_val ? val : loss));
      lmax = fmax(lmax, fmax(loss, has_val ? val : loss));
    }
    n += (size_t)snprintf(text + n, sizeof text - n, "%d,%.9g,0.001,1.5,%.9g\n", i,
                          i == NAN_ROW ? NAN : loss, has_val ? val : NAN);
  }
  CHECK(spit(csv, (const unsigned char *)text, n) == 0);
  CHECK_STATUS(ctx, coda_plot_loss_csv(ctx, csv, svg, "runs/tiny <&> \"demo\""), CODA_OK);
  size_t sn = 0;
  char *s = (char *)slurp(svg, &sn);
  CHECK(s != NULL);
  if (!s) return CHECK_DONE();
  s[sn] = '\0';
  CHECK(!strncmp(s, "<?xml", 5) && strstr(s, "<svg xmlns=\"http://www.w3.org/2000/svg\""));
  CHECK_MSG(well_formed(s), "not well-formed:\n%.400s", s);
  char t[256];
  CHECK(element_text(s, "<title", t, sizeof t) && !strcmp(t, "runs/tiny &lt;&amp;&gt; &quot;demo&quot;"));
  CHECK(element_text(s, "id=\"title\"", t, sizeof t) && !strcmp(t, "runs/tiny &lt;&amp;&gt; &quot;demo&quot;"));
  CHECK(element_text(s, "id=\"x-label\"", t, sizeof t) && !strcmp(t, "step"));
  CHECK(element_text(s, "id=\"y-label\"", t, sizeof t) && !strcmp(t, "loss"));
  {
    const char *lg = strstr(s, "<g id=\"legend\">"), *le = lg ? strstr(lg, "</g>") : NULL;
    CHECK(lg && le);
    if (lg && le) {
      const char *tr = strstr(lg, ">train</text>"), *va = strstr(lg, ">validation</text>");
      CHECK(tr && tr < le && va && va < le);
    }
  }
  pts tr, va;
  series(s, "train", &tr);
  series(s, "validation", &va);
  CHECK_EQ_INT(tr.n, ROWS - 1); /* the NaN row is skipped... */
  CHECK_EQ_INT(tr.lines, 2);    /* ...and breaks the line */
  CHECK_EQ_INT(va.n, nval);
  CHECK_EQ_INT(va.circles, nval);
  /* inside the plot area (viewBox 720 x 440, margins 72/24/48/56) */
  int inside = 1, rightward = 1, ordered = 1;
  for (int i = 0; i < tr.n && i < 256; i++) {
    inside &= tr.x[i] >= 72 - 1e-6 && tr.x[i] <= 720 - 24 + 1e-6 && tr.y[i] >= 48 - 1e-6 && tr.y[i] <= 440 - 56 + 1e-6;
    if (i) rightward &= tr.x[i] > tr.x[i - 1];
    if (i) ordered &= tr.y[i] >= tr.y[i - 1]; /* the loss falls: each point lower (larger y) */
  }
  CHECK(inside && rightward && ordered);
  /* validation lies 0.1 above training at the same step: same x, smaller y */
  for (int k = 0; k < va.n && k < 256; k++) {
    const int step = (k + 1) * VAL_EVERY, i = step < NAN_ROW ? step - 1 : step - 2;
    CHECK_MSG(fabs(va.x[k] - tr.x[i]) < 1e-6 && va.y[k] < tr.y[i], "validation point %d", k);
  }
  /* y tick values (right-aligned text) cover the losses */
  double tmin = INFINITY, tmax = -INFINITY;
  int nticks = 0;
  const char *ya = strstr(s, "<g id=\"y-axis\""), *yend = ya ? strstr(ya, "</g>") : NULL;
  for (const char *p = ya ? strstr(ya, "class=\"tick\"") : NULL; p && p < yend; p = strstr(p + 1, "class=\"tick\"")) {
    const char *b = strchr(p, '>');
    const double v = strtod(b + 1, NULL);
    tmin = fmin(tmin, v);
    tmax = fmax(tmax, v);
    nticks++;
  }
  CHECK_MSG(nticks >= 3 && nticks <= 15 && tmin <= lmin && tmax >= lmax, "%d ticks %g..%g for %g..%g", nticks, tmin,
            tmax, lmin, lmax);
  free(s);

  /* the array form: bad sizes refused; nothing finite still a valid chart */
  double x[2] = {1, 2}, y[2] = {NAN, NAN};
  CHECK(coda_plot_loss_svg(ctx, svg, "t", 10, 10, x, y, 2, NULL, NULL, 0) == CODA_ERR_INVALID_ARGUMENT);
  CHECK_STATUS(ctx, coda_plot_loss_svg(ctx, svg, "t", 320, 200, x, y, 2, NULL, NULL, 0), CODA_OK);
  s = (char *)slurp(svg, &sn);
  CHECK(s != NULL);
  if (s) {
    s[sn] = '\0';
    CHECK(well_formed(s));
    series(s, "train", &tr);
    CHECK(tr.n == 0 && tr.lines == 0);
    free(s);
  }
  /* a log without the step and loss columns */
  CHECK(spit(csv, (const unsigned char *)"a,b\n1,2\n", 8) == 0);
  CHECK(coda_plot_loss_csv(ctx, csv, svg, "t") == CODA_ERR_PARSE);
  unlink(csv);
  unlink(svg);
  coda_context_destroy(ctx);
  return CHECK_DONE();
}
