/*
 * core/cache/cache_ops.h: the cache object and the operations on it (update, crop, batch, split, offloading,
 * presets), shared by cache/ and the floors above (pool, persist).
 */
#ifndef KVC_CORE_CACHE_CACHE_OPS_H
#define KVC_CORE_CACHE_CACHE_OPS_H

#include "model/model.h"
#include "kinds/kind_registry.h"
#include "util/options.h"
#include "util/registry.h"

/* Cache helpers (cache.c). */
/* An empty cache on `device`, its work issued on `stream` (inherited by clones, splits and stacks). */
kvc_error* kvci_cache_new(const kvc_device* device, void* stream, kvc_cache** out);
int kvci_cache_all_dynamic(const kvc_cache* cache);
/* An empty cache derived from src (split, stack): its device, stream and settings (kvci_cache_copy_settings). */
kvc_error* kvci_cache_new_like(const kvc_cache* src, kvc_cache** out);
/* Copies what a derived cache (clone, split, stack) inherits: laziness, reserve, lazy layer, offloading, kinds' cache-wide state. */
kvc_error* kvci_cache_copy_settings(const kvc_cache* src, kvc_cache* dst);
/* query_offset.c: the options check, and what the cache's rule adds to the mask sizes of `layer`. */
kvc_error* kvci_query_offset_check(const char* fn, kvc_query_offset_rule rule);
void kvci_query_offset_mask(const kvc_cache* cache, uint32_t layer, int64_t* kv_length, int64_t* kv_offset);
/* What the rule adds to the query offset of `layer` (kvc_cache_query_offset, cache.c). */
int64_t kvci_query_offset_added(const kvc_cache* cache, uint32_t layer);

/*
 * Presets (presets.c): the layer list of a preset. `*out` is malloc'd. For a
 * lazy preset, *count is 0 and *lazy_spec the layer it creates on demand.
 * *offload is the resolved offloading mode.
 */
kvc_error* kvci_preset_layers(const kvc_cache_options* options, kvc_layer_options** out, uint32_t* count,
                             int* lazy, kvc_layer_options* lazy_spec, kvc_offload* offload);
/*
 * Update inputs that alias the cache's own memory (ops_alias.c): `keys` and
 * `values` point at the caller's arrays, or at copies of the tensors that
 * overlap memory the cache handed out views of; free releases the copies.
 */
typedef struct kvc_update_inputs {
  const kvc_tensor* keys;
  const kvc_tensor* values;
  uint32_t count;
  kvc_tensor* copies; /* NULL when nothing aliases */
  void** owned;       /* the copies' buffers (backend memory) */
  int64_t* dims;      /* the copies' shape and strides arrays, 8 per tensor */
} kvc_update_inputs;
kvc_error* kvci_update_inputs_unalias(kvc_cache* cache, uint32_t count, const kvc_tensor* keys,
                                     const kvc_tensor* values, kvc_update_inputs* in);
void kvci_update_inputs_free(const kvc_cache* cache, kvc_update_inputs* in);

/*
 * Encoder-decoder caches (encoder_decoder.c), for files (core/persist/): the
 * two halves and the is_updated flags; one made of two caches (owned by it on
 * success only) and a copy of the flags; new flags (malloc'd, taken over).
 */
void kvci_encdec_parts(const kvc_encoder_decoder_cache* cache, kvc_cache** self, kvc_cache** cross, uint8_t** flags,
                       uint32_t* num_flags);
kvc_error* kvci_encdec_wrap(kvc_cache* self, kvc_cache* cross, const uint8_t* flags, uint32_t num_flags,
                           kvc_encoder_decoder_cache** out);
void kvci_encdec_set_flags(kvc_encoder_decoder_cache* cache, uint8_t* flags, uint32_t num_flags);
/* The guard of an encoder-decoder pair (part 0) or of its self- (1) or cross-attention (2) half, NULL for NULL. */
kvci_guard* kvci_encdec_guard(const kvc_encoder_decoder_cache* cache, int part);
/* Update engine (ops_update.c), used by create_from_tensors and encoder-decoder. */
kvc_error* kvci_update_layers(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count, const kvc_tensor* keys,
                             const kvc_tensor* values, const kvc_update_options* opts, kvc_kv* out);

/*
 * Offloading (offload.c). kvci_offload_layer_takes_part: whether a new layer of
 * a cache with this mode is offloaded by updates (kinds with K/V that
 * transformers' prefetch does not skip: not its is_linear kinds, not QUANTIZED
 * or SINK; sliding ones only with KVC_OFFLOAD_ALL). kvci_offload_retired_bytes:
 * device bytes kept alive for the views of the last update after its layers
 * were offloaded. kvci_tier_device: the device a view of the layer's store
 * reports (the host tier's device type when offloaded).
 */
int kvci_offload_layer_takes_part(kvc_offload mode, const kvc_layer* layer);
uint64_t kvci_offload_retired_bytes(const kvc_cache* cache);
/*
 * The update path (ops_update.c), in transformers' order (docs/semantics.md,
 * 'Offloading'). prepare runs in the room phase after new layers are initialized
 * and before any store grows: it plans the tier moves of the whole call and
 * allocates every buffer they need, sized for the capacities the stores will
 * have once grown (on error it frees them and nothing visible has changed);
 * abort frees them when a later step of the room phase fails. Then, in the
 * write phase: release_retired frees the device copies kept for the previous
 * call's views; before_update(layer) brings the layer to the device tier and
 * prefetches the next offloadable layer; after_update(layer) offloads it.
 * Neither can fail. free_state releases the cache's offload state
 * (kvc_cache_destroy).
 */
kvc_error* kvci_offload_prepare(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count,
                               const kvc_tensor* keys, const kvc_update_options* opts);
void kvci_offload_abort(kvc_cache* cache);
/* The three per-layer steps are inline where the cache has no offload state (never offloaded): an update
   calls them per step. The _state functions do the work. */
void kvci_offload_release_retired_state(kvc_cache* cache);
void kvci_offload_before_update_state(kvc_cache* cache, uint32_t layer);
void kvci_offload_after_update_state(kvc_cache* cache, uint32_t layer);
static inline void kvci_offload_release_retired(kvc_cache* cache) {
  if (cache->offload_state) kvci_offload_release_retired_state(cache);
}
static inline void kvci_offload_before_update(kvc_cache* cache, uint32_t layer) {
  if (cache->offload_state) kvci_offload_before_update_state(cache, layer);
}
static inline void kvci_offload_after_update(kvc_cache* cache, uint32_t layer) {
  if (cache->offload_state) kvci_offload_after_update_state(cache, layer);
}
void kvci_offload_free_state(kvc_cache* cache);
/*
 * Orders what comes next after the prefetch the last update left running:
 * on a GPU it copies on a side stream, so an operation that reads or writes
 * that layer on the cache's stream (crop, reorder, a view, a clone, ...)
 * must wait for it first. Updates do not call it: their own tier_wait keeps
 * the prefetch overlapping with the caller's work between layers.
 */
void kvci_offload_settle(const kvc_cache* cache);
/* The prologue of a cache-wide operation: the cache checked (kvci_cache_check), then its prefetch settled. */
kvc_error* kvci_cache_check_settled(const char* fn, const kvc_cache* cache);
/* Batch helpers (ops_batch.c). */
kvc_error* kvci_check_indices(const char* fn, const char* arg, const int64_t* idx, size_t count, int64_t batch);
/* Asks each layer's kind whether it allows the batch operation `op` (kvc_layer_ops.check_batch). */
kvc_error* kvci_batch_check_kinds(const char* fn, const kvc_cache* cache, kvc_batch_op op);

#endif /* KVC_CORE_CACHE_CACHE_OPS_H */
