/*
 * core/cache/ops_batch.c: operations that gather rows along the batch axis: reorder
 * (beam search), select and repeat-interleave (contrastive search).
 *
 * Every operation allocates everything it needs before it writes anything, so
 * an allocation failure leaves the cache as it was.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

kvc_error* kvci_check_indices(const char* fn, const char* arg, const int64_t* idx, size_t count, int64_t batch) {
  if (count == 0) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: count is 0; %s needs at least one index", fn, arg);
  if (!idx) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but count is %zu", fn, arg, count);
  for (size_t i = 0; i < count; i++)
    if (idx[i] < 0 || idx[i] >= batch)
      return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: %s[%zu] is %" PRId64 " but the batch has %" PRId64
                     " rows; indices must be in [0, %" PRId64 ")",
                     fn, arg, i, idx[i], batch, batch);
  return NULL;
}

/* K/V the batch operations move: transformers skips layers that hold nothing. */
static int holds_tokens(const kvc_layer* l) { return l->initialized && l->ops->seq_length(l) > 0; }
/* Layers the batch operations act on: K/V holding tokens, or allocated row buffers (kind state). */
static int takes_part(const kvc_layer* l) { return kvci_layer_holds_rows(l); }

#define KVC_MAX_ROWBUF 136 /* LINEAR kinds: 2 per state pair, up to 64 pairs */

typedef struct new_store {
  void* k;
  void* v;
  int host; /* k and v are in the host tier: the layer is offloaded, and stays so */
  void* rows[KVC_MAX_ROWBUF]; /* new row buffers, same order as the kind lists them */
} new_store;

static int alloc_store(const kvc_cache* c, const kvc_layer* l, int64_t batch, new_store* s) {
  s->host = l->offloaded;
  return kvci_store_alloc_tier(c, s->host, batch, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &s->k, &s->v);
}

static int alloc_rows(const kvc_cache* c, kvc_layer* l, int64_t batch, new_store* s) {
  kvc_row_buffer* rb = NULL;
  int n = kvci_layer_rows(l, &rb);
  for (int i = 0; i < n && i < KVC_MAX_ROWBUF; i++) {
    if (!rb[i].ptr) continue;
    s->rows[i] = c->backend->alloc_zeroed(c->backend->ctx, &c->exec, (size_t)(rb[i].row_bytes * batch));
    if (!s->rows[i]) return -1;
  }
  return 0;
}

static void free_stores(const kvc_cache* c, new_store* s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    kvci_store_free(c, s[i].host, s[i].k, s[i].v);
    for (int r = 0; r < KVC_MAX_ROWBUF; r++)
      if (s[i].rows[r]) c->backend->free(c->backend->ctx, &c->exec, s[i].rows[r]);
  }
  free(s);
}

/* Rows of a row buffer as [rows, 1, 1, row_bytes] bytes. */
static void byte_rows(int64_t row_bytes, int64_t strides[4], int64_t shape[4]) {
  strides[0] = strides[1] = strides[2] = row_bytes;
  strides[3] = 1;
  shape[0] = shape[1] = shape[2] = 1;
  shape[3] = row_bytes;
}

/* Copies rows[b] -> b of every row buffer into the new ones and adopts them. */
static void swap_rows(const kvc_cache* c, kvc_layer* l, new_store* s, const int64_t* rows, int64_t nb) {
  kvc_row_buffer* rb = NULL;
  int n = kvci_layer_rows(l, &rb);
  const kvc_backend* be = c->backend;
  int64_t* dst = (int64_t*)rows + nb; /* caller's array has room for 2*nb: the identity after the sources */
  for (int64_t b = 0; b < nb; b++) dst[b] = b;
  for (int i = 0; i < n && i < KVC_MAX_ROWBUF; i++) {
    if (!rb[i].ptr) continue;
    int64_t st[4], shape[4];
    byte_rows(rb[i].row_bytes, st, shape);
    KVCI_BE(c, copy_rows, s->rows[i], st, dst, rb[i].ptr, st, rows, nb, shape, 1);
    be->free(be->ctx, &c->exec, rb[i].ptr);
    rb[i].ptr = s->rows[i];
    s->rows[i] = NULL;
  }
}

static void swap_store(const kvc_cache* c, kvc_layer* l, new_store* s, int64_t batch) {
  kvci_alias_index_touch(c);
  if (s->k) {
    kvci_store_free(c, l->offloaded, l->k, l->v);
    l->k = s->k;
    l->v = s->v;
    s->k = s->v = NULL;
  }
  l->batch = batch;
  kvci_layer_sync_view(l); /* K/V views when initialized, a kind's state views always */
}

/*
 * How an in-place reorder moves rows. A changed row b takes former row
 * idx[b]; when that source row is itself overwritten it is first saved to
 * scratch slot k (saved[k] -> saved_slots[k] = k), and b is filled from there.
 * One allocation holds every index list.
 */
typedef struct row_plan {
  int64_t* buf;
  int64_t *direct_dst, *direct_src;   /* rows copied straight from an unchanged row */
  int64_t *scratch_dst, *scratch_src; /* rows copied from a scratch slot */
  int64_t *saved, *saved_slots;       /* rows saved to scratch before anything is written */
  int64_t ndirect, nscratch, nsaved;
} row_plan;

static int plan_rows(const int64_t* idx, size_t count, row_plan* p) {
  memset(p, 0, sizeof *p);
  p->buf = (int64_t*)malloc(sizeof(int64_t) * 7 * count);
  if (!p->buf) return -1;
  p->direct_dst = p->buf;
  p->direct_src = p->buf + count;
  p->scratch_dst = p->buf + 2 * count;
  p->scratch_src = p->buf + 3 * count;
  p->saved = p->buf + 4 * count;
  p->saved_slots = p->buf + 5 * count;
  int64_t* slot_of = p->buf + 6 * count; /* scratch slot of a saved row, or -1 */
  for (size_t r = 0; r < count; r++) slot_of[r] = -1;
  for (size_t b = 0; b < count; b++) {
    int64_t src = idx[b];
    if (src == (int64_t)b) continue;
    if (idx[src] != src && slot_of[src] < 0) { /* the source changes too: save it first */
      slot_of[src] = p->nsaved;
      p->saved_slots[p->nsaved] = p->nsaved;
      p->saved[p->nsaved++] = src;
    }
  }
  for (size_t b = 0; b < count; b++) {
    int64_t src = idx[b];
    if (src == (int64_t)b) continue;
    if (slot_of[src] >= 0) {
      p->scratch_dst[p->nscratch] = (int64_t)b;
      p->scratch_src[p->nscratch++] = slot_of[src];
    } else {
      p->direct_dst[p->ndirect] = (int64_t)b;
      p->direct_src[p->ndirect++] = src;
    }
  }
  return 0;
}

/*
 * Row b becomes former row idx[b] for every layer holding tokens. When the
 * batch size is unchanged only rows with idx[b] != b are written, and only
 * their stored region; rows that are both read and overwritten go through a
 * scratch copy first.
 */
static kvc_error* gather_batch(kvc_cache* c, const int64_t* idx, size_t count, int64_t repeats) {
  /* repeats > 0: repeat-interleave (idx unused). */
  uint32_t n = c->num_layers;
  int any = 0;
  for (uint32_t i = 0; i < n; i++) any |= takes_part(c->layers[i]);
  if (!any) return NULL; /* nothing stored: indices are not even looked at (transformers skips empty layers) */
  int in_place = repeats == 0;
  for (uint32_t i = 0; i < n && in_place; i++)
    if (takes_part(c->layers[i]) && (int64_t)count != c->layers[i]->batch) in_place = 0;

  if (!in_place) {
    new_store* s = (new_store*)calloc(n ? n : 1, sizeof(*s));
    if (!s) return kvci_err_oom();
    int64_t max_rows = 1;
    for (uint32_t i = 0; i < n; i++) {
      kvc_layer* l = c->layers[i];
      if (!takes_part(l)) continue;
      int64_t nb = repeats ? l->batch * repeats : (int64_t)count;
      if (nb > max_rows) max_rows = nb;
      /* An initialized K/V store follows the new batch even when empty (a hybrid layer taking part through its
         state rows), so that the layer's batch describes every buffer it owns. */
      if ((l->initialized && alloc_store(c, l, nb, &s[i])) || alloc_rows(c, l, nb, &s[i])) {
        free_stores(c, s, n);
        return kvci_err_oom();
      }
    }
    int64_t* rows = (int64_t*)malloc(sizeof(int64_t) * 2 * (size_t)max_rows);
    if (!rows) {
      free_stores(c, s, n);
      return kvci_err_oom();
    }
    for (uint32_t i = 0; i < n; i++) {
      kvc_layer* l = c->layers[i];
      if (!takes_part(l)) continue;
      int64_t nb = repeats ? l->batch * repeats : (int64_t)count;
      for (int64_t b = 0; b < nb; b++) rows[b] = repeats ? b / repeats : idx[b];
      if (holds_tokens(l)) kvci_layer_copy_rows_to(c, l, s[i].k, s[i].v, rows, nb);
      swap_rows(c, l, &s[i], rows, nb);
      swap_store(c, l, &s[i], nb);
    }
    free(rows);
    free_stores(c, s, n);
    return NULL;
  }

  /* In place: only rows with idx[b] != b are written, only their stored region. */
  row_plan plan;
  if (plan_rows(idx, count, &plan)) return kvci_err_oom();
  if (plan.ndirect + plan.nscratch == 0) {
    free(plan.buf);
    return NULL;
  }
  /* One scratch buffer, sized for the largest layer, allocated before anything is written. */
  size_t scratch_bytes = 0;
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer* l = c->layers[i];
    if (holds_tokens(l)) {
      size_t b = (size_t)(plan.nsaved * l->heads * (l->end - l->start) * (l->k_dim > l->v_dim ? l->k_dim : l->v_dim)) *
                 l->elem;
      if (b > scratch_bytes) scratch_bytes = b;
    }
    kvc_row_buffer* rb = NULL;
    int nr = kvci_layer_rows(l, &rb);
    for (int r = 0; r < nr; r++)
      if (rb[r].ptr && (size_t)(plan.nsaved * rb[r].row_bytes) > scratch_bytes)
        scratch_bytes = (size_t)(plan.nsaved * rb[r].row_bytes);
  }
  void* scratch = NULL;
  if (scratch_bytes) {
    scratch = c->backend->alloc_zeroed(c->backend->ctx, &c->exec, scratch_bytes);
    if (!scratch) {
      free(plan.buf);
      return kvci_err_oom();
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer* l = c->layers[i];
    kvc_row_buffer* rb = NULL;
    int nr = kvci_layer_rows(l, &rb);
    for (int r = 0; r < nr; r++) {
      if (!rb[r].ptr) continue;
      int64_t st[4], shape[4];
      byte_rows(rb[r].row_bytes, st, shape);
      if (plan.nsaved)
        KVCI_BE(c, copy_rows, scratch, st, plan.saved_slots, rb[r].ptr, st, plan.saved, plan.nsaved, shape, 1);
      KVCI_BE(c, copy_rows, rb[r].ptr, st, plan.direct_dst, rb[r].ptr, st, plan.direct_src, plan.ndirect, shape, 1);
      if (plan.nscratch)
        KVCI_BE(c, copy_rows, rb[r].ptr, st, plan.scratch_dst, scratch, st, plan.scratch_src, plan.nscratch, shape,
                1);
    }
    if (!holds_tokens(l) || l->end == l->start) continue; /* a window-1 sliding layer stores nothing to move */
    for (int which = 0; which < 2; which++) {
      int64_t d = which ? l->v_dim : l->k_dim;
      int64_t st[4], shape[4] = {1, l->heads, l->end - l->start, d};
      kvci_store_strides(l, which, st);
      char* base = (char*)(which ? l->v : l->k) + (size_t)(l->start * d) * l->elem;
      int64_t ss[4] = {l->heads * shape[2] * d, shape[2] * d, d, 1}; /* scratch rows: compact [heads, stored, d] */
      if (plan.nsaved)
        KVCI_BE(c, copy_rows, scratch, ss, plan.saved_slots, base, st, plan.saved, plan.nsaved, shape, l->elem);
      KVCI_BE(c, copy_rows, base, st, plan.direct_dst, base, st, plan.direct_src, plan.ndirect, shape, l->elem);
      if (plan.nscratch)
        KVCI_BE(c, copy_rows, base, st, plan.scratch_dst, scratch, ss, plan.scratch_src, plan.nscratch, shape,
                l->elem);
    }
    kvci_layer_sync_view(l);
  }
  if (scratch) c->backend->free(c->backend->ctx, &c->exec, scratch);
  free(plan.buf);
  return NULL;
}

static kvc_error* check_batch_indices(const char* fn, const kvc_cache* c, const char* arg, const int64_t* idx,
                                      size_t count) {
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!takes_part(l)) continue;
    kvc_error* e = kvci_check_indices(fn, arg, idx, count, l->batch);
    if (e) return e;
  }
  if (count == 0) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: count is 0; %s needs at least one index", fn, arg);
  if (!idx) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but count is %zu", fn, arg, count);
  return NULL;
}

static kvc_error* require_dynamic(const char* fn, const kvc_cache* c) {
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (kvci_layer_is(c->layers[i], KVC_TRAIT_STATIC))
      return kvci_err(KVC_ERROR_UNSUPPORTED, "%s: layer %u is a %s layer; this operation is only defined for dynamic kinds",
                     fn, i, c->layers[i]->desc->name);
  return NULL;
}

/* Kind-specific refusals (kvc_layer_ops.check_batch). */
kvc_error* kvci_batch_check_kinds(const char* fn, const kvc_cache* c, kvc_batch_op op) {
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (l->ops->check_batch) {
      kvc_error* e = l->ops->check_batch(fn, l, i, op);
      if (e) return e;
    }
  }
  return NULL;
}

kvc_error* kvci_batch_check_indices(const char* fn, const kvc_cache* c, const char* arg, const int64_t* idx,
                                   size_t count) {
  return check_batch_indices(fn, c, arg, idx, count);
}

/* The largest batch a repeat-interleave may produce: keeps every size computation far from overflow. */
#define KVC_MAX_BATCH (INT64_C(1) << 31)

kvc_error* kvci_batch_check_repeats(const char* fn, const kvc_cache* c, int64_t repeats) {
  if (repeats < 1) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: repeats is %" PRId64 "; it must be >= 1", fn, repeats);
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (takes_part(l) && repeats > KVC_MAX_BATCH / l->batch)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: repeats is %" PRId64 " but layer %u holds %" PRId64 " rows; the repeated batch must not exceed %" PRId64,
                     fn, repeats, i, l->batch, KVC_MAX_BATCH);
  }
  return NULL;
}

kvc_error* kvc_cache_reorder(kvc_cache* c, const int64_t* beam_idx, size_t count) {
  static const char* FN = "kvc_cache_reorder";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (!e) e = kvci_batch_check_kinds(FN, c, KVC_BATCH_REORDER);
  if (!e) e = check_batch_indices(FN, c, "beam_idx", beam_idx, count);
  if (e) return e;
  kvci_offload_settle(c);
  return kvci_cache_result(FN, c, gather_batch(c, beam_idx, count, 0));
}

kvc_error* kvc_cache_batch_select_indices(kvc_cache* c, const int64_t* indices, size_t count) {
  static const char* FN = "kvc_cache_batch_select_indices";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (!e) e = require_dynamic(FN, c);
  if (!e) e = kvci_batch_check_kinds(FN, c, KVC_BATCH_SELECT);
  if (!e) e = check_batch_indices(FN, c, "indices", indices, count);
  if (e) return e;
  kvci_offload_settle(c);
  return kvci_cache_result(FN, c, gather_batch(c, indices, count, 0));
}

kvc_error* kvc_cache_batch_repeat_interleave(kvc_cache* c, int64_t repeats) {
  static const char* FN = "kvc_cache_batch_repeat_interleave";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (!e) e = require_dynamic(FN, c);
  if (!e) e = kvci_batch_check_kinds(FN, c, KVC_BATCH_REPEAT);
  if (!e) e = kvci_batch_check_repeats(FN, c, repeats);
  if (e) return e;
  kvci_offload_settle(c);
  return kvci_cache_result(FN, c, repeats == 1 ? NULL : gather_batch(c, NULL, 0, repeats));
}
