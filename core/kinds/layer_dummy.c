/*
 * core/kinds/layer_dummy.c: the DUMMY kind, transformers' DummyLayer (5.23): the
 * layer of a block without attention (layer types "moe" and "mlp") or of a
 * layer that reads another layer's keys and values (kv_sharing_modes
 * "reuse"). It keeps a cache's layer list one entry per model layer, and
 * stores nothing.
 *
 * What transformers' class does, and so this kind: update raises
 * (UNSUPPORTED here); crop, reset, reorder, select, repeat, offload and
 * prefetch do nothing; get_max_length is -1; it is compileable and
 * croppable; early initialization skips it; it is neither sliding nor
 * linear. It is not a CacheLayerMixin, so the cache-wide length queries
 * treat it as they treat a linear layer: layer 0 answers for the first
 * layer with K/V, another index is an error (core/cache/cache.c). The layer is
 * never initialized and has no rows, so batch operations, split, stack,
 * clone and offloading pass over it without kind-specific code.
 */
#include <inttypes.h>

#include "kinds/base/base_kinds.h"

static kvc_error* refuse_update(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                const kvc_update_options* o) {
  (void)l;
  (void)o;
  return kvci_err(KVC_ERROR_UNSUPPORTED,
                  "%s: layer %u is a dummy layer (transformers' DummyLayer: a block without attention, or a layer "
                  "that reuses another layer's keys and values), which stores nothing, so it cannot take %" PRId64
                  " tokens",
                  fn, index, n);
}

static void nothing_to_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  (void)c;
  (void)l;
  (void)tokens;
}

static void nothing_to_reset(const kvc_cache* c, kvc_layer* l) {
  (void)c;
  (void)l;
}

/* DummyLayer.is_compileable is True (it holds nothing that could change shape). */
static void fill_info(const kvc_layer* l, kvc_layer_info* info) {
  (void)l;
  info->is_compileable = 1;
}

/* keep_for_update, apply_update and initial_capacity stay NULL: check_update refuses every update first. */
static const kvc_layer_ops dummy_ops = {
    .check_update = refuse_update,
    .seq_length = kvci_no_kv_seq_length, /* the cache-level queries redirect it (core/cache/cache.c) */
    .max_length = kvci_unbounded_max_length, /* DummyLayer.get_max_length: -1 */
    .mask_sizes = kvci_no_kv_mask_sizes,
    .check_crop = kvci_crop_allowed,
    .apply_crop = nothing_to_crop,
    .reset = nothing_to_reset,
    .fill_info = fill_info,
};

/* Alike by design: every kind's descriptor lists its own traits and hooks (the fp8 kind's looks the same). */
const kvc_kind kvc_dummy_kind = {
    .id = KVC_LAYER_DUMMY,
    .name = "dummy",
    .traits = 0, /* no K/V, not static, not sliding, not linear, never offloaded */
    .ops = &dummy_ops,
    .capacity = kvci_no_kv_capacity,
    .is_croppable = NULL, /* DummyLayer.is_croppable is True */
    .check_loaded = kvci_loaded_store_only, /* it has none: the generic rules refuse a store */
};
