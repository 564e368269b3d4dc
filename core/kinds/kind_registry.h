/*
 * core/kinds/kind_registry.h: the registry of layer kinds (kinds.c), the one place that knows every kind: finding
 * a kind's descriptor, checking a layer's options and a loaded layer against it, making a layer of it, and running
 * the kinds' cache-wide hooks. The floors above (cache, pool, persist) ask it; no kind asks another.
 */
#ifndef KVC_CORE_KINDS_KIND_REGISTRY_H
#define KVC_CORE_KINDS_KIND_REGISTRY_H

#include "model/model.h"

/* A new layer of the spec's kind (its descriptor's configure applied), not initialized; spec was checked. */
kvc_error* kvci_layer_new(const kvc_layer_options* spec, kvc_layer** out);

/* The descriptor of a kind id, NULL when no kind has that id. */
const kvc_kind* kvci_kind_find(kvc_layer_kind id);
/*
 * Validates options->layers[index]: a registered kind, the window and
 * max_cache_len its traits need, then the kind's own check_options.
 */
kvc_error* kvci_kind_check_options(const char* fn, uint32_t index, const kvc_layer_options* spec);

/*
 * A layer read from a file, checked against its kind (the generic rules,
 * then the kind's check_loaded, which must exist); NULL when it is one the
 * kind could have built.
 */
kvc_error* kvci_kind_check_loaded(const char* fn, const char* where, const kvc_layer* layer);

/* The cache-wide hooks of the kinds an update of layers first..first+count-1 names (kinds.c). */
kvc_error* kvci_kinds_check_call(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count,
                                const kvc_tensor* keys, const kvc_update_options* opts);
kvc_error* kvci_kinds_prepare_call(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count);
uint64_t kvci_kinds_state_bytes(const kvc_cache* cache);
kvc_error* kvci_kinds_clone_state(const kvc_cache* src, kvc_cache* dst);
void kvci_kinds_free_state(kvc_cache* cache);
/* The kind at position i of the registry (NULL past the end): files save each kind's cache-wide state. */
const kvc_kind* kvci_kind_at(size_t i);

#endif /* KVC_CORE_KINDS_KIND_REGISTRY_H */
