/*
 * core/cache/ops_indexer.c: the indexer entry points (kvcache/indexer.h):
 * update_indexer and the indexer view of the indexed kinds.
 *
 * update_indexer runs in the phases of every mutating call: check the input
 * against the layer, make room (the only step that can fail, and then
 * nothing changed), write.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "cache_ops.h"
#include "kinds/indexer.h"

/* Layer `layer` if it is one of the indexed kinds (transformers: ValueError on a layer without update_indexer). */
static kvc_error* indexed_layer(const char* fn, const char* what, const kvc_cache* c, uint32_t layer,
                                kvc_layer** out) {
  kvc_error* e = kvci_cache_check_layer(fn, c, layer);
  if (e) return e;
  kvc_layer* l = c->layers[layer];
  if (l->kind != KVC_LAYER_DYNAMIC_INDEXED && l->kind != KVC_LAYER_STATIC_INDEXED)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: layer %u is a %s layer; cannot call %s on it, it has no indexer key cache "
                    "(only the dynamic indexed and static indexed kinds, layer type \"indexed_attention\", have one)",
                    fn, layer, l->desc->name, what);
  *out = l;
  return NULL;
}

/* Phase 1: x against the layer; nothing changes. */
static kvc_error* check_x(const char* fn, const kvc_cache* c, const kvc_layer* l, uint32_t layer, const kvc_tensor* x) {
  kvc_error* e = kvci_check_nd_input(fn, "x", x, &c->device, 3, 3, "[batch, n, index_head_dim]", 1);
  if (e) return e;
  kvc_dtype dtype = kvc_dtype_from_data_type(x->dtype);
  const kvc_indexer* ix = kvci_indexer_of(l);
  if (ix && dtype != ix->dtype)
    return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                    "%s: x.dtype is %s but the indexer of layer %u stores %s; kvcache never converts dtypes", fn,
                    kvci_dtype_name(dtype), layer, kvci_dtype_name(ix->dtype));
  if (ix && x->shape[2] != ix->width)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                    "%s: x.shape[2] (index_head_dim) is %" PRId64 " but the indexer of layer %u has %" PRId64, fn,
                    x->shape[2], layer, ix->width);
  if ((l->initialized || ix) && x->shape[0] != l->batch)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                    "%s: x.shape[0] (batch) is %" PRId64 " but layer %u holds batch %" PRId64
                    "; keys, values and indexer keys of a layer share one batch",
                    fn, x->shape[0], layer, l->batch);
  int64_t len = ix ? ix->len : 0;
  if (kvci_layer_is(l, KVC_TRAIT_STATIC) && len + x->shape[1] > l->slots)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE,
                    "%s: the indexer of static indexed layer %u holds %" PRId64 " of max_cache_len %" PRId64
                    " tokens; %" PRId64 " more would overflow it (a static cache never grows)",
                    fn, layer, len, l->slots, x->shape[1]);
  return NULL;
}

/*
 * x as a 4-D [batch, 1, n, width] source. When it overlaps the indexer's own
 * buffer (the caller passed a view the cache handed out), it is first copied
 * to `*staged` (room phase; the caller frees it after the write), so that
 * growth or an overlapping write never reads freed or half-written memory.
 */
static kvc_error* source_of(const kvc_cache* c, const kvc_layer* l, const kvc_tensor* x, const void** src,
                            int64_t st[4], void** staged) {
  int64_t shape[4] = {x->shape[0], 1, x->shape[1], x->shape[2]};
  st[0] = x->strides ? x->strides[0] : x->shape[1] * x->shape[2];
  st[1] = 0;
  st[2] = x->strides ? x->strides[1] : x->shape[2];
  st[3] = x->strides ? x->strides[2] : 1;
  *src = kvci_tensor_base(x);
  *staged = NULL;
  kvc_tensor t4 = *x;
  t4.ndim = 4;
  t4.shape = shape;
  t4.strides = st;
  kvc_span s = kvci_tensor_span(&t4), own = kvci_indexer_span(l);
  if (s.lo >= own.hi || own.lo >= s.hi) return NULL;
  size_t elem = (size_t)x->dtype.bits / 8;
  int64_t cs[4] = {x->shape[1] * x->shape[2], 0, x->shape[2], 1};
  void* copy = c->backend->alloc_zeroed(c->backend->ctx, &c->exec, (size_t)(x->shape[0] * cs[0]) * elem);
  if (!copy) return kvci_err_oom();
  KVCI_BE(c, copy_4d, copy, cs, *src, st, shape, elem);
  for (int i = 0; i < 4; i++) st[i] = cs[i];
  *src = copy;
  *staged = copy;
  return NULL;
}

kvc_error* kvc_cache_update_indexer(kvc_cache* c, uint32_t layer, const kvc_tensor* x, kvc_tensor* out) {
  static const char* FN = "kvc_cache_update_indexer";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  kvc_layer* l = NULL;
  if ((e = indexed_layer(FN, "update_indexer", c, layer, &l)) || (e = check_x(FN, c, l, layer, x))) return e;

  /* Room: the only failures, after which nothing has changed. */
  const void* src;
  int64_t st[4];
  void* staged;
  if ((e = source_of(c, l, x, &src, st, &staged))) return e;
  e = kvci_indexer_make_room(c, l, kvc_dtype_from_data_type(x->dtype), x->shape[0], x->shape[2], x->shape[1]);
  if (e) {
    if (staged) c->backend->free(c->backend->ctx, &c->exec, staged);
    return e;
  }

  /* Write: refuses nothing (a failing device poisons the cache). */
  kvci_indexer_append(c, l, src, st, x->shape[1]);
  if (staged) c->backend->free(c->backend->ctx, &c->exec, staged);
  kvci_alias_index_touch(c); /* the layer's batch may be new */
  if (out) kvci_indexer_view(c, l, out);
  return kvci_cache_result(FN, c, NULL);
}

kvc_error* kvc_cache_indexer_view(const kvc_cache* c, uint32_t layer, kvc_tensor* out) {
  static const char* FN = "kvc_cache_indexer_view";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  kvc_layer* l = NULL;
  if ((e = indexed_layer(FN, "indexer_view", c, layer, &l))) return e;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass a kvc_tensor", FN);
  kvci_indexer_view(c, l, out);
  return NULL;
}
