/* Plan memory: allocation of owned buffers, binding caller memory,
 * and the temporaries' arena, laid out by liveness (plan_layout,
 * plan_pack) so that temporaries whose steps do not overlap share bytes
 * (docs/plans.md, "Temporaries share memory"). */
#include "nn/plan_internal.h"

#include "base/internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ allocation */

/* Device buffers (coda_malloc), initial values converted on the host and
 * uploaded. */
static coda_status alloc_device(coda_plan p, plan_buf *b) {
  size_t n = (size_t)(b->rows * b->cols), bytes = n * coda_dtype_size(b->dtype);
  void *d = NULL;
  coda_status s = coda_malloc(p->ctx, bytes, &d);
  if (s != CODA_OK) return s;
  if (b->init) {
    void *h = malloc(bytes ? bytes : 1);
    if (!h) {
      coda_free(p->ctx, d);
      return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
    }
    coda_tensor t = {h, b->dtype, b->rows, b->cols, b->cols};
    for (int64_t r = 0; r < b->rows; r++)
      for (int64_t c = 0; c < b->cols; c++) coda_store(&t, r, c, b->init[r * b->cols + c]);
    s = coda_memcpy_h2d(p->ctx, d, h, bytes);
    free(h);
    if (s != CODA_OK) {
      coda_free(p->ctx, d);
      return s;
    }
  }
  b->data = d;
  b->owned = 1;
  b->ld = b->cols;
  return CODA_OK;
}

static coda_status arena_alloc(coda_plan p);

static coda_status alloc_one(coda_plan p, plan_buf *b) {
  if (b->alias >= 0) { /* the target's memory, as it is now */
    plan_buf *t = &p->bufs[b->alias];
    coda_status s = alloc_one(p, t);
    if (s != CODA_OK) return s;
    if (b->reshape && t->ld != t->cols)
      return coda_fail(p->ctx, CODA_ERR_SHAPE, "plan '%s': '%s' is a view of '%s' as %lld x %lld, "
                       "which needs '%s' contiguous (its ld is %lld, not %lld)", p->name, b->name,
                       t->name, (long long)b->rows, (long long)b->cols, t->name,
                       (long long)t->ld, (long long)t->cols);
    b->data = t->data;
    b->ld = b->reshape ? b->cols : t->ld;
    b->owned = 0;
    return CODA_OK;
  }
  if (b->data) return CODA_OK;
  if (b->role == PLAN_ROLE_TEMP && !p->arena_live) { /* it may live in the arena */
    coda_status s = arena_alloc(p);
    if (s != CODA_OK || b->data) return s;
  }
  if (p->device) return alloc_device(p, b);
  size_t n = (size_t)(b->rows * b->cols);
  b->data = calloc(n ? n : 1, coda_dtype_size(b->dtype));
  if (!b->data)
    return coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': cannot allocate '%s' (%lld x %lld %s)",
                     p->name, b->name, (long long)b->rows, (long long)b->cols,
                     coda_dtype_name(b->dtype));
  b->owned = 1;
  b->ld = b->cols;
  if (b->init) {
    coda_tensor t = view_of(b);
    for (int64_t r = 0; r < b->rows; r++)
      for (int64_t c = 0; c < b->cols; c++) coda_store(&t, r, c, b->init[r * b->cols + c]);
  }
  return CODA_OK;
}

coda_status plan_alloc(coda_plan p) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  coda_status s0 = arena_alloc(p);
  if (s0 != CODA_OK) return s0;
  for (int i = 0; i < p->nbuf; i++) {
    coda_status s = alloc_one(p, &p->bufs[i]);
    if (s != CODA_OK) return s;
  }
  return CODA_OK;
}

coda_status coda_plan_tensor(coda_plan p, const char *name, coda_tensor *out) {
  if (!p || !out) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  int i = plan_find(p, name);
  if (i < 0)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT, "plan '%s' has no buffer '%s'", p->name,
                     name ? name : "(null)");
  coda_status s = alloc_one(p, &p->bufs[i]);
  if (s != CODA_OK) return s;
  *out = view_of(&p->bufs[i]);
  return CODA_OK;
}

coda_status coda_plan_bind(coda_plan p, const char *name, const coda_tensor *t) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  int i = plan_find(p, name);
  if (i < 0)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT, "plan '%s' has no buffer '%s'", p->name,
                     name ? name : "(null)");
  coda_status s = coda_check_tensor(p->ctx, name, t);
  if (s != CODA_OK) return s;
  plan_buf *b = &p->bufs[i];
  if (b->alias >= 0)
    return coda_fail(p->ctx, CODA_ERR_INVALID_ARGUMENT,
                     "plan '%s': '%s' lives in '%s''s memory (in place); bind '%s' instead",
                     p->name, name, p->bufs[b->alias].name, p->bufs[b->alias].name);
  if (t->dtype != b->dtype || t->rows != b->rows || t->cols != b->cols)
    return coda_fail(p->ctx, CODA_ERR_SHAPE,
                     "plan '%s': binding '%s' as %lld x %lld %s, the plan needs %lld x %lld %s",
                     p->name, name, (long long)t->rows, (long long)t->cols,
                     coda_dtype_name(t->dtype), (long long)b->rows, (long long)b->cols,
                     coda_dtype_name(b->dtype));
  if (b->owned) {
    if (p->device) coda_free(p->ctx, b->data);
    else free(b->data);
  }
  b->owned = 0;
  b->arena_off = -1; /* its arena bytes stay unused until the arena is laid out again */
  b->data = t->data;
  b->ld = t->ld;
  return CODA_OK;
}

/* -------------------------------------- temporaries sharing memory by liveness */

static int size_add(size_t a, size_t b, size_t *out) {
  if (a > SIZE_MAX - b) return 0;
  *out = a + b;
  return 1;
}

static int align_arena(size_t x, size_t *out) {
  if (!size_add(x, PLAN_ARENA_ALIGN - 1, out)) return 0;
  *out -= *out % PLAN_ARENA_ALIGN;
  return 1;
}

typedef struct pack_key {
  size_t bytes;
  int i;
} pack_key;

static int pack_cmp(const void *a, const void *b) {
  const pack_key *x = a, *y = b;
  if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
  return (x->i > y->i) - (x->i < y->i);
}

int plan_pack(const plan_interval *iv, int n, size_t *off, size_t *arena) {
  *arena = 0;
  if (n <= 0) return 0;
  pack_key *key = malloc((size_t)n * sizeof *key);
  int *placed = malloc((size_t)n * sizeof *placed); /* placed blocks by offset */
  if (!key || !placed) {
    free(key);
    free(placed);
    return -1;
  }
  for (int i = 0; i < n; i++) key[i] = (pack_key){iv[i].bytes, i};
  qsort(key, (size_t)n, sizeof *key, pack_cmp);
  int np = 0, ok = 1;
  size_t end = 0;
  for (int t = 0; t < n && ok; t++) {
    const int j = key[t].i;
    const size_t bytes = iv[j].bytes;
    size_t at = 0, top;
    /* lowest gap among the blocks that intersect j in time: walk them in
     * offset order; every block below `at` has been stepped over */
    for (int u = 0; u < np && ok; u++) {
      const int q = placed[u];
      if (iv[q].first > iv[j].last || iv[j].first > iv[q].last) continue;
      ok = size_add(at, bytes, &top);
      if (ok && top <= off[q]) break;
      size_t qend;
      ok = ok && size_add(off[q], iv[q].bytes, &qend) && align_arena(qend, &qend);
      if (ok && qend > at) at = qend;
    }
    ok = ok && size_add(at, bytes, &top);
    if (!ok) break;
    off[j] = at;
    if (top > end) end = top;
    int u = np++; /* insert by (offset, index) */
    while (u > 0 && (off[placed[u - 1]] > at || (off[placed[u - 1]] == at && placed[u - 1] > j))) {
      placed[u] = placed[u - 1];
      u--;
    }
    placed[u] = j;
  }
  free(key);
  free(placed);
  if (!ok || !align_arena(end, arena)) return -1;
  return 0;
}

void plan_ref(plan_refs *r, int b, int use) {
  if (b < 0) return;
  int k = 0;
  while (k < r->n && r->buf[k] != b) k++;
  if (k == r->n) {
    if (r->n == PLAN_MAX_REFS) return;
    r->buf[k] = b;
    r->use[k] = 0;
    r->n++;
  }
  r->use[k] |= use;
}

coda_status plan_layout(coda_plan p) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  const int n = p->nstep, nb = p->nbuf;
  int *order = malloc(((size_t)n + 1) * sizeof *order);
  int *first = malloc(((size_t)nb + 1) * sizeof *first), *last = malloc(((size_t)nb + 1) * sizeof *last);
  int *use0 = calloc((size_t)nb + 1, sizeof *use0), *phases = calloc((size_t)nb + 1, sizeof *phases);
  plan_interval *iv = calloc((size_t)nb + (size_t)n + 1, sizeof *iv);
  size_t *off = malloc(((size_t)nb + (size_t)n + 1) * sizeof *off);
  int *who = malloc(((size_t)nb + (size_t)n + 1) * sizeof *who); /* buffer, or -1 - step */
  int *aw = malloc(((size_t)nb + 1) * sizeof *aw); /* per target: step its alias is first written */
  coda_status st = CODA_OK;
  if (!order || !first || !last || !use0 || !phases || !iv || !off || !who || !aw) {
    st = coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': out of memory", p->name);
    goto done;
  }
  /* run order: the forward steps, then the backward ones */
  int q = 0;
  for (int ph = 0; ph < 2; ph++)
    for (int k = 0; k < n; k++)
      if ((int)p->steps[k].phase == ph) order[q++] = k;
  for (int i = 0; i < nb; i++) first[i] = last[i] = aw[i] = -1;
  for (q = 0; q < n; q++) {
    const plan_step *s = &p->steps[order[q]];
    plan_refs refs = {0};
    plan_step_ops_of(s->kind)->refs(p, s, &refs);
    const int nr = refs.n;
    const int *buf = refs.buf, *use = refs.use;
    /* in place: once an alias is written, its target's old contents are
     * gone, so no later step may read the target */
    for (int r = 0; r < nr; r++)
      if ((use[r] & REF_READ) && aw[buf[r]] >= 0 && aw[buf[r]] < q) {
        int a = 0;
        while (a < nb - 1 && (p->bufs[a].alias != buf[r] || p->bufs[a].reshape)) a++;
        st = coda_fail(p->ctx, CODA_ERR_ALIAS,
                       "plan '%s': step %d (%s) reads '%s' after step %d wrote '%s' in its "
                       "memory (in place)",
                       p->name, order[q], s->label, p->bufs[buf[r]].name, order[aw[buf[r]]],
                       p->bufs[a].name);
        goto done;
      }
    for (int r = 0; r < nr; r++) {
      const int t = p->bufs[buf[r]].alias;
      /* a view (another shape, plan_buffer_view) is no write in place */
      if (t >= 0 && !p->bufs[buf[r]].reshape && (use[r] & REF_WRITE) && aw[t] < 0) aw[t] = q;
    }
    for (int r = 0; r < nr; r++) {
      const int b = buf[r];
      if (first[b] < 0) first[b] = q, use0[b] = use[r];
      last[b] = q;
      phases[b] |= 1 << (int)s->phase;
    }
  }
  for (int i = 0; i < nb; i++) {
    p->bufs[i].live_first = first[i] < 0 ? -1 : order[first[i]];
    p->bufs[i].live_last = last[i] < 0 ? -1 : order[last[i]];
  }
  /* an alias's references are its target's (the same memory) */
  for (int i = 0; i < nb; i++) {
    const int t = p->bufs[i].alias;
    if (t < 0 || first[i] < 0) continue;
    if (first[t] < 0 || first[i] < first[t]) first[t] = first[i], use0[t] = use0[i];
    else if (first[i] == first[t]) use0[t] |= use0[i];
    if (last[i] > last[t]) last[t] = last[i];
    phases[t] |= phases[i];
  }
  if (p->arena_live) goto done; /* the offsets in force stay */
  /* Members: temporaries without initial values or memory of their own,
   * whose first reference writes them whole (a buffer read, or
   * accumulated into, before any write would see another's bytes). One
   * referenced by both phases stays live to the end, so a backward phase
   * run again still finds it. */
  const int share = !p->no_share;
  int nblk = 0;
  p->ntemp = 0;
  for (int i = 0; i < nb; i++) {
    plan_buf *b = &p->bufs[i];
    b->arena_off = -1;
    if (b->role != PLAN_ROLE_TEMP || b->init || b->data || b->alias >= 0 || first[i] < 0 ||
        use0[i] != REF_WRITE)
      continue;
    iv[nblk].first = share ? first[i] : 0;
    iv[nblk].last = share ? (phases[i] == 3 ? n - 1 : last[i]) : 0;
    iv[nblk].bytes = (size_t)(b->rows * b->cols) * coda_dtype_size(b->dtype);
    who[nblk++] = i;
    p->ntemp++;
  }
  /* with sharing on, each unfused GEMM step's accumulator: live for its
   * step alone (off, the plan's one acc_tmp as before) */
  for (q = 0; q < n; q++) {
    plan_step *s = &p->steps[order[q]];
    s->acc_off = -1;
    if (!share || s->kind != PLAN_GEMM || !s->unfused) continue;
    iv[nblk].first = iv[nblk].last = q;
    iv[nblk].bytes = (size_t)s->M * (size_t)s->N * coda_dtype_size(acc_dtype(p));
    who[nblk++] = -1 - order[q];
  }
  size_t arena = 0, sum = 0;
  if (plan_pack(iv, nblk, off, &arena) != 0) {
    st = coda_fail(p->ctx, CODA_ERR_OUT_OF_MEMORY, "plan '%s': temporaries: out of memory", p->name);
    goto done;
  }
  for (int k = 0; k < nblk; k++) {
    sum += iv[k].bytes;
    if (who[k] >= 0) p->bufs[who[k]].arena_off = (int64_t)off[k];
    else p->steps[-1 - who[k]].acc_off = (int64_t)off[k];
  }
  p->arena_bytes = arena;
  p->temp_bytes = sum;
done:
  free(order);
  free(first);
  free(last);
  free(use0);
  free(phases);
  free(iv);
  free(off);
  free(who);
  free(aw);
  return st;
}

/* Lays out and allocates the arena (one coda_malloc, zeroed, on every
 * backend) and points its temporaries into it. */
static coda_status arena_alloc(coda_plan p) {
  if (p->arena_live) return CODA_OK;
  coda_status s = plan_layout(p);
  if (s != CODA_OK) return s;
  if (p->arena_bytes) {
    s = coda_malloc(p->ctx, p->arena_bytes, &p->arena);
    if (s != CODA_OK) {
      char inner[CODA_ERRMSG_LEN];
      snprintf(inner, sizeof inner, "%s", coda_last_error(p->ctx));
      return coda_fail(p->ctx, s, "plan '%s': temporaries (%zu bytes): %s", p->name,
                       p->arena_bytes, inner);
    }
  }
  for (int i = 0; i < p->nbuf; i++) {
    plan_buf *b = &p->bufs[i];
    if (b->arena_off < 0) continue;
    b->data = (char *)p->arena + b->arena_off;
    b->ld = b->cols;
    b->owned = 0;
  }
  p->arena_live = 1;
  return CODA_OK;
}

/* Gives the arena back (its temporaries lose their memory and contents);
 * the next run lays it out again. */
static void arena_release(coda_plan p) {
  if (!p->arena_live) return;
  for (int i = 0; i < p->nbuf; i++)
    if (p->bufs[i].arena_off >= 0) {
      p->bufs[i].data = NULL;
      p->bufs[i].arena_off = -1;
    }
  for (int k = 0; k < p->nstep; k++) p->steps[k].acc_off = -1;
  if (p->arena) coda_free(p->ctx, p->arena);
  p->arena = NULL;
  p->arena_bytes = 0;
  p->arena_live = 0;
}

/* After the fusion choices changed: an arena whose accumulator slots no
 * longer match the unfused steps is given back, to be laid out again. */
void plan_arena_refresh(coda_plan p) {
  if (!p->arena_live) return;
  for (int k = 0; k < p->nstep; k++) {
    const plan_step *s = &p->steps[k];
    if (s->kind == PLAN_GEMM && (!p->no_share && s->unfused) != (s->acc_off >= 0)) {
      arena_release(p);
      return;
    }
  }
}

coda_status coda_plan_set_share_temps(coda_plan p, int share) {
  if (!p) return CODA_ERR_INVALID_ARGUMENT;
  if (p->status != CODA_OK) return p->status;
  if (p->no_share != !share) {
    arena_release(p);
    p->no_share = !share;
  }
  return CODA_OK;
}
