/*
 * core/cache/ops_split.c: batch_split and from_batch_splits: a cache cut into
 * row ranges, and row ranges stacked back into one cache.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

/*
 * Shared entry on the caches a call reads together (kvc_cache_from_batch_splits' splits; NULL array or
 * entries are skipped: the call refuses them). On a refusal none is held.
 */
static void kvci_guard_unshare_caches(const kvc_cache* const* caches, size_t count);

static kvc_error* kvci_guard_share_caches(const kvc_cache* const* caches, size_t count, const char* fn) {
  for (size_t i = 0; caches && i < count; i++) {
    kvci_guard_entry entry = kvci_guard_enter_shared(kvci_guard_of(caches[i]));
    if (entry.seen) {
      kvci_guard_unshare_caches(caches, i);
      return kvci_guard_busy(kvci_guard_of(caches[i]), &entry, fn);
    }
  }
  return NULL;
}

static void kvci_guard_unshare_caches(const kvc_cache* const* caches, size_t count) {
  for (size_t i = 0; caches && i < count; i++) {
    kvci_guard_entry entry = {kvci_guard_of(caches[i]), 1, 0, 0};
    kvci_guard_leave(&entry);
  }
}

/* The batch of the initialized layers, -1 if none; error if they disagree. */
static kvc_error* common_batch(const char* fn, const kvc_cache* c, int64_t* out) {
  int64_t b = -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!l->initialized && !kvci_layer_row_bytes(l, 0)) continue;
    if (b != -1 && l->batch != b)
      return kvci_err(KVC_ERROR_INVALID_STATE, "%s: layer %u has batch %" PRId64 " but earlier layers have %" PRId64,
                     fn, i, l->batch, b);
    b = l->batch;
  }
  *out = b;
  return NULL;
}

/*
 * A cache derived from `src` (split, stack): each layer a shell of src's
 * that fill() completes (rows, store) from the caches in ctx; fill returns
 * -1 when out of memory, and the shell, which owns no store, is freed.
 */
typedef int (*fill_layer)(const kvc_cache* dst, kvc_layer* n, uint32_t i, const void* ctx);
static kvc_error* derive(const char* fn, const kvc_cache* src, fill_layer fill, const void* ctx, kvc_cache** out) {
  kvc_cache* d = NULL;
  kvc_error* e = kvci_cache_new_like(src, &d);
  if (e) return e;
  for (uint32_t i = 0; !e && i < src->num_layers; i++) {
    kvc_layer* n = kvci_layer_shell(src->layers[i]);
    if (n && fill(d, n, i, ctx)) {
      n->initialized = 0;
      kvci_layer_free(d, n);
      n = NULL;
    }
    e = n ? kvci_cache_append_layer(d, n) : kvci_err_oom();
  }
  /* The copies ran on the new cache's place (a stack) or on the source's (a split), which they only read. */
  if (!e) e = kvci_fault_discard(fn, &d->fault, d->backend, "no cache was made; the source caches are unchanged");
  if (!e)
    e = kvci_fault_discard(fn, (kvci_fault*)&src->fault, src->backend,
                           "no cache was made; the source caches are unchanged");
  if (e) {
    kvc_cache_destroy(d);
    return e;
  }
  *out = d;
  return NULL;
}

/* Rows src[0..rows) of the source cache's layers. */
typedef struct slice {
  const kvc_cache* c;
  const int64_t* src;
  int64_t rows;
} slice;

static int fill_slice(const kvc_cache* dst, kvc_layer* n, uint32_t i, const void* ctx) {
  (void)dst;
  const slice* sl = (const slice*)ctx;
  const kvc_cache* c = sl->c;
  const kvc_layer* l = c->layers[i];
  const int64_t rows = sl->rows;
  if (n->ext) {
    /* Only rows that exist are split: a layer whose kind state holds none (a quantized layer whose first
     * update failed) keeps its batch, 0 while it has no storage, as the source does. */
    if (kvci_layer_row_bytes(l, 0)) n->batch = rows;
    if (kvci_layer_rows_copy_new(c, l, n, sl->src, rows)) return -1;
    kvci_layer_sync_view(n);
  }
  if (l->initialized) {
    if (kvci_store_alloc(c, rows, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &n->k, &n->v)) return -1;
    kvci_layer_copy_rows_to(c, l, n->k, n->v, sl->src, rows);
    n->batch = rows;
    kvci_layer_sync_view(n);
  }
  return 0;
}

/* A copy of `c` holding rows [first, first + rows) of every initialized layer. */
static kvc_error* slice_rows(const kvc_cache* c, int64_t first, int64_t rows, kvc_cache** out) {
  int64_t* src = (int64_t*)malloc(sizeof(int64_t) * (size_t)rows);
  if (!src) return kvci_err_oom();
  for (int64_t r = 0; r < rows; r++) src[r] = first + r;
  slice sl = {c, src, rows};
  kvc_error* e = derive("kvc_cache_batch_split", c, fill_slice, &sl, out);
  free(src);
  return e;
}

kvc_error* kvc_cache_batch_split(const kvc_cache* c, int64_t full_batch_size, int64_t split_size, kvc_cache** out,
                                 size_t capacity, size_t* count) {
  static const char* FN = "kvc_cache_batch_split";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (!e) e = kvci_batch_check_kinds(FN, c, KVC_BATCH_SPLIT);
  if (e) return e;
  kvci_offload_settle(c);
  if ((e = kvci_cache_result(FN, c, NULL))) return e;
  if (!out || !count) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, out ? "count" : "out");
  if (split_size < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: split_size is %" PRId64 "; it must be >= 1", FN, split_size);
  int64_t batch = -1;
  if ((e = common_batch(FN, c, &batch))) return e;
  if (batch == -1)
    return kvci_err(KVC_ERROR_INVALID_STATE, "%s: the cache has no initialized layer, so it has no batch to split (full_batch_size %" PRId64 ")", FN, full_batch_size);
  if (full_batch_size != batch)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: full_batch_size is %" PRId64 " but the cache holds %" PRId64
                   " rows; they must be equal",
                   FN, full_batch_size, batch);
  /* Rounded up without batch + split_size - 1, which overflows for a split_size near INT64_MAX. */
  size_t n = (size_t)(batch / split_size + (batch % split_size != 0));
  if (capacity < n)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: capacity is %zu but splitting %" PRId64 " rows by %" PRId64
                   " makes %zu caches; pass room for %zu",
                   FN, capacity, batch, split_size, n, n);
  kvc_cache** made = (kvc_cache**)calloc(n, sizeof(*made));
  if (!made) return kvci_err_oom();
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
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: splits[%zu] has %u layers but splits[0] has %u; splits must have the same layers",
                   fn, which, b->num_layers, a->num_layers);
  if (a->device.device_type != b->device.device_type || a->device.device_id != b->device.device_id)
    return kvci_err(KVC_ERROR_DEVICE_MISMATCH, "%s: splits[%zu] lives on device %d:%d but splits[0] on %d:%d", fn, which,
                   (int)b->device.device_type, (int)b->device.device_id, (int)a->device.device_type,
                   (int)a->device.device_id);
  for (uint32_t i = 0; i < a->num_layers; i++) {
    const kvc_layer *x = a->layers[i], *y = b->layers[i];
#define KVC_SPLIT_DIFF(code, what, fmt, vb, va)                                                                  \
  return kvci_err(code, "%s: layer %u of splits[%zu] has " what " " fmt " but splits[0] has " fmt               \
                 "; splits must agree to be stacked",                                                            \
                 fn, i, which, vb, va)
    if (x->kind != y->kind) KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "kind", "%s", y->desc->name, x->desc->name);
    if (x->ops->check_stack) {
      kvc_error* e = x->ops->check_stack(fn, x, y, i, which);
      if (e) return e;
    }
    if (x->window != y->window) KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "window", "%" PRId64, y->window, x->window);
    if (x->max_cache_len != y->max_cache_len)
      KVC_SPLIT_DIFF(KVC_ERROR_INVALID_ARGUMENT, "max_cache_len", "%" PRId64, y->max_cache_len, x->max_cache_len);
    kvc_row_buffer *xr = NULL, *yr = NULL;
    int nx = kvci_layer_rows((kvc_layer*)x, &xr), ny = kvci_layer_rows((kvc_layer*)y, &yr);
    if (nx != ny) KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "state buffers", "%d", ny, nx);
    for (int r = 0; r < nx; r++) {
      if (!xr[r].ptr != !yr[r].ptr)
        KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "a state buffer allocated", "%d", yr[r].ptr != NULL, xr[r].ptr != NULL);
      if (xr[r].row_bytes != yr[r].row_bytes)
        KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "state row bytes", "%" PRId64, yr[r].row_bytes, xr[r].row_bytes);
    }
    if (!x->initialized != !y->initialized)
      KVC_SPLIT_DIFF(KVC_ERROR_INVALID_STATE, "is_initialized", "%d", y->initialized != 0, x->initialized != 0);
    if (!x->initialized) continue;
    if (x->dtype != y->dtype)
      KVC_SPLIT_DIFF(KVC_ERROR_DTYPE_MISMATCH, "dtype", "%s", kvci_dtype_name(y->dtype), kvci_dtype_name(x->dtype));
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

/* Row buffers of layer i of every split, stacked into the shell `n` (whose ptrs are NULL). */
static int stack_rows(const kvc_cache* r, const kvc_cache* const* splits, size_t count, uint32_t i, kvc_layer* n) {
  kvc_row_buffer* nr = NULL;
  int nb = kvci_layer_rows(n, &nr);
  int64_t batch = 0;
  for (size_t s = 0; s < count; s++) batch += splits[s]->layers[i]->batch;
  n->batch = batch;
  const kvc_backend* be = r->backend;
  for (int b = 0; b < nb; b++) {
    kvc_row_buffer* src0 = NULL;
    kvci_layer_rows(splits[0]->layers[i], &src0);
    if (!src0[b].ptr) continue;
    nr[b].ptr = be->alloc_zeroed(be->ctx, &r->exec, (size_t)(src0[b].row_bytes * batch));
    if (!nr[b].ptr) return -1;
    int64_t row = 0;
    for (size_t s = 0; s < count; s++) {
      const kvc_layer* l = splits[s]->layers[i];
      kvc_row_buffer* sr = NULL;
      kvci_layer_rows((kvc_layer*)l, &sr);
      int64_t st[4] = {sr[b].row_bytes, sr[b].row_bytes, sr[b].row_bytes, 1};
      int64_t shape[4] = {l->batch, 1, 1, sr[b].row_bytes};
      KVCI_BE(r, copy_4d, (char*)nr[b].ptr + row * sr[b].row_bytes, st, sr[b].ptr, st, shape, 1);
      row += l->batch;
    }
  }
  return 0;
}

/* Layer i of every split, stacked along the batch. */
typedef struct stack {
  const kvc_cache* const* splits;
  size_t count;
} stack;

static int fill_stack(const kvc_cache* r, kvc_layer* n, uint32_t i, const void* ctx) {
  const stack* st = (const stack*)ctx;
  const kvc_cache* const* splits = st->splits;
  const size_t count = st->count;
  const kvc_layer* l0 = splits[0]->layers[i];
  if (n->ext && stack_rows(r, splits, count, i, n)) return -1;
  if (n->ext) kvci_layer_sync_view(n);
  if (l0->initialized) {
    int64_t batch = 0, cap = 0, len = l0->end - l0->start;
    for (size_t s = 0; s < count; s++) {
      batch += splits[s]->layers[i]->batch;
      if (splits[s]->layers[i]->cap > cap) cap = splits[s]->layers[i]->cap;
    }
    n->batch = batch;
    n->cap = cap;
    if (kvci_store_alloc(r, batch, n->heads, n->cap, n->k_dim, n->v_dim, n->elem, &n->k, &n->v)) return -1;
    /* Each split's stored region goes to [0, len) of its rows: positions are relative to start. */
    int64_t row = 0;
    for (size_t s = 0; s < count; s++) {
      const kvc_layer* l = splits[s]->layers[i];
      for (int which = 0; which < 2; which++) {
        int64_t d = which ? l->v_dim : l->k_dim, ss[4], ds[4];
        kvci_store_strides(l, which, ss);
        kvci_store_strides(n, which, ds);
        int64_t shape[4] = {l->batch, l->heads, len, d};
        KVCI_BE(r, copy_4d, (char*)(which ? n->v : n->k) + (size_t)(row * ds[0]) * n->elem, ds,
                (const char*)(which ? l->v : l->k) + (size_t)(l->start * d) * l->elem, ss, shape, l->elem);
      }
      row += l->batch;
    }
    n->end -= n->start;
    n->start = 0;
    kvci_layer_sync_view(n);
  }
  return 0;
}

static kvc_error* from_batch_splits(const kvc_cache* const* splits, size_t count, kvc_cache** out);

kvc_error* kvc_cache_from_batch_splits(const kvc_cache* const* splits, size_t count, kvc_cache** out) {
  kvc_error* e = kvci_guard_share_caches(splits, count, "kvc_cache_from_batch_splits");
  if (e) return e;
  e = from_batch_splits(splits, count, out);
  kvci_guard_unshare_caches(splits, count);
  return e;
}

static kvc_error* from_batch_splits(const kvc_cache* const* splits, size_t count, kvc_cache** out) {
  static const char* FN = "kvc_cache_from_batch_splits";
  if (!splits || count == 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s; pass at least one split", FN,
                   splits ? "count is 0" : "splits is NULL");
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  for (size_t s = 0; s < count; s++) {
    if (!splits[s]) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: splits[%zu] is NULL", FN, s);
    kvc_error* e = kvci_cache_check(FN, splits[s]); /* a poisoned split is refused */
    if (!e) e = check_compatible(FN, splits[0], splits[s], s);
    if (!e) e = kvci_batch_check_kinds(FN, splits[s], KVC_BATCH_STACK);
    if (!e && splits[s]->exec.stream != splits[0]->exec.stream)
      /* The stack reads every split on one stream: work still queued on another could be missed. */
      e = kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                  "%s: splits[%zu] is bound to stream %p but splits[0] to stream %p; bind the splits to one stream "
                  "(kvc_cache_set_stream) before stacking them",
                  FN, s, splits[s]->exec.stream, splits[0]->exec.stream);
    if (e) return e;
  }
  for (size_t s = 0; s < count; s++) {
    kvci_offload_settle(splits[s]);
    kvc_error* e = kvci_cache_result(FN, splits[s], NULL);
    if (e) return e;
  }
  stack st = {splits, count};
  return derive(FN, splits[0], fill_stack, &st, out);
}
