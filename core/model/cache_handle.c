/*
 * core/model/cache_handle.c: what every operation on a cache opens with (the handle's checks) and the cache's
 * list of layers. Below the operations, so that each of them (update, offloading, queries) can use these
 * without calling the file that creates caches.
 */
#include <stdlib.h>

#include "model.h"

kvc_error* kvci_cache_check_layer(const char* fn, const kvc_cache* c, uint32_t layer) {
  kvc_error* e = kvci_cache_check(fn, c);
  if (e) return e;
  if (layer >= c->num_layers)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %u but the cache has %u layer%s (valid: 0..%d)", fn, layer,
                   c->num_layers, c->num_layers == 1 ? "" : "s", (int)c->num_layers - 1);
  return NULL;
}

kvc_error* kvci_cache_check_query(const char* fn, const kvc_cache* c, const void* out) {
  kvc_error* e = kvci_cache_check(fn, c);
  if (e) return e;
  return out ? NULL : kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", fn);
}

kvc_error* kvci_cache_check_query_any(const char* fn, const kvc_cache* c, int32_t layer, const void* out) {
  kvc_error* e = kvci_cache_check_query(fn, c, out);
  if (e) return e;
  if (layer < KVC_ALL_LAYERS)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %d; pass a layer index >= 0 or KVC_ALL_LAYERS (-1)", fn,
                   (int)layer);
  return NULL;
}

kvc_error* kvci_cache_append_layer(kvc_cache* c, kvc_layer* l) {
  if (c->num_layers == c->cap_layers) {
    uint32_t cap = c->cap_layers ? c->cap_layers * 2 : 8;
    kvc_layer** p = (kvc_layer**)realloc(c->layers, sizeof(*p) * cap);
    if (!p) {
      kvci_layer_free(c, l); /* every caller hands the layer over: it would free it here anyway */
      return kvci_err_oom();
    }
    c->layers = p;
    c->cap_layers = cap;
  }
  c->layers[c->num_layers++] = l;
  kvci_alias_index_touch(c);
  return NULL;
}
