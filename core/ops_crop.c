/* core/ops_crop.c: crop, past recording and reset, cache-wide. */
#include <inttypes.h>

#include "internal.h"

kvc_error* kvc_cache_crop(kvc_cache* c, int64_t tokens) {
  static const char* FN = "kvc_cache_crop";
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  kvci_offload_settle(c);
  /* All layers are checked before any is cropped: a cache is never left half-cropped. */
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!l->ops->check_crop)
      return kvci_err(KVC_ERROR_UNSUPPORTED,
                     "%s: layer %u is a %s layer, which cannot be cropped (tokens %" PRId64
                     "); only dynamic kinds support crop",
                     FN, i, l->desc->name, tokens);
    e = l->ops->check_crop(l, tokens);
    if (e) return e;
  }
  for (uint32_t i = 0; i < c->num_layers; i++) {
    c->layers[i]->ops->apply_crop(c, c->layers[i], tokens);
    kvci_layer_sync_view(c->layers[i]);
  }
  kvci_alias_index_touch(c); /* kinds with their own state may free or repoint buffers views show */
  return NULL;
}

kvc_error* kvc_cache_activate_past_recording(kvc_cache* c) {
  kvc_error* e = kvci_cache_check("kvc_cache_activate_past_recording", c);
  if (e) return e;
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (kvci_layer_is(c->layers[i], KVC_TRAIT_RECORDS_PAST)) c->layers[i]->record_past = 1;
  return NULL;
}

kvc_error* kvc_cache_reset(kvc_cache* c) {
  kvc_error* e = kvci_cache_check("kvc_cache_reset", c);
  if (e) return e;
  kvci_offload_settle(c);
  for (uint32_t i = 0; i < c->num_layers; i++) {
    c->layers[i]->ops->reset(c, c->layers[i]);
    kvci_layer_sync_view(c->layers[i]);
  }
  kvci_alias_index_touch(c);
  return NULL;
}
