/* core/cache/ops_crop.c: crop, whether crop can undo (is_croppable), past recording and reset, cache-wide. */
#include <inttypes.h>

#include "cache_ops.h"

/* Up to 5.23 StaticLayer had no crop (AttributeError); the static hybrids always crop their linear part only. */
static int static_crop_refused(const kvc_cache* c, const kvc_layer* l) {
  return c->transformers_release != 0 && c->transformers_release < 52400 && kvci_layer_is(l, KVC_TRAIT_STATIC) &&
         !kvci_layer_is(l, KVC_TRAIT_LINEAR);
}

kvc_error* kvc_cache_crop(kvc_cache* c, int64_t tokens) {
  static const char* FN = "kvc_cache_crop";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_settled(FN, c);
  if (e) return e;
  /* All layers are checked before any is cropped: a cache is never left half-cropped. */
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!l->ops->check_crop)
      return kvci_err(KVC_ERROR_UNSUPPORTED,
                     "%s: layer %u is a %s layer, which cannot be cropped (tokens %" PRId64 ")", FN, i,
                     l->desc->name, tokens);
    if (static_crop_refused(c, l))
      return kvci_err(KVC_ERROR_UNSUPPORTED,
                      "%s: layer %u is a %s layer and the cache follows transformers %u.%u, whose static layers "
                      "have no crop (tokens %" PRId64 "); transformers 5.24 added it (transformers_release 0 or >= 52400)",
                      FN, i, l->desc->name, c->transformers_release / 10000, c->transformers_release / 100 % 100,
                      tokens);
    e = l->ops->check_crop(l, tokens);
    if (e) return e;
  }
  for (uint32_t i = 0; i < c->num_layers; i++) {
    c->layers[i]->ops->apply_crop(c, c->layers[i], tokens);
    kvci_layer_sync_view(c->layers[i]);
  }
  kvci_alias_index_touch(c); /* kinds with their own state may free or repoint buffers views show */
  return kvci_cache_result(FN, c, NULL);
}

static int layer_croppable(const kvc_cache* c, const kvc_layer* l) {
  return l->desc->is_croppable ? l->desc->is_croppable(l, c->transformers_release) : 1;
}

/* Alike only in shape: kvc_cache_max_length also answers for one layer or all, but by its own rules. */
kvc_error* kvc_cache_is_croppable(const kvc_cache* c, int32_t layer, uint8_t* out) {
  static const char* FN = "kvc_cache_is_croppable";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_query_any(FN, c, layer, out);
  if (e) return e;
  if (layer >= 0) {
    if ((uint32_t)layer >= c->num_layers)
      return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %d but the cache has %u layers", FN, (int)layer,
                      c->num_layers);
    *out = (uint8_t)layer_croppable(c, c->layers[layer]);
    return NULL;
  }
  uint8_t all = 1; /* transformers' all() over the layers: a cache without layers is croppable */
  for (uint32_t i = 0; i < c->num_layers; i++) all = all && layer_croppable(c, c->layers[i]);
  *out = all;
  return NULL;
}

kvc_error* kvc_cache_activate_past_recording(kvc_cache* c) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), "kvc_cache_activate_past_recording");
  kvc_error* e = kvci_cache_check("kvc_cache_activate_past_recording", c);
  if (e) return e;
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (kvci_layer_is(c->layers[i], KVC_TRAIT_RECORDS_PAST)) c->layers[i]->record_past = 1;
  return NULL;
}

kvc_error* kvc_cache_reset(kvc_cache* c) {
  static const char* FN = "kvc_cache_reset";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  if (c) c->fault.poisoned = c->fault.fresh = 0; /* the one call a poisoned cache takes: it empties every layer */
  kvc_error* e = kvci_cache_check_settled(FN, c);
  if (e) return e;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    c->layers[i]->ops->reset(c, c->layers[i]);
    kvci_layer_sync_view(c->layers[i]);
  }
  kvci_alias_index_touch(c);
  return kvci_cache_result(FN, c, NULL);
}
