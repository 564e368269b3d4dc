/*
 * core/ops_batch.c: operations along the batch axis: reorder (beam search),
 * select and repeat-interleave (contrastive search), split and stack.
 *
 * Every operation allocates everything it needs before it writes anything, so
 * an allocation failure leaves the cache as it was.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

kvc_error* kvc_check_indices(const char* fn, const char* arg, const int64_t* idx, size_t count, int64_t batch) {
  if (count == 0) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: count is 0; %s needs at least one index", fn, arg);
  if (!idx) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but count is %zu", fn, arg, count);
  for (size_t i = 0; i < count; i++)
    if (idx[i] < 0 || idx[i] >= batch)
      return kvc_err(KVC_ERROR_OUT_OF_RANGE, "%s: %s[%zu] is %" PRId64 " but the batch has %" PRId64
                     " rows; indices must be in [0, %" PRId64 ")",
                     fn, arg, i, idx[i], batch, batch);
  return NULL;
}

/* Layers the batch operations act on: transformers skips layers that hold nothing. */
static int holds_tokens(const kvc_layer* l) { return l->initialized && l->ops->seq_length(l) > 0; }

static void row_shape(const kvc_layer* l, int which, int64_t shape[4]) {
  shape[0] = 1;
  shape[1] = l->heads;
  shape[2] = l->cap;
  shape[3] = which ? l->v_dim : l->k_dim;
}

/* A store for `batch` rows with the layer's geometry; 0 on success. */
typedef struct new_store {
  void* k;
  void* v;
} new_store;

static int alloc_store(const kvc_cache* c, const kvc_layer* l, int64_t batch, new_store* s) {
  return kvc_store_alloc(c, batch, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &s->k, &s->v);
}

static void free_stores(const kvc_cache* c, new_store* s, uint32_t n) {
  for (uint32_t i = 0; i < n; i++) {
    if (s[i].k) c->backend->free(c->backend->ctx, c->device.device_id, s[i].k);
    if (s[i].v) c->backend->free(c->backend->ctx, c->device.device_id, s[i].v);
  }
  free(s);
}

/* Copies rows src_rows[0..count) of layer `l` into rows 0..count of `dst` (whole capacity, so start/end hold). */
static void gather_into(const kvc_cache* c, const kvc_layer* l, new_store* dst, const int64_t* src_rows,
                        int64_t count) {
  for (int which = 0; which < 2; which++) {
    int64_t ss[4], rs[4];
    kvc_store_strides(l, which, ss);
    row_shape(l, which, rs);
    /* The destination has the same per-row layout (same heads, cap, dim), only another batch. */
    for (int64_t i = 0; i < count; i++)
      c->backend->copy_rows(c->backend->ctx, c->device.device_id, which ? dst->v : dst->k, ss, &i,
                            which ? l->v : l->k, ss, &src_rows[i], 1, rs, l->elem);
  }
}

static void swap_store(const kvc_cache* c, kvc_layer* l, new_store* s, int64_t batch) {
  c->backend->free(c->backend->ctx, c->device.device_id, l->k);
  c->backend->free(c->backend->ctx, c->device.device_id, l->v);
  l->k = s->k;
  l->v = s->v;
  s->k = s->v = NULL;
  l->batch = batch;
  kvc_layer_sync_view(l);
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
static kvc_error* gather_batch(const char* fn, kvc_cache* c, const int64_t* idx, size_t count, int64_t repeats) {
  /* repeats > 0: repeat-interleave (idx unused). */
  uint32_t n = c->num_layers;
  int any = 0;
  for (uint32_t i = 0; i < n; i++) any |= holds_tokens(c->layers[i]);
  if (!any) return NULL; /* nothing stored: indices are not even looked at (transformers skips empty layers) */
  int in_place = repeats == 0;
  for (uint32_t i = 0; i < n && in_place; i++)
    if (holds_tokens(c->layers[i]) && (int64_t)count != c->layers[i]->batch) in_place = 0;

  if (!in_place) {
    new_store* s = (new_store*)calloc(n ? n : 1, sizeof(*s));
    if (!s) return kvc_err_oom();
    int64_t max_rows = 1;
    for (uint32_t i = 0; i < n; i++) {
      kvc_layer* l = c->layers[i];
      if (!holds_tokens(l)) continue;
      int64_t nb = repeats ? l->batch * repeats : (int64_t)count;
      if (nb > max_rows) max_rows = nb;
      if (alloc_store(c, l, nb, &s[i])) {
        free_stores(c, s, n);
        return kvc_err_oom();
      }
    }
    int64_t* rows = (int64_t*)malloc(sizeof(int64_t) * (size_t)max_rows);
    if (!rows) {
      free_stores(c, s, n);
      return kvc_err_oom();
    }
    for (uint32_t i = 0; i < n; i++) {
      kvc_layer* l = c->layers[i];
      if (!holds_tokens(l)) continue;
      int64_t nb = repeats ? l->batch * repeats : (int64_t)count;
      for (int64_t b = 0; b < nb; b++) rows[b] = repeats ? b / repeats : idx[b];
      gather_into(c, l, &s[i], rows, nb);
      swap_store(c, l, &s[i], nb);
    }
    free(rows);
    free_stores(c, s, n);
    return NULL;
  }

  /* In place: only rows with idx[b] != b are written, only their stored region. */
  row_plan plan;
  if (plan_rows(idx, count, &plan)) return kvc_err_oom();
  if (plan.ndirect + plan.nscratch == 0) {
    free(plan.buf);
    return NULL;
  }
  /* One scratch buffer, sized for the largest layer, allocated before anything is written. */
  size_t scratch_bytes = 0;
  for (uint32_t i = 0; i < n; i++) {
    const kvc_layer* l = c->layers[i];
    if (!holds_tokens(l)) continue;
    size_t b = (size_t)(plan.nsaved * l->heads * (l->end - l->start) * (l->k_dim > l->v_dim ? l->k_dim : l->v_dim)) * l->elem;
    if (b > scratch_bytes) scratch_bytes = b;
  }
  void* scratch = NULL;
  if (scratch_bytes) {
    scratch = c->backend->alloc_zeroed(c->backend->ctx, c->device.device_id, scratch_bytes);
    if (!scratch) {
      free(plan.buf);
      return kvc_err_oom();
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer* l = c->layers[i];
    if (!holds_tokens(l) || l->end == l->start) continue; /* a window-1 sliding layer stores nothing to move */
    for (int which = 0; which < 2; which++) {
      int64_t d = which ? l->v_dim : l->k_dim;
      int64_t st[4], shape[4] = {1, l->heads, l->end - l->start, d};
      kvc_store_strides(l, which, st);
      char* base = (char*)(which ? l->v : l->k) + (size_t)(l->start * d) * l->elem;
      int64_t ss[4] = {l->heads * shape[2] * d, shape[2] * d, d, 1}; /* scratch rows: compact [heads, stored, d] */
      const kvc_backend* be = c->backend;
      int32_t dev = c->device.device_id;
      if (plan.nsaved)
        be->copy_rows(be->ctx, dev, scratch, ss, plan.saved_slots, base, st, plan.saved, plan.nsaved, shape, l->elem);
      be->copy_rows(be->ctx, dev, base, st, plan.direct_dst, base, st, plan.direct_src, plan.ndirect, shape, l->elem);
      if (plan.nscratch)
        be->copy_rows(be->ctx, dev, base, st, plan.scratch_dst, scratch, ss, plan.scratch_src, plan.nscratch, shape,
                      l->elem);
    }
    kvc_layer_sync_view(l);
  }
  if (scratch) c->backend->free(c->backend->ctx, c->device.device_id, scratch);
  free(plan.buf);
  (void)fn;
  return NULL;
}

static kvc_error* check_batch_indices(const char* fn, const kvc_cache* c, const char* arg, const int64_t* idx,
                                      size_t count) {
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!holds_tokens(l)) continue;
    kvc_error* e = kvc_check_indices(fn, arg, idx, count, l->batch);
    if (e) return e;
  }
  if (count == 0) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: count is 0; %s needs at least one index", fn, arg);
  if (!idx) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but count is %zu", fn, arg, count);
  return NULL;
}

static kvc_error* require_dynamic(const char* fn, const kvc_cache* c) {
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (kvc_kind_is_static(c->layers[i]->kind))
      return kvc_err(KVC_ERROR_UNSUPPORTED, "%s: layer %u is a %s layer; this operation is only defined for dynamic kinds",
                     fn, i, kvc_kind_name(c->layers[i]->kind));
  return NULL;
}

kvc_error* kvc_batch_check_indices(const char* fn, const kvc_cache* c, const char* arg, const int64_t* idx,
                                   size_t count) {
  return check_batch_indices(fn, c, arg, idx, count);
}

/* The largest batch a repeat-interleave may produce: keeps every size computation far from overflow. */
#define KVC_MAX_BATCH (INT64_C(1) << 31)

kvc_error* kvc_batch_check_repeats(const char* fn, const kvc_cache* c, int64_t repeats) {
  if (repeats < 1) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: repeats is %" PRId64 "; it must be >= 1", fn, repeats);
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (holds_tokens(l) && repeats > KVC_MAX_BATCH / l->batch)
      return kvc_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: repeats is %" PRId64 " but layer %u holds %" PRId64 " rows; the repeated batch must not exceed %" PRId64,
                     fn, repeats, i, l->batch, KVC_MAX_BATCH);
  }
  return NULL;
}

kvc_error* kvc_cache_reorder(kvc_cache* c, const int64_t* beam_idx, size_t count) {
  static const char* FN = "kvc_cache_reorder";
  kvc_error* e = kvc_cache_check(FN, c);
  if (!e) e = check_batch_indices(FN, c, "beam_idx", beam_idx, count);
  if (e) return e;
  return gather_batch(FN, c, beam_idx, count, 0);
}

kvc_error* kvc_cache_batch_select_indices(kvc_cache* c, const int64_t* indices, size_t count) {
  static const char* FN = "kvc_cache_batch_select_indices";
  kvc_error* e = kvc_cache_check(FN, c);
  if (!e) e = require_dynamic(FN, c);
  if (!e) e = check_batch_indices(FN, c, "indices", indices, count);
  if (e) return e;
  return gather_batch(FN, c, indices, count, 0);
}

kvc_error* kvc_cache_batch_repeat_interleave(kvc_cache* c, int64_t repeats) {
  static const char* FN = "kvc_cache_batch_repeat_interleave";
  kvc_error* e = kvc_cache_check(FN, c);
  if (!e) e = require_dynamic(FN, c);
  if (!e) e = kvc_batch_check_repeats(FN, c, repeats);
  if (e) return e;
  if (repeats == 1) return NULL;
  return gather_batch(FN, c, NULL, 0, repeats);
}

/* ------------------------------------------------------------ split/stack */

/* The batch of the initialized layers, -1 if none; error if they disagree. */
static kvc_error* common_batch(const char* fn, const kvc_cache* c, int64_t* out) {
  int64_t b = -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!l->initialized) continue;
    if (b != -1 && l->batch != b)
      return kvc_err(KVC_ERROR_INVALID_STATE, "%s: layer %u has batch %" PRId64 " but earlier layers have %" PRId64,
                     fn, i, l->batch, b);
    b = l->batch;
  }
  *out = b;
  return NULL;
}

/* A copy of `c` holding rows [first, first + rows) of every initialized layer. */
static kvc_error* slice_rows(const kvc_cache* c, int64_t first, int64_t rows, kvc_cache** out) {
  kvc_cache* s = NULL;
  kvc_error* e = kvc_cache_new(&c->device, &s);
  if (e) return e;
  s->lazy = c->lazy;
  int64_t* src = (int64_t*)malloc(sizeof(int64_t) * (size_t)rows);
  if (!src) e = kvc_err_oom();
  for (int64_t r = 0; src && r < rows; r++) src[r] = first + r;
  for (uint32_t i = 0; !e && i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    kvc_layer* n = kvc_layer_shell(l);
    if (!n) {
      e = kvc_err_oom();
      break;
    }
    if (l->initialized) {
      new_store st;
      if (alloc_store(c, l, rows, &st)) {
        free(n);
        e = kvc_err_oom();
        break;
      }
      gather_into(c, l, &st, src, rows);
      n->k = st.k;
      n->v = st.v;
      n->batch = rows;
      kvc_layer_sync_view(n);
    }
    e = kvc_cache_append_layer(s, n);
    if (e) kvc_layer_free(s, n);
  }
  free(src);
  if (e) {
    kvc_cache_destroy(s);
    return e;
  }
  *out = s;
  return NULL;
}

kvc_error* kvc_cache_batch_split(const kvc_cache* c, int64_t full_batch_size, int64_t split_size, kvc_cache** out,
                                 size_t capacity, size_t* count) {
  static const char* FN = "kvc_cache_batch_split";
  kvc_error* e = kvc_cache_check(FN, c);
  if (e) return e;
  if (!out || !count) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, out ? "count" : "out");
  if (split_size < 1)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: split_size is %" PRId64 "; it must be >= 1", FN, split_size);
  int64_t batch = -1;
  if ((e = common_batch(FN, c, &batch))) return e;
  if (batch == -1)
    return kvc_err(KVC_ERROR_INVALID_STATE, "%s: the cache has no initialized layer, so it has no batch to split (full_batch_size %" PRId64 ")", FN, full_batch_size);
  if (full_batch_size != batch)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: full_batch_size is %" PRId64 " but the cache holds %" PRId64
                   " rows; they must be equal",
                   FN, full_batch_size, batch);
  size_t n = (size_t)((batch + split_size - 1) / split_size);
  if (capacity < n)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: capacity is %zu but splitting %" PRId64 " rows by %" PRId64
                   " makes %zu caches; pass room for %zu",
                   FN, capacity, batch, split_size, n, n);
  kvc_cache** made = (kvc_cache**)calloc(n, sizeof(*made));
  if (!made) return kvc_err_oom();
  for (size_t i = 0; i < n && !e; i++) {
    int64_t first = (int64_t)i * split_size;
    int64_t rows = batch - first < split_size ? batch - first : split_size;
    e = slice_rows(c, first, rows, &made[i]);
  }
  if (e) {
    for (size_t i = 0; i < n; i++) kvc_cache_destroy(made[i]);
    free(made);
    return e;
  }
  for (size_t i = 0; i < n; i++) out[i] = made[i];
  free(made);
  *count = n;
  return NULL;
}

static kvc_error* check_compatible(const char* fn, const kvc_cache* a, const kvc_cache* b, size_t which) {
  if (a->num_layers != b->num_layers)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: splits[%zu] has %u layers but splits[0] has %u; splits must have the same layers",
                   fn, which, b->num_layers, a->num_layers);
  if (a->device.device_type != b->device.device_type || a->device.device_id != b->device.device_id)
    return kvc_err(KVC_ERROR_DEVICE_MISMATCH, "%s: splits[%zu] lives on device %d:%d but splits[0] on %d:%d", fn, which,
                   (int)b->device.device_type, (int)b->device.device_id, (int)a->device.device_type,
                   (int)a->device.device_id);
  for (uint32_t i = 0; i < a->num_layers; i++) {
    const kvc_layer *x = a->layers[i], *y = b->layers[i];
#define KVC_SPLIT_DIFF(code, what, fmt, vb, va)                                                                  \
  return kvc_err(code, "%s: layer %u of splits[%zu] has " what " " fmt " but splits[0] has " fmt               \
                 "; splits must agree to be stacked",                                                            \
                 fn, i, which, vb, va)
    if (x->kind != y->kind) KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "kind", "%s", kvc_kind_name(y->kind), kvc_kind_name(x->kind));
    if (x->window != y->window) KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "window", "%" PRId64, y->window, x->window);
    if (x->max_cache_len != y->max_cache_len)
      KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "max_cache_len", "%" PRId64, y->max_cache_len, x->max_cache_len);
    if (!x->initialized != !y->initialized)
      KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "is_initialized", "%d", y->initialized != 0, x->initialized != 0);
    if (!x->initialized) continue;
    if (x->dtype != y->dtype)
      KVC_SPLIT_DIFF(KVC_ERROR_DTYPE_MISMATCH, "dtype", "%s", kvc_dtype_name(y->dtype), kvc_dtype_name(x->dtype));
    if (x->heads != y->heads) KVC_SPLIT_DIFF(KVC_ERROR_SHAPE_MISMATCH, "num_kv_heads", "%" PRId64, y->heads, x->heads);
    if (x->k_dim != y->k_dim) KVC_SPLIT_DIFF(KVC_ERROR_SHAPE_MISMATCH, "k_head_dim", "%" PRId64, y->k_dim, x->k_dim);
    if (x->v_dim != y->v_dim) KVC_SPLIT_DIFF(KVC_ERROR_SHAPE_MISMATCH, "v_head_dim", "%" PRId64, y->v_dim, x->v_dim);
    if (x->end - x->start != y->end - y->start)
      KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "stored length", "%" PRId64, y->end - y->start, x->end - x->start);
    if (x->cum != y->cum) KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "seq_length", "%" PRId64, y->cum, x->cum);
    if (x->record_past != y->record_past)
      KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "past recording", "%d", y->record_past, x->record_past);
#undef KVC_SPLIT_DIFF
  }
  return NULL;
}

kvc_error* kvc_cache_from_batch_splits(const kvc_cache* const* splits, size_t count, kvc_cache** out) {
  static const char* FN = "kvc_cache_from_batch_splits";
  if (!splits || count == 0)
    return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s; pass at least one split", FN,
                   splits ? "count is 0" : "splits is NULL");
  if (!out) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  for (size_t s = 0; s < count; s++) {
    if (!splits[s]) return kvc_err(KVC_ERROR_INVALID_ARGUMENT, "%s: splits[%zu] is NULL", FN, s);
    kvc_error* e = check_compatible(FN, splits[0], splits[s], s);
    if (e) return e;
  }
  const kvc_cache* first = splits[0];
  kvc_cache* r = NULL;
  kvc_error* e = kvc_cache_new(&first->device, &r);
  if (e) return e;
  r->lazy = first->lazy;
  for (uint32_t i = 0; !e && i < first->num_layers; i++) {
    const kvc_layer* l0 = first->layers[i];
    kvc_layer* n = kvc_layer_shell(l0);
    if (!n) {
      e = kvc_err_oom();
      break;
    }
    if (l0->initialized) {
      int64_t batch = 0, cap = 0, len = l0->end - l0->start;
      for (size_t s = 0; s < count; s++) {
        batch += splits[s]->layers[i]->batch;
        if (splits[s]->layers[i]->cap > cap) cap = splits[s]->layers[i]->cap;
      }
      n->batch = batch;
      n->cap = cap;
      new_store st;
      if (alloc_store(r, n, batch, &st)) {
        free(n);
        e = kvc_err_oom();
        break;
      }
      n->k = st.k;
      n->v = st.v;
      /* Each split's stored region goes to [0, len) of its rows: positions are relative to start. */
      int64_t row = 0;
      for (size_t s = 0; s < count; s++) {
        const kvc_layer* l = splits[s]->layers[i];
        for (int which = 0; which < 2; which++) {
          int64_t d = which ? l->v_dim : l->k_dim, ss[4], ds[4];
          kvc_store_strides(l, which, ss);
          kvc_store_strides(n, which, ds);
          int64_t shape[4] = {l->batch, l->heads, len, d};
          r->backend->copy_4d(r->backend->ctx, r->device.device_id,
                              (char*)(which ? n->v : n->k) + (size_t)(row * ds[0]) * n->elem, ds,
                              (const char*)(which ? l->v : l->k) + (size_t)(l->start * d) * l->elem, ss, shape, l->elem);
        }
        row += l->batch;
      }
      n->end -= n->start;
      n->start = 0;
      kvc_layer_sync_view(n);
    }
    e = kvc_cache_append_layer(r, n);
    if (e) kvc_layer_free(r, n);
  }
  if (e) {
    kvc_cache_destroy(r);
    return e;
  }
  *out = r;
  return NULL;
}
