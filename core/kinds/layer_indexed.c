/*
 * core/kinds/layer_indexed.c: the indexed kinds, transformers' DynamicIndexedLayer
 * (5.11) and StaticIndexedLayer (5.24), layer type "indexed_attention"
 * (docs/indexed-layers.md, docs/semantics.md 'Indexed layers'): a dynamic or
 * static full-attention layer plus the keys of a sparse-attention indexer
 * (indexer.h).
 *
 * The K/V part is the dynamic or the static layer's, reached through its ops
 * table the way the linear hybrids reach theirs; the indexer never counts in
 * lengths or mask sizes. What the indexer adds: crop (dynamic: removes
 * tokens as the K/V crop does; static: moves its own counter back), reset
 * (dynamic: dropped, uninitialized again; static: zeroed, counter 0), and
 * its row buffer, which the generic batch, split, stack and clone code moves.
 * Offloading moves the K/V only (docs/differences-from-transformers.md).
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "indexer.h"
#include "persist/record.h"

/* ----------------------------------------------------------------- storage */

static size_t elem_of(const kvc_indexer* x) { return kvc_dtype_size(x->dtype); }

static void sync_ext(kvc_layer* l) {
  kvc_indexer* x = kvci_indexer_of(l);
  if (!x) return;
  x->shape[0] = l->batch;
  x->shape[1] = kvci_layer_is(l, KVC_TRAIT_STATIC) ? x->cap : x->len; /* static: the whole buffer */
  x->shape[2] = x->width;
  x->strides[0] = x->cap * x->width;
  x->strides[1] = x->width;
  x->strides[2] = 1;
}

/* Bytes of one row of `cap` slots, 0 when it overflows. */
static int64_t row_bytes_for(int64_t cap, int64_t width, size_t elem, int64_t batch) {
  int64_t row, all;
  if (__builtin_mul_overflow(cap, width, &row) || __builtin_mul_overflow(row, (int64_t)elem, &row) ||
      __builtin_mul_overflow(row, batch, &all) || all > INT64_MAX / 2)
    return 0;
  return row;
}

kvc_error* kvci_indexer_make_room(const kvc_cache* c, kvc_layer* l, kvc_dtype dtype, int64_t batch, int64_t width,
                                 int64_t n) {
  const kvc_backend* be = c->backend;
  kvc_indexer* old = kvci_indexer_of(l);
  int64_t len = old ? old->len : 0;
  if (old && len + n <= old->cap) return NULL; /* static layers always end here after their first call */
  int64_t cap;
  if (kvci_layer_is(l, KVC_TRAIT_STATIC)) {
    cap = l->slots;
  } else {
    cap = old ? 2 * old->cap : 64;
    if (cap < len + n) cap = len + n;
    if (!old && cap < l->reserve) cap = l->reserve;
  }
  size_t elem = kvc_dtype_size(dtype);
  int64_t row = row_bytes_for(cap, width, elem, batch);
  void* buf = row ? be->alloc_zeroed(be->ctx, &c->exec, (size_t)(row * batch)) : NULL;
  kvc_indexer* x = old ? old : (kvc_indexer*)calloc(1, sizeof *x);
  if (!buf || !x) {
    if (buf) be->free(be->ctx, &c->exec, buf);
    if (x != old) free(x);
    return kvci_err_oom();
  }
  if (old) {
    /* Growth: each row's stored tokens move to the new buffer (one copy over [batch, 1, len, width]). */
    int64_t ss[4] = {old->cap * width, 0, width, 1}, ds[4] = {cap * width, 0, width, 1};
    int64_t shape[4] = {batch, 1, len, width};
    if (len > 0) KVCI_BE(c, copy_4d, buf, ds, old->rows.ptr, ss, shape, elem);
    be->free(be->ctx, &c->exec, old->rows.ptr);
  } else {
    x->dtype = dtype;
    x->width = width;
    x->rows.role = KVC_ROWS_INDEXER;
    l->ext = x;
    l->batch = batch; /* K/V and indexer share the batch (ops_update.c checks a later first K/V update) */
    l->device = c->device;
  }
  x->rows.ptr = buf;
  x->rows.row_bytes = row;
  x->cap = cap;
  sync_ext(l);
  return NULL;
}

void kvci_indexer_append(const kvc_cache* c, kvc_layer* l, const void* src, const int64_t src_strides[4], int64_t n) {
  kvc_indexer* x = kvci_indexer_of(l);
  if (n > 0) {
    int64_t ds[4] = {x->cap * x->width, 0, x->width, 1}, shape[4] = {l->batch, 1, n, x->width};
    size_t at = (size_t)(x->len * x->width) * elem_of(x);
    KVCI_BE(c, copy_4d, (char*)x->rows.ptr + at, ds, src, src_strides, shape, elem_of(x));
  }
  x->len += n;
  sync_ext(l);
}

kvc_span kvci_indexer_span(const kvc_layer* l) {
  kvc_span s = {0, 0};
  const kvc_indexer* x = kvci_indexer_of(l);
  if (!x) return s;
  s.lo = (uintptr_t)x->rows.ptr;
  s.hi = s.lo + (uintptr_t)(x->rows.row_bytes * l->batch);
  return s;
}

void kvci_indexer_view(const kvc_cache* c, const kvc_layer* l, kvc_tensor* out) {
  memset(out, 0, sizeof *out);
  out->device = c->device;
  kvc_indexer* x = kvci_indexer_of(l);
  if (!x) return; /* transformers: indexer_keys is None */
  sync_ext((kvc_layer*)l); /* the generic code may have changed the batch without telling a layer without K/V */
  out->data = x->rows.ptr;
  out->ndim = 3;
  out->dtype = kvc_dtype_to_data_type(x->dtype);
  out->shape = x->shape;
  out->strides = x->strides;
}

/* ------------------------------------------------------- the kinds' ops */

/* The K/V part: the dynamic or the static layer's table (kvc_kind.store_ops). */
static const kvc_layer_ops* kv_ops(const kvc_layer* l) { return l->desc->store_ops; }
static int64_t max_length(const kvc_layer* l) { return kv_ops(l)->max_length(l); }

/*
 * crop(t): the K/V as the base kind crops them, then the indexer. Dynamic:
 * t < 0 removes |t| tokens (clamped at none left), t > 0 keeps the first t
 * (the legacy absolute length, as for the K/V). Static: the counter as the
 * static K/V counter moves (clamped at 0); the slots stay.
 */
static void apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  kv_ops(l)->apply_crop(c, l, tokens);
  kvc_indexer* x = kvci_indexer_of(l);
  if (!x || tokens == 0) return;
  if (kvci_layer_is(l, KVC_TRAIT_STATIC)) {
    x->len = kvci_static_crop_counter(x->len, tokens);
  } else {
    int64_t keep = tokens > 0 ? tokens : (tokens < -x->len ? 0 : x->len + tokens);
    if (keep < x->len) x->len = keep;
  }
  sync_ext(l);
}

static void ext_free(const kvc_cache* c, kvc_layer* l) {
  kvci_layer_rows_free(c, l);
  free(l->ext);
  l->ext = NULL;
}

/* Dynamic: the indexer is dropped (a new dtype or width may come); static: zeroed, counter 0, still allocated. */
static void reset(const kvc_cache* c, kvc_layer* l) {
  kv_ops(l)->reset(c, l);
  kvc_indexer* x = kvci_indexer_of(l);
  if (!x) return;
  if (!kvci_layer_is(l, KVC_TRAIT_STATIC)) {
    ext_free(c, l);
    if (!l->initialized) l->batch = 0;
    return;
  }
  int64_t st[4] = {x->rows.row_bytes, x->rows.row_bytes, x->rows.row_bytes, 1};
  int64_t shape[4] = {l->batch, 1, 1, x->rows.row_bytes};
  KVCI_BE(c, fill_zero_4d, x->rows.ptr, st, shape, 1);
  x->len = 0;
}

static int row_buffers(kvc_layer* l, kvc_row_buffer** out) {
  *out = &kvci_indexer_of(l)->rows;
  return 1;
}

static int ext_shell(const kvc_layer* src, kvc_layer* dst) {
  kvc_indexer* x = (kvc_indexer*)malloc(sizeof *x);
  if (!x) return -1;
  *x = *kvci_indexer_of(src);
  x->rows.ptr = NULL;
  dst->ext = x;
  return 0;
}

/* Files: the indexer's geometry and length; its keys are the row buffer. */
static void ext_save(const kvc_layer* l, kvci_record* r) {
  const kvc_indexer* x = kvci_indexer_of(l);
  kvci_rec_i64(r, x->dtype);
  kvci_rec_i64(r, x->width);
  kvci_rec_i64(r, x->cap);
  kvci_rec_i64(r, x->len);
}

static kvc_error* ext_load(const char* fn, kvc_layer* l, kvci_record_reader* in) {
  int64_t dtype, width, cap, len;
  if (kvci_rec_get_range(in, 1, 3, &dtype) || kvci_rec_get_range(in, 1, INT32_MAX, &width) ||
      kvci_rec_get_range(in, 0, INT32_MAX, &cap) || kvci_rec_get_range(in, 0, cap, &len))
    return kvci_err(KVC_ERROR_IO, "%s: the indexed layer's indexer record is malformed", fn);
  kvc_indexer* x = (kvc_indexer*)calloc(1, sizeof *x);
  if (!x) return kvci_err_oom();
  x->rows.role = KVC_ROWS_INDEXER;
  x->dtype = (kvc_dtype)dtype;
  x->width = width;
  x->cap = cap;
  x->len = len;
  l->ext = x;
  return NULL;
}

/*
 * The indexer's keys are one row buffer of cap x width elements per batch row (allocate above); appends write at
 * len < cap. A layer without indexer keys yet has neither capacity nor length.
 */
static kvc_error* check_indexer(const char* fn, const char* where, const kvc_layer* l) {
  const kvc_indexer* x = kvci_indexer_of(l);
  if (!x) return NULL;
  if (!x->rows.ptr) {
    if (x->cap || x->len)
      return kvci_loaded_refuse(fn, where, "the indexer's capacity", x->cap,
                                "an indexer without keys (no row buffer) has capacity and length 0");
    return NULL;
  }
  int64_t row = row_bytes_for(x->cap, x->width, kvc_dtype_size(x->dtype), l->batch);
  if (x->rows.row_bytes != row)
    return kvci_loaded_refuse(fn, where, "the indexer's row bytes", x->rows.row_bytes,
                              "an indexer of capacity %" PRId64 ", width %" PRId64 " and dtype %s over batch %" PRId64
                              " has rows of %" PRId64 " bytes",
                              x->cap, x->width, kvci_dtype_name(x->dtype), l->batch, row);
  return NULL;
}

static kvc_error* check_loaded_dynamic(const char* fn, const char* where, const kvc_layer* l) {
  return check_indexer(fn, where, l);
}

static kvc_error* check_loaded_static(const char* fn, const char* where, const kvc_layer* l) {
  kvc_error* e = check_indexer(fn, where, l);
  return e ? e : kvci_static_check_loaded(fn, where, l);
}

static kvc_error* check_stack(const char* fn, const kvc_layer* first, const kvc_layer* other, uint32_t index,
                              size_t which) {
  const kvc_indexer *a = kvci_indexer_of(first), *b = kvci_indexer_of(other);
  const char* what = NULL;
  int64_t va = 0, vb = 0;
  if (!a != !b) {
    what = "an initialized indexer", va = a != NULL, vb = b != NULL;
  } else if (a && a->dtype != b->dtype) {
    return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                    "%s: layer %u of splits[%zu] has indexer dtype %s but splits[0] has %s; splits must agree to be "
                    "stacked",
                    fn, index, which, kvci_dtype_name(b->dtype), kvci_dtype_name(a->dtype));
  } else if (a && a->width != b->width) {
    what = "index_head_dim", va = a->width, vb = b->width;
  } else if (a && a->len != b->len) {
    what = "indexer length", va = a->len, vb = b->len;
  } else if (a && a->cap != b->cap) {
    what = "indexer capacity", va = a->cap, vb = b->cap;
  }
  if (!what) return NULL;
  return kvci_err(KVC_ERROR_INVALID_STATE,
                  "%s: layer %u of splits[%zu] has %s %" PRId64 " but splits[0] has %" PRId64
                  "; splits must agree to be stacked",
                  fn, index, which, what, vb, va);
}

/* Alike by design: the linear kind's table lists the same entries, filled with its own functions. */
static const kvc_layer_ops indexed_ops = {
    KVC_STORE_DELEGATE_OPS,
    .max_length = max_length,
    .check_crop = kvci_crop_allowed,
    .apply_crop = apply_crop,
    .reset = reset,
    .row_buffers = row_buffers,
    KVC_OWN_STATE_OPS,
    .sync_ext = sync_ext,
};

/* An indexed kind: the traits, capacity and crop rule of the store kind it adds the indexer to. */
#define KVC_INDEXED_KIND(ID, NAME, TRAITS, STORE, CAPACITY, IS_CROPPABLE, CHECK_LOADED)                     \
  {                                                                                                       \
    .id = ID, .name = NAME, .traits = KVC_TRAIT_HAS_KV | (TRAITS), .ops = &indexed_ops, .store_ops = &(STORE), \
    .capacity = CAPACITY, .is_croppable = IS_CROPPABLE, .check_loaded = CHECK_LOADED,                     \
  }

const kvc_kind kvc_dynamic_indexed_kind =
    KVC_INDEXED_KIND(KVC_LAYER_DYNAMIC_INDEXED, "dynamic indexed", KVC_TRAIT_OFFLOADS | KVC_TRAIT_RESERVABLE,
                     kvc_dynamic_layer_ops, NULL, NULL, check_loaded_dynamic);
const kvc_kind kvc_static_indexed_kind =
    KVC_INDEXED_KIND(KVC_LAYER_STATIC_INDEXED, "static indexed", KVC_TRAIT_STATIC | KVC_TRAIT_OFFLOADS,
                     kvc_static_layer_ops, kvci_capacity_slots, kvci_static_is_croppable, check_loaded_static);
