/*
 * kvcache/ops.h: the operations on a cache, with transformers' names.
 *
 * Every function here mutates the cache: views obtained before the call are
 * invalid after it, whether it succeeds or not. A call that fails has changed
 * nothing (lengths, contents, counters, flags).
 */
#ifndef KVCACHE_OPS_H
#define KVCACHE_OPS_H

#include "kvcache/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Options of kvc_cache_update. NULL options = all defaults.
 * Published sizes: 24 (0.1), 48 (0.2).
 */
typedef struct kvc_update_options {
  uint32_t struct_size;             /**< sizeof(kvc_update_options) */
  const int64_t* cache_position;    /**< static layers only (transformers 4.57): absolute slots to
                                         write, one per new token; NULL = write at the layer's
                                         counter (transformers >= 5.3). Borrowed for the call. */
  uint32_t cache_position_length;   /**< entries in cache_position; must equal the new tokens */
  /* since 0.2 */
  const kvc_tensor* rope_cos;       /**< SINK layers: the RoPE cos the model used, [seq, dim] (the
                                         whole table) or [batch, seq, dim] (this call's positions);
                                         NULL with rope_sin NULL = no RoPE, keys are not re-rotated.
                                         Borrowed for the call (the layer keeps what it needs). */
  const kvc_tensor* rope_sin;       /**< as rope_cos */
  int64_t partial_rotation_size;    /**< SINK layers: only the first n key channels are rotary;
                                         0 = all */
} kvc_update_options;

#define KVC_UPDATE_OPTIONS_INIT {sizeof(kvc_update_options), NULL, 0, NULL, NULL, 0}
/** Sets `options` to KVC_UPDATE_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_update_options_init(kvc_update_options* options);

/**
 * update(key, value, layer): stores the new tokens of one layer and returns
 * in `*out` (may be NULL) the keys and values attention must use now:
 *  - dynamic: every stored token;
 *  - dynamic sliding/chunked: the kept tail plus the new tokens (a prefill
 *    longer than the window returns the whole prompt) and then keeps the last
 *    window-1 tokens;
 *  - static: the whole buffer of max_cache_len slots (unwritten slots zero);
 *  - static sliding/chunked: the buffer while it is not full and in one-token
 *    steady decoding; the previous tail plus the new tokens when a call fills
 *    or overflows the window with several tokens.
 * `key` is [batch, heads, new, k_head_dim], `value` [batch, heads, new,
 * v_head_dim], both of the cache's dtype and device; borrowed for the call and
 * copied. They may be views this cache returned (even of the layer being
 * updated): such inputs are copied before anything moves. `new` may be 0 (nothing is stored; the views are returned as the
 * branch for 0 new tokens gives them). The first update of a layer fixes its batch, heads, head dims and
 * dtype. A lazy cache creates missing layers up to `layer`.
 * Views in `*out` are owned by the cache, valid until its next mutating call.
 * In steady decoding nothing is allocated and nothing already stored is
 * copied: the views are zero-copy windows onto the layer's storage.
 * Errors: INVALID_ARGUMENT, DTYPE_MISMATCH, SHAPE_MISMATCH, DEVICE_MISMATCH,
 * OUT_OF_RANGE (layer index; a static layer that would overflow, or a
 * cache_position beyond max_cache_len), OUT_OF_MEMORY.
 */
KVC_API kvc_error* kvc_cache_update(kvc_cache* cache, uint32_t layer, const kvc_tensor* key,
                                    const kvc_tensor* value, const kvc_update_options* options,
                                    kvc_kv* out);

/**
 * One decode or prefill step for layers 0..num_layers-1 in one call:
 * equivalent to kvc_cache_update for each layer in order, but validated as a
 * whole first, so either every layer is updated or none is. `keys`, `values`
 * (and `out`, if not NULL) have num_layers entries.
 */
KVC_API kvc_error* kvc_cache_update_all(kvc_cache* cache, uint32_t num_layers, const kvc_tensor* keys,
                                        const kvc_tensor* values, const kvc_update_options* options,
                                        kvc_kv* out);

/**
 * crop(tokens) on every layer (docs/semantics.md, 'Crop and past recording'):
 *  - tokens < 0: remove the last |tokens| tokens (all of them if there are fewer);
 *  - tokens == 0: no-op on full-attention layers; a recording sliding layer
 *    drops the extra recorded tokens;
 *  - tokens > 0: legacy absolute length: keep the first `tokens` tokens.
 * A sliding layer that has seen its window can only be cropped after
 * kvc_cache_activate_past_recording and only with tokens <= 0.
 * Static layers (transformers 5.24) move their counter back and leave the
 * slots as they are (the next update overwrites them); a static sliding or
 * chunked layer only until its window has moved (more tokens seen than it
 * holds: INVALID_STATE, the evicted tokens are gone). The static hybrids
 * (LINEAR_STATIC, LINEAR_STATIC_SLIDING) crop their linear part only, as in
 * transformers. A cache created with transformers_release below 52400
 * refuses to crop static kinds (UNSUPPORTED), as 5.23 did.
 * Errors: UNSUPPORTED (sink layers; static kinds before 5.24), INVALID_STATE
 * (sliding rules).
 */
KVC_API kvc_error* kvc_cache_crop(kvc_cache* cache, int64_t tokens);

/**
 * activate_past_recording(): switches recording on for the layers that record
 * their past: the dynamic sliding and chunked layers (KVC_LAYER_DYNAMIC_SLIDING,
 * KVC_LAYER_DYNAMIC_CHUNKED) and every linear-attention kind (KVC_LAYER_LINEAR
 * and the hybrids KVC_LAYER_LINEAR_*). From now on a dynamic sliding or chunked
 * layer (also the K/V of KVC_LAYER_LINEAR_DYNAMIC_SLIDING) keeps every token it
 * receives instead of only the last window-1, and a linear-attention layer keeps
 * every column of its conv/SSM state inputs instead of only the last
 * conv_kernel_size, so that assisted decoding can roll back rejected tokens
 * with a negative crop; each crop (also crop(0)) trims the layer back to its
 * window (its kernel size for the states). Other layers are left as they are.
 * Recording stays on for the life of the cache.
 */
KVC_API kvc_error* kvc_cache_activate_past_recording(kvc_cache* cache);

/**
 * reorder_cache(beam_idx): row b of every non-empty layer becomes former row
 * beam_idx[b]. `beam_idx` has `count` entries in [0, batch) and is borrowed.
 * When count == batch only the rows that change are copied. Errors:
 * OUT_OF_RANGE for an index outside the batch.
 */
KVC_API kvc_error* kvc_cache_reorder(kvc_cache* cache, const int64_t* beam_idx, size_t count);

/**
 * batch_repeat_interleave(repeats): row i becomes rows i*repeats ..
 * i*repeats+repeats-1 (contrastive search). Dynamic kinds only
 * (UNSUPPORTED otherwise). repeats >= 1.
 */
KVC_API kvc_error* kvc_cache_batch_repeat_interleave(kvc_cache* cache, int64_t repeats);

/**
 * batch_select_indices(indices): keeps rows indices[0..count) in that order.
 * Dynamic kinds only (UNSUPPORTED otherwise).
 */
KVC_API kvc_error* kvc_cache_batch_select_indices(kvc_cache* cache, const int64_t* indices, size_t count);

/**
 * batch_split(full_batch_size, split_size): new caches holding batch rows
 * [i, i+split_size) for i = 0, split_size, ... < full_batch_size, with the
 * same layers, counters and flags. full_batch_size must be the cache's batch
 * size. Writes at most `capacity` handles to `out` (owned by the caller) and
 * the number of splits to `*count`; if `capacity` is too small nothing is
 * created and the error (INVALID_ARGUMENT) says how many are needed. A cache
 * without any initialized layer has no batch to split (INVALID_STATE).
 */
KVC_API kvc_error* kvc_cache_batch_split(const kvc_cache* cache, int64_t full_batch_size,
                                         int64_t split_size, kvc_cache** out, size_t capacity,
                                         size_t* count);

/**
 * from_batch_splits(splits): one cache whose rows are the splits' rows
 * stacked in order. The splits must have the same layer kinds, heads, head
 * dims, dtype and stored lengths; they are borrowed for the call.
 */
KVC_API kvc_error* kvc_cache_from_batch_splits(const kvc_cache* const* splits, size_t count,
                                               kvc_cache** out);

/**
 * Reserves room for `tokens` tokens in every dynamic full-attention layer,
 * like std::vector::reserve: updates up to that length then neither allocate
 * nor copy history, and the memory held is exactly what was asked for instead
 * of the up-to-2x of geometric growth. Initialized layers grow now (their
 * history is copied once); layers not yet initialized, and layers a lazy
 * cache creates later, allocate that much at their first update. Sliding and
 * static layers are bounded and ignore it; it never shrinks a layer.
 * tokens in [0, 2^31). Errors: INVALID_ARGUMENT, OUT_OF_MEMORY (then no
 * layer has changed).
 */
KVC_API kvc_error* kvc_cache_reserve(kvc_cache* cache, int64_t tokens);

/**
 * reset(): every layer becomes empty: static buffers are zeroed and their
 * counters set to 0; dynamic layers drop their tokens (keeping their storage
 * for reuse). See docs/differences-from-transformers.md for how this differs
 * from transformers' dynamic layers. Since 0.7 it is also the one call a
 * cache poisoned by a device failure accepts (kvcache/error.h): it empties
 * every layer and the cache works again.
 */
KVC_API kvc_error* kvc_cache_reset(kvc_cache* cache);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_OPS_H */
