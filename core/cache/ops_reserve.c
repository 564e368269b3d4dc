/* core/cache/ops_reserve.c: kvc_cache_reserve, a capacity hint for dynamic layers. */
#include <inttypes.h>
#include <stdlib.h>

#include "cache_ops.h"

kvc_error* kvc_cache_reserve(kvc_cache* c, int64_t tokens) {
  static const char* FN = "kvc_cache_reserve";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_settled(FN, c);
  if (e) return e;
  if (tokens < 0 || tokens > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tokens is %" PRId64 "; it must be in [0, 2^31)", FN, tokens);
  uint32_t n = c->num_layers;
  void** stores = (void**)calloc(2 * (size_t)(n ? n : 1), sizeof(void*));
  if (!stores) return kvci_err_oom();
  /* Allocate every new store before moving any history: all layers grow, or none. */
  for (uint32_t i = 0; i < n; i++) {
    const kvc_layer* l = c->layers[i];
    if (!kvci_layer_is(l, KVC_TRAIT_RESERVABLE) || !l->initialized || l->cap >= tokens) continue;
    /* In the tier the layer is in: an offloaded layer grows in the host tier. */
    if (kvci_store_alloc_tier(c, l->offloaded, l->batch, l->heads, tokens, l->k_dim, l->v_dim, l->elem,
                             &stores[2 * i], &stores[2 * i + 1])) {
      for (uint32_t j = 0; j < i; j++) kvci_store_free(c, c->layers[j]->offloaded, stores[2 * j], stores[2 * j + 1]);
      free(stores);
      return kvci_err_oom();
    }
  }
  for (uint32_t i = 0; i < n; i++) {
    kvc_layer* l = c->layers[i];
    if (!kvci_layer_is(l, KVC_TRAIT_RESERVABLE)) continue;
    if (stores[2 * i]) kvci_layer_adopt_store(c, l, stores[2 * i], stores[2 * i + 1], tokens, (kvc_region){l->start, l->end});
    if (l->reserve < tokens) l->reserve = tokens;
  }
  if (c->reserve < tokens) c->reserve = tokens;
  free(stores);
  return kvci_cache_result(FN, c, NULL);
}
