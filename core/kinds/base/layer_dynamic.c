/* core/kinds/base/layer_dynamic.c: DynamicLayer (docs/semantics.md, 'Dynamic layers'), a growing full-attention layer. */
#include "base_kinds.h"

/* Dynamic kinds accept any number of tokens and append them after what they store. */
kvc_error* kvci_dynamic_check_update(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                    const kvc_update_options* o) {
  (void)fn; (void)index; (void)l; (void)n; (void)o;
  return NULL;
}

kvc_region kvci_dynamic_keep_for_update(const kvc_layer* l, int64_t n, const kvc_update_options* o, int64_t* append) {
  (void)o;
  *append = n;
  return (kvc_region){l->start, l->end};
}

static kvc_region apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v, int64_t n,
                               const kvc_update_options* o) {
  (void)o;
  kvci_layer_write(c, l, k, v, l->end, NULL, n);
  l->end += n;
  return (kvc_region){l->start, l->end};
}

int64_t kvci_dynamic_seq_length(const kvc_layer* l) { return kvci_layer_stored(l); }
int64_t kvci_unbounded_max_length(const kvc_layer* l) { (void)l; return -1; }

/* Through the table: a kind with its own seq_length (compact quantized layers) shares the rule. */
void kvci_dynamic_mask_sizes(const kvc_layer* l, int64_t q, int64_t* len, int64_t* off) {
  *len = l->ops->seq_length(l) + q;
  *off = 0;
}

kvc_error* kvci_crop_allowed(const kvc_layer* l, int64_t tokens) {
  (void)l; (void)tokens;
  return NULL;
}

int kvci_dynamic_crop_keep(const kvc_layer* l, int64_t len, int64_t tokens, int64_t* keep) {
  if (!l->initialized || tokens == 0) return 0;
  /* Positive: legacy absolute length. Negative: tokens to remove. */
  *keep = tokens > 0 ? tokens : len + tokens;
  if (*keep < 0) *keep = 0;
  return *keep < len;
}

void kvci_dynamic_apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  int64_t keep;
  if (kvci_dynamic_crop_keep(l, kvci_layer_stored(l), tokens, &keep)) l->end = l->start + keep;
}

void kvci_dynamic_reset(const kvc_cache* c, kvc_layer* l) {
  (void)c;
  l->start = l->end = 0;
}

int64_t kvci_dynamic_initial_capacity(const kvc_layer* l, int64_t n) {
  int64_t cap = n < 64 ? 64 : n;
  return cap < l->reserve ? l->reserve : cap;
}

const kvc_layer_ops kvc_dynamic_layer_ops = {
    KVC_DYNAMIC_STORE_OPS,
    .apply_update = apply_update,
    .reset = kvci_dynamic_reset,
};

const kvc_kind kvc_dynamic_kind = {
    .id = KVC_LAYER_DYNAMIC,
    .name = "dynamic",
    .traits = KVC_TRAIT_HAS_KV | KVC_TRAIT_OFFLOADS | KVC_TRAIT_RESERVABLE,
    .ops = &kvc_dynamic_layer_ops,
    .check_loaded = kvci_loaded_store_only, /* any capacity holding the stored region: it grows on demand */
};

kvc_error* kvci_loaded_store_only(const char* fn, const char* where, const kvc_layer* l) {
  (void)fn, (void)where, (void)l;
  return NULL;
}
