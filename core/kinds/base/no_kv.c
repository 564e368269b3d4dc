/*
 * core/kinds/base/no_kv.c: the entries of kinds that keep no keys and values (LINEAR, DUMMY).
 */
#include "base_kinds.h"

/* Only reached directly: the cache-level queries send a linear layer's index to an attention layer ('The cache as a whole'). */
int64_t kvci_no_kv_seq_length(const kvc_layer* l) {
  (void)l;
  return 0;
}

void kvci_no_kv_mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  (void)l;
  *len = q;
  *off = 0;
}

int64_t kvci_no_kv_capacity(const kvc_layer* l) {
  (void)l;
  return 0;
}
