/*
 * core/model/layer.c: what every layer kind shares: its store (allocation,
 * geometric growth, compaction), writing tokens, and view descriptors.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

kvc_device kvci_tier_device(const kvc_layer* l) {
  kvc_device d = l->device;
  if (!l->offloaded) return d;
  /* DLPack's names for pinned host memory of a GPU: what the host tier is on those backends. */
  if (d.device_type == KVC_DEVICE_CUDA) d.device_type = KVC_DEVICE_CUDA_HOST;
  if (d.device_type == KVC_DEVICE_ROCM) d.device_type = KVC_DEVICE_ROCM_HOST;
  return d;
}

void kvci_layer_uninitialize(const kvc_cache* cache, kvc_layer* l) {
  kvci_alias_index_touch(cache);
  kvci_store_free(cache, l->offloaded, l->k, l->v);
  l->k = l->v = NULL;
  l->offloaded = 0; /* no store, no tier: the next initialization allocates on the device */
  l->initialized = 0;
  l->dtype = KVC_DTYPE_UNSET;
  l->elem = 0;
  if (!kvci_layer_row_bytes(l, 0)) l->batch = 0; /* allocated recurrent states keep the batch */
  l->heads = l->k_dim = l->v_dim = 0;
  l->cap = l->start = l->end = 0;
  l->cum = 0;
  memset(l->views, 0, sizeof l->views);
}

void kvci_layer_free(const kvc_cache* cache, kvc_layer* l) {
  if (!l) return;
  kvci_layer_uninitialize(cache, l);
  if (l->ext && l->ops->ext_free) l->ops->ext_free(cache, l);
  l->ext = NULL;
  free(l);
}

void kvci_store_strides(const kvc_layer* l, int which, int64_t out[4]) {
  int64_t d = which ? l->v_dim : l->k_dim;
  out[3] = 1;
  out[2] = d;
  out[1] = l->cap * d;
  out[0] = l->heads * l->cap * d;
}

/* b*h*cap*d*elem in bytes, or 0 if that overflows (then the allocation is refused as out of memory). */
static size_t store_bytes(int64_t b, int64_t h, int64_t cap, int64_t d, size_t elem) {
  uint64_t n = 1;
  const uint64_t f[5] = {(uint64_t)b, (uint64_t)h, (uint64_t)cap, (uint64_t)d, (uint64_t)elem};
  for (int i = 0; i < 5; i++)
    if (__builtin_mul_overflow(n, f[i], &n)) return 0;
  return n > (uint64_t)SIZE_MAX / 2 ? 0 : (size_t)n;
}

static int store_alloc_with(const kvc_cache* c, int host, void* (*alloc)(void*, const kvc_exec*, size_t), int64_t batch,
                            int64_t heads, int64_t cap, int64_t kd, int64_t vd, size_t elem, void** k, void** v) {
  size_t kb = store_bytes(batch, heads, cap, kd, elem), vb = store_bytes(batch, heads, cap, vd, elem);
  const kvc_backend* be = c->backend;
  *k = *v = NULL;
  if (!kb || !vb) return -1;
  *k = alloc(be->ctx, &c->exec, kb);
  *v = alloc(be->ctx, &c->exec, vb);
  if (*k && *v) return 0;
  kvci_store_free(c, host, *k, *v);
  *k = *v = NULL;
  return -1;
}

/* A device-tier store from the caller's allocator (zeroed or not): the store allocation of a cache that has one. */
static int store_alloc_caller(const kvc_cache* c, int zeroed, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                              int64_t vd, size_t elem, void** k, void** v) {
  size_t kb = store_bytes(batch, heads, cap, kd, elem), vb = store_bytes(batch, heads, cap, vd, elem);
  *k = *v = NULL;
  if (!kb || !vb) return -1;
  *k = kvci_allocator_take(c->allocator, c->backend, &c->exec, c->device, kb, zeroed);
  *v = *k ? kvci_allocator_take(c->allocator, c->backend, &c->exec, c->device, vb, zeroed) : NULL;
  if (*v) return 0;
  kvci_store_free(c, 0, *k, NULL);
  *k = NULL;
  return -1;
}

int kvci_store_alloc_tier(const kvc_cache* c, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                         int64_t vd, size_t elem, void** k, void** v) {
  const kvc_backend* be = c->backend;
  if (!host && c->allocator) return store_alloc_caller(c, 1, batch, heads, cap, kd, vd, elem, k, v);
  return store_alloc_with(c, host, host ? be->host_alloc_zeroed : be->alloc_zeroed, batch, heads, cap, kd, vd, elem, k,
                          v);
}

int kvci_store_alloc_unset(const kvc_cache* c, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                           int64_t vd, size_t elem, void** k, void** v) {
  const kvc_backend* be = c->backend;
  if (!host && c->allocator) return store_alloc_caller(c, 0, batch, heads, cap, kd, vd, elem, k, v);
  void* (*alloc)(void*, const kvc_exec*, size_t) = host ? be->host_alloc : be->alloc;
  if (!alloc) return kvci_store_alloc_tier(c, host, batch, heads, cap, kd, vd, elem, k, v);
  return store_alloc_with(c, host, alloc, batch, heads, cap, kd, vd, elem, k, v);
}

int kvci_store_alloc_to_fill(const kvc_cache* c, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                            int64_t vd, size_t elem, void** k, void** v) {
  return host ? kvci_store_alloc_unset(c, 1, batch, heads, cap, kd, vd, elem, k, v)
              : kvci_store_alloc_tier(c, 0, batch, heads, cap, kd, vd, elem, k, v);
}

int kvci_store_alloc(const kvc_cache* c, int64_t batch, int64_t heads, int64_t cap, int64_t kd, int64_t vd,
                    size_t elem, void** k, void** v) {
  return kvci_store_alloc_tier(c, 0, batch, heads, cap, kd, vd, elem, k, v);
}

void kvci_store_free(const kvc_cache* c, int host, void* k, void* v) {
  const kvc_backend* be = c->backend;
  void (*release)(void*, const kvc_exec*, void*) = host ? be->host_free : be->free;
  /* A device-tier buffer the caller's allocator did not make (none does today) is still the backend's. */
  int caller = !host && c->allocator;
  if (k && !(caller && kvci_allocator_give(c->allocator, &c->exec, c->device, k))) release(be->ctx, &c->exec, k);
  if (v && !(caller && kvci_allocator_give(c->allocator, &c->exec, c->device, v))) release(be->ctx, &c->exec, v);
}

/* The error of a failed store allocation. A caller's allocator is told apart from the heap: it refused the bytes
 * named (what the engine's arena or pool must make room for). */
static kvc_error* store_refused(const kvc_cache* c, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                                int64_t vd, size_t elem) {
  if (host || !c->allocator) return kvci_err_oom();
  return kvci_err(KVC_ERROR_OUT_OF_MEMORY,
                  "the caller's allocator (options->allocator) gave no memory for a K/V store of %zu + %zu bytes "
                  "(batch %" PRId64 ", heads %" PRId64 ", %" PRId64 " slots, head dims %" PRId64 "/%" PRId64
                  ", %zu-byte elements)",
                  store_bytes(batch, heads, cap, kd, elem), store_bytes(batch, heads, cap, vd, elem), batch, heads,
                  cap, kd, vd, elem);
}

kvc_error* kvci_layer_initialize(const kvc_cache* c, kvc_layer* l, kvc_dtype dtype, int64_t batch, int64_t heads,
                                int64_t kd, int64_t vd, int64_t n_first) {
  kvc_layer probe = *l;
  probe.dtype = dtype;
  int64_t cap = l->ops->initial_capacity(&probe, n_first);
  size_t elem = kvc_dtype_size(dtype);
  void *k, *v;
  if (kvci_store_alloc(c, batch, heads, cap, kd, vd, elem, &k, &v))
    return store_refused(c, 0, batch, heads, cap, kd, vd, elem);
  kvci_alias_index_touch(c);
  l->k = k;
  l->v = v;
  l->cap = cap;
  l->dtype = dtype;
  l->elem = elem;
  l->batch = batch;
  l->heads = heads;
  l->k_dim = kd;
  l->v_dim = vd;
  l->initialized = 1;
  l->device = c->device;
  l->cum = 0;
  /* Static kinds expose their whole buffer from the start; dynamic kinds an empty region. */
  l->start = 0;
  l->end = kvci_layer_is(l, KVC_TRAIT_STATIC) ? l->slots : 0;
  kvci_layer_sync_view(l);
  return NULL;
}

/* Moves [keep.begin, keep.end) to slot 0 of `dst` (which may be the store itself). */
static void move_region(const kvc_cache* c, const kvc_layer* l, void* dk, void* dv, int64_t dcap, kvc_region keep) {
  int64_t len = keep.end - keep.begin;
  for (int which = 0; which < 2; which++) {
    int64_t d = which ? l->v_dim : l->k_dim;
    int64_t ss[4], ds[4] = {l->heads * dcap * d, dcap * d, d, 1};
    kvci_store_strides(l, which, ss);
    int64_t shape[4] = {l->batch, l->heads, len, d};
    const char* src = (const char*)(which ? l->v : l->k) + (size_t)(keep.begin * d) * l->elem;
    KVCI_BE(c, copy_4d, which ? dv : dk, ds, src, ss, shape, l->elem);
  }
}

void kvci_layer_adopt_store(const kvc_cache* c, kvc_layer* l, void* k, void* v, int64_t cap, kvc_region keep) {
  move_region(c, l, k, v, cap, keep);
  kvci_store_free(c, l->offloaded, l->k, l->v); /* the new store is in the same tier (kvci_store_alloc_tier) */
  kvci_alias_index_touch(c);
  l->k = k;
  l->v = v;
  l->cap = cap;
  l->start -= keep.begin;
  l->end -= keep.begin;
  kvci_layer_sync_view(l);
}

int64_t kvci_layer_reserved_capacity(const kvc_layer* l, kvc_region keep, int64_t extra) {
  int64_t len = keep.end - keep.begin;
  if (keep.end + extra <= l->cap || (len + extra <= l->cap && keep.begin > 0)) return l->cap; /* fits, or compacts */
  return l->cap * 2 < len + extra ? len + extra : l->cap * 2;
}

kvc_error* kvci_layer_reserve(const kvc_cache* c, kvc_layer* l, kvc_region keep, int64_t extra) {
  int64_t len = keep.end - keep.begin;
  if (keep.end + extra <= l->cap) return NULL;
  if (len + extra <= l->cap && keep.begin > 0) {
    /* Compaction: amortized O(1) per token because it happens once per (cap - len) appended tokens. */
    move_region(c, l, l->k, l->v, l->cap, keep);
  } else {
    int64_t cap = kvci_layer_reserved_capacity(l, keep, extra);
    void *k, *v;
    if (kvci_store_alloc_tier(c, l->offloaded, l->batch, l->heads, cap, l->k_dim, l->v_dim, l->elem, &k, &v))
      return store_refused(c, l->offloaded, l->batch, l->heads, cap, l->k_dim, l->v_dim, l->elem);
    kvci_layer_adopt_store(c, l, k, v, cap, keep);
    return NULL;
  }
  /* Slots beyond the kept region may hold stale tokens after a move: static kinds rely on zeros there. */
  l->start -= keep.begin;
  l->end -= keep.begin;
  if (kvci_layer_is(l, KVC_TRAIT_STATIC)) kvci_layer_zero(c, l, (kvc_region){len, l->cap});
  kvci_layer_sync_view(l);
  return NULL;
}

void kvci_layer_zero(const kvc_cache* c, kvc_layer* l, kvc_region r) {
  if (r.end <= r.begin) return;
  for (int which = 0; which < 2; which++) {
    int64_t d = which ? l->v_dim : l->k_dim, st[4];
    kvci_store_strides(l, which, st);
    int64_t shape[4] = {l->batch, l->heads, r.end - r.begin, d};
    char* base = (char*)(which ? l->v : l->k) + (size_t)(r.begin * d) * l->elem;
    KVCI_BE(c, fill_zero_4d, base, st, shape, l->elem);
  }
}

void kvci_layer_write(const kvc_cache* c, kvc_layer* l, const kvc_tensor* key, const kvc_tensor* value, int64_t slot,
                     const int64_t* positions, int64_t n) {
  /* Gathered copies run in any order: a position written twice must keep the later token, so such a call
     issues its copies one by one, in order, after everything gathered before. */
  int increasing = 1;
  for (int64_t j = 1; positions && j < n; j++)
    if (positions[j] <= positions[j - 1]) increasing = 0;
  if (!increasing) kvci_copy_batch_drain(c);
  for (int which = 0; which < 2; which++) {
    const kvc_tensor* t = which ? value : key;
    int64_t d = which ? l->v_dim : l->k_dim, ds[4], ss[4];
    kvci_store_strides(l, which, ds);
    kvci_tensor_strides(t, ss);
    char* base = (char*)(which ? l->v : l->k);
    const char* src = (const char*)kvci_tensor_base(t);
    if (!positions) {
      int64_t shape[4] = {l->batch, l->heads, n, d};
      kvci_copy_4d_issue(c, base + (size_t)(slot * d) * l->elem, ds, src, ss, shape, l->elem);
      continue;
    }
    /* Runs of consecutive positions (a prefill's arange) are one strided copy each. */
    for (int64_t j = 0, run; j < n; j += run) {
      for (run = 1; increasing && j + run < n && positions[j + run] == positions[j] + run;) run++;
      int64_t shape[4] = {l->batch, l->heads, run, d};
      char* dst = base + (size_t)(positions[j] * d) * l->elem;
      const char* from = src + kvci_elems_bytes(j * ss[2], l->elem);
      if (increasing)
        kvci_copy_4d_issue(c, dst, ds, from, ss, shape, l->elem);
      else
        KVCI_BE(c, copy_4d, dst, ds, from, ss, shape, l->elem);
    }
  }
}

static void fill_view(kvc_layer* l, int view, kvc_region r) {
  /* Runs twice per layer per update: what K and V share is computed once. */
  const kvc_data_type dt = kvci_dtype_to_data_type(l->dtype);
  const kvc_device device = kvci_tier_device(l);
  for (int which = 0; which < 2; which++) {
    kvc_tensor* t = which ? &l->views[view].value : &l->views[view].key;
    int64_t d = which ? l->v_dim : l->k_dim;
    int64_t* shape = l->shape[view][which];
    int64_t* strides = l->strides[view][which];
    shape[0] = l->batch;
    shape[1] = l->heads;
    shape[2] = r.end - r.begin;
    shape[3] = d;
    kvci_store_strides(l, which, strides);
    t->data = which ? l->v : l->k;
    t->byte_offset = (uint64_t)(r.begin * d) * l->elem;
    t->device = device;
    t->ndim = 4;
    t->dtype = dt;
    t->shape = shape;
    t->strides = strides;
  }
}

void kvci_layer_sync_view(kvc_layer* l) {
  if (l->ext && l->ops->sync_ext) l->ops->sync_ext(l);
  if (!l->initialized) return;
  fill_view(l, 0, (kvc_region){l->start, l->end});
}

void kvci_layer_set_return(kvc_layer* l, kvc_region r) { fill_view(l, 1, r); }

void kvci_layer_copy_rows_to(const kvc_cache* c, const kvc_layer* l, void* dk, void* dv, const int64_t* src_rows,
                            int64_t count) {
  for (int which = 0; which < 2; which++) {
    int64_t ss[4], rs[4] = {1, l->heads, l->cap, which ? l->v_dim : l->k_dim};
    kvci_store_strides(l, which, ss);
    /* The destination has the same per-row layout (heads, cap, dim), only another batch size. */
    for (int64_t i = 0; i < count; i++)
      KVCI_BE(c, copy_rows, which ? dv : dk, ss, &i, which ? l->v : l->k, ss,
              &src_rows[i], 1, rs, l->elem);
  }
}

uint64_t kvci_layer_bytes_reserved(const kvc_layer* l) {
  uint64_t rows = kvci_layer_row_bytes(l, 0), extra = 0, quantized = 0;
  if (l->ops->memory) l->ops->memory(l, &extra, &quantized);
  if (!l->initialized) return rows + extra;
  return (uint64_t)(l->batch * l->heads * l->cap * (l->k_dim + l->v_dim)) * l->elem + rows + extra;
}

kvc_layer* kvci_layer_shell(const kvc_layer* src) {
  kvc_layer* l = (kvc_layer*)malloc(sizeof(*l));
  if (!l) return NULL;
  *l = *src;
  l->k = l->v = NULL;
  l->ext = NULL;
  l->offloaded = 0; /* a shell's store is allocated in the device tier */
  memset(l->views, 0, sizeof l->views);
  if (src->ext && src->ops->ext_shell && src->ops->ext_shell(src, l)) {
    free(l);
    return NULL;
  }
  return l;
}

kvc_error* kvci_layer_clone(const kvc_cache* sc, const kvc_layer* src, const kvc_cache* dc, kvc_layer** out) {
  kvc_layer* l = kvci_layer_shell(src);
  if (!l) return kvci_err_oom();
  if (l->ext) {
    int64_t* rows = (int64_t*)malloc(sizeof(int64_t) * (size_t)(src->batch > 0 ? src->batch : 1));
    for (int64_t r = 0; rows && r < src->batch; r++) rows[r] = r;
    int failed = !rows || kvci_layer_rows_copy_new(dc, src, l, rows, src->batch);
    free(rows);
    if (failed) {
      kvci_layer_free(dc, l);
      return kvci_err_oom();
    }
  }
  if (src->initialized) {
    /* Same capacity so that the clone behaves (and allocates) exactly like the original from here on, and
     * the same tier: a deep copy of an offloaded layer is offloaded too (as copy.deepcopy keeps devices). */
    l->offloaded = src->offloaded;
    if (kvci_store_alloc_tier(dc, l->offloaded, l->batch, l->heads, l->cap, l->k_dim, l->v_dim, l->elem, &l->k,
                             &l->v)) {
      l->offloaded = 0;
      l->initialized = 0;
      kvci_layer_free(dc, l);
      return kvci_err_oom();
    }
    kvc_layer tmp = *src;
    (void)sc;
    move_region(dc, &tmp, l->k, l->v, l->cap, (kvc_region){0, src->cap});
    kvci_layer_sync_view(l);
  }
  *out = l;
  return NULL;
}
