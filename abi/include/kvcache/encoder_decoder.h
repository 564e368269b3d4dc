/*
 * kvcache/encoder_decoder.h: EncoderDecoderCache (docs/semantics.md,
 * 'Encoder-decoder caches').
 *
 * A pair of caches (self-attention over the generated tokens, cross-attention
 * over the encoder output) plus, per layer, whether the cross-attention K/V
 * have been computed already ("is_updated"). Models compute cross K/V once, at
 * the first decoder step, and reuse them afterwards.
 */
#ifndef KVCACHE_ENCODER_DECODER_H
#define KVCACHE_ENCODER_DECODER_H

#include "kvcache/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque encoder-decoder cache handle. */
typedef struct kvc_encoder_decoder_cache kvc_encoder_decoder_cache;

/**
 * Takes ownership of `self_attention` and `cross_attention` on success (do not
 * destroy them yourself afterwards; reach them through the accessors below).
 * On error the caller still owns both. is_updated[i] starts as
 * "cross-attention layer i holds tokens". The two must be distinct handles.
 */
KVC_API kvc_error* kvc_encoder_decoder_cache_create(kvc_cache* self_attention, kvc_cache* cross_attention,
                                                    kvc_encoder_decoder_cache** out);

/** Frees the pair and both caches. Accepts NULL. */
KVC_API void kvc_encoder_decoder_cache_destroy(kvc_encoder_decoder_cache* cache);

/**
 * The self-attention cache, borrowed: valid until `cache` is destroyed. Use it
 * for update, seq_length, max_length, mask_sizes (transformers delegates those
 * to the self-attention cache). NULL for NULL.
 */
KVC_API kvc_cache* kvc_encoder_decoder_cache_self_attention(kvc_encoder_decoder_cache* cache);

/** The cross-attention cache, borrowed: valid until `cache` is destroyed. NULL for NULL. */
KVC_API kvc_cache* kvc_encoder_decoder_cache_cross_attention(kvc_encoder_decoder_cache* cache);

/** Whether cross-attention layer `layer` is computed (0 or 1). Indices beyond it give 0. */
KVC_API kvc_error* kvc_encoder_decoder_cache_is_updated(const kvc_encoder_decoder_cache* cache,
                                                        uint32_t layer, int32_t* out);

/**
 * The model's cross-attention protocol for one layer: if `layer` is not yet
 * updated, store key/value in the cross-attention cache and mark it updated;
 * either way return the cross-attention K/V views in `*out` (NULL allowed).
 * Once updated, key and value may be NULL (they are ignored).
 */
KVC_API kvc_error* kvc_encoder_decoder_cache_update_cross(kvc_encoder_decoder_cache* cache, uint32_t layer,
                                                          const kvc_tensor* key, const kvc_tensor* value,
                                                          kvc_kv* out);

/** Crops the self-attention cache only (cross K/V are never cropped). Dynamic caches only. */
KVC_API kvc_error* kvc_encoder_decoder_cache_crop(kvc_encoder_decoder_cache* cache, int64_t tokens);

/** Reorders both caches. */
KVC_API kvc_error* kvc_encoder_decoder_cache_reorder(kvc_encoder_decoder_cache* cache,
                                                     const int64_t* beam_idx, size_t count);

/** Both caches; both must be dynamic (UNSUPPORTED otherwise). */
KVC_API kvc_error* kvc_encoder_decoder_cache_batch_repeat_interleave(kvc_encoder_decoder_cache* cache,
                                                                     int64_t repeats);

/** Both caches; both must be dynamic (UNSUPPORTED otherwise). */
KVC_API kvc_error* kvc_encoder_decoder_cache_batch_select_indices(kvc_encoder_decoder_cache* cache,
                                                                  const int64_t* indices, size_t count);

/**
 * Splits both caches (legacy EncoderDecoderCache.batch_split); both must be
 * dynamic. Output convention as kvc_cache_batch_split.
 */
KVC_API kvc_error* kvc_encoder_decoder_cache_batch_split(const kvc_encoder_decoder_cache* cache,
                                                         int64_t full_batch_size, int64_t split_size,
                                                         kvc_encoder_decoder_cache** out, size_t capacity,
                                                         size_t* count);

/** Stacks splits of both caches; is_updated of the result is that of splits[0]. */
KVC_API kvc_error* kvc_encoder_decoder_cache_from_batch_splits(
    const kvc_encoder_decoder_cache* const* splits, size_t count, kvc_encoder_decoder_cache** out);

/** Resets both caches and marks every cross-attention layer as not updated. */
KVC_API kvc_error* kvc_encoder_decoder_cache_reset(kvc_encoder_decoder_cache* cache);

/** Deep copy of both caches and the is_updated flags. */
KVC_API kvc_error* kvc_encoder_decoder_cache_clone(const kvc_encoder_decoder_cache* cache,
                                                   kvc_encoder_decoder_cache** out);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_ENCODER_DECODER_H */
