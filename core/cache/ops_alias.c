/*
 * core/cache/ops_alias.c: update inputs that point into the cache's own memory.
 *
 * A caller may pass back a view the cache returned (copying layer 0's keys
 * into layer 1, re-feeding a prefix). The update may grow or compact stores,
 * release the device copies kept for offloaded layers and reuse working
 * buffers before it reads its inputs, so such an input would be read after its
 * bytes moved. Inputs that overlap any memory the cache has handed out (every
 * layer's store and its stored and last-returned views) are therefore copied
 * into a buffer of their own before anything changes. A view's shape and
 * strides arrays live in the layer too, and change when that layer is
 * written: an input whose descriptor points there gets its own copy of them
 * (an update_all that feeds layer 0's returned keys to layer 1 reads them
 * after layer 0 is written). What the cache handed out is kept sorted
 * between updates (alias_index.c), so the common case, no input aliasing,
 * costs a binary search per input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

/* A compact copy of `t` in memory of the cache's device; -1 when out of memory. */
static int copy_out(const kvc_cache* c, const kvc_tensor* t, kvc_tensor* out, void** owned, int64_t* shape) {
  size_t elem = (size_t)t->dtype.bits / 8u;
  size_t bytes = (size_t)(t->shape[0] * t->shape[1] * t->shape[2] * t->shape[3]) * elem;
  void* p = c->backend->alloc_zeroed(c->backend->ctx, &c->exec, bytes);
  if (!p) return -1;
  int64_t src[4], dst[4] = {t->shape[1] * t->shape[2] * t->shape[3], t->shape[2] * t->shape[3], t->shape[3], 1};
  kvci_tensor_strides(t, src);
  KVCI_BE(c, copy_4d, p, dst, kvci_tensor_base(t), src, t->shape, elem);
  *out = *t;
  memcpy(shape, t->shape, sizeof(int64_t) * 4);
  out->shape = shape;
  out->data = p;
  out->byte_offset = 0;
  out->strides = NULL;
  *owned = p;
  return 0;
}

void kvci_update_inputs_free(const kvc_cache* c, kvc_update_inputs* in) {
  if (!in->owned && !in->copies && !in->dims) return; /* no input was copied (the common case) */
  for (uint32_t i = 0; in->owned && i < 2 * in->count; i++)
    if (in->owned[i]) c->backend->free(c->backend->ctx, &c->exec, in->owned[i]);
  free(in->owned);
  free(in->copies);
  free(in->dims);
  memset(in, 0, sizeof *in);
}

/* Whether the tensor's shape or strides array lives in one of the cache's layers. */
static int descriptor_owned(const kvc_cache* c, const kvc_tensor* t) {
  return kvci_alias_index_descriptor_in_layer(c, t->shape, t->strides);
}

kvc_error* kvci_update_inputs_unalias(kvc_cache* c, uint32_t count, const kvc_tensor* keys,
                                     const kvc_tensor* values, kvc_update_inputs* in) {
  memset(in, 0, sizeof *in);
  in->keys = keys;
  in->values = values;
  in->count = count;
  if (c->num_layers == 0) return NULL; /* nothing handed out yet */
  if (kvci_alias_index_refresh(c)) return kvci_err_oom();
  int any = kvci_alias_index_inputs_alias(c, count, keys, values);
  if (!any) return NULL; /* the common case */
  in->copies = (kvc_tensor*)malloc(sizeof(kvc_tensor) * 2 * count);
  in->owned = (void**)calloc(2 * (size_t)count, sizeof(void*));
  in->dims = (int64_t*)malloc(sizeof(int64_t) * 8 * 2 * (size_t)count);
  if (!in->copies || !in->owned || !in->dims) {
    kvci_update_inputs_free(c, in);
    return kvci_err_oom();
  }
  for (uint32_t j = 0; j < 2 * count; j++) {
    const kvc_tensor* t = j < count ? &keys[j] : &values[j - count];
    int64_t* shape = in->dims + 8 * (size_t)j;
    in->copies[j] = *t;
    if (kvci_alias_index_overlaps(c, kvci_tensor_span(t))) {
      if (copy_out(c, t, &in->copies[j], &in->owned[j], shape)) {
        kvci_update_inputs_free(c, in);
        return kvci_err_oom();
      }
    } else if (descriptor_owned(c, t)) { /* the data is the caller's, the descriptor ours */
      memcpy(shape, t->shape, sizeof(int64_t) * 4);
      in->copies[j].shape = shape;
      if (t->strides) {
        memcpy(shape + 4, t->strides, sizeof(int64_t) * 4);
        in->copies[j].strides = shape + 4;
      }
    }
  }
  in->keys = in->copies;
  in->values = in->copies + count;
  return NULL;
}
