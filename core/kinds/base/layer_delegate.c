/*
 * core/kinds/base/layer_delegate.c: the K/V entries of kinds that add state to another
 * kind's store (kvc_kind.store_ops): the linear hybrids (layer_linear.c) and
 * the indexed kinds (layer_indexed.c). Each entry is that kind's own.
 */
#include "base_kinds.h"

kvc_error* kvci_store_check_update(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                  const kvc_update_options* o) {
  return l->desc->store_ops->check_update(fn, index, l, n, o);
}

kvc_region kvci_store_keep_for_update(const kvc_layer* l, int64_t n, const kvc_update_options* o, int64_t* append) {
  return l->desc->store_ops->keep_for_update(l, n, o, append);
}

kvc_region kvci_store_apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v,
                                  int64_t n, const kvc_update_options* o) {
  return l->desc->store_ops->apply_update(c, l, k, v, n, o);
}

int64_t kvci_store_seq_length(const kvc_layer* l) { return l->desc->store_ops->seq_length(l); }

void kvci_store_mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  l->desc->store_ops->mask_sizes(l, q, len, off);
}

int64_t kvci_store_initial_capacity(const kvc_layer* l, int64_t n) { return l->desc->store_ops->initial_capacity(l, n); }
