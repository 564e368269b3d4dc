/*
 * kvcache/recurrent.h: conv and SSM states of linear-attention layers
 * (Mamba, Mamba2, Jamba, Bamba; docs/semantics.md, 'Linear-attention layers').
 *
 * A layer of a LINEAR kind holds num_states pairs of states:
 *  - a conv state [batch, channels, K] with the time axis last, K the conv
 *    kernel size;
 *  - a recurrent (SSM) state of any shape with batch first (Mamba
 *    [batch, d_inner, d_state], Mamba2 [batch, heads, head_dim, d_state]),
 *    up to 6 dimensions.
 * Each state is allocated (zeroed) by its first update, which fixes its
 * shape and dtype. Returned views are owned by the cache and valid until its
 * next mutating call. reorder, batch_select_indices, batch_repeat_interleave,
 * batch_split/from_batch_splits, clone and reset act on the states too
 * (transformers' LinearAttentionLayer has no batch ops; see
 * docs/differences-from-transformers.md).
 */
#ifndef KVCACHE_RECURRENT_H
#define KVCACHE_RECURRENT_H

#include "kvcache/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Options of kvc_cache_update_conv_state. NULL options = all defaults. */
typedef struct kvc_conv_update_options {
  uint32_t struct_size;           /**< sizeof(kvc_conv_update_options) */
  uint32_t state_index;           /**< which state pair, < num_states; default 0 */
  int64_t conv_kernel_size;       /**< K for a state not yet allocated when the layer has none
                                       configured; 0 = the input's last dimension (transformers).
                                       Once K is known, any other nonzero value is INVALID_ARGUMENT */
  const int64_t* cache_position;  /**< legacy MambaCache API (transformers <= 5.4): roll the state
                                       left by one and write the input's columns at
                                       clamp(cache_position, 0, K-1); NULL = the current API.
                                       Borrowed for the call. */
  uint32_t cache_position_length; /**< entries in cache_position = the input's last dimension */
} kvc_conv_update_options;

#define KVC_CONV_UPDATE_OPTIONS_INIT {sizeof(kvc_conv_update_options), 0, 0, NULL, 0}
/** Sets `options` to KVC_CONV_UPDATE_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_conv_update_options_init(kvc_conv_update_options* options);

/**
 * update_conv_state(x, layer, state_idx): `x` is [batch, channels, n].
 * Current API (cache_position NULL), LinearAttentionLayer.update_conv_state:
 * the first call returns x itself left-padded with zeros to K columns when
 * n < K (not padded while recording past); later calls return the stored
 * columns followed by x. The state keeps the last K columns (with past
 * recording: every column, until crop). The first call after a reset is a
 * first call again.
 * Legacy API (cache_position given), MambaCache.update_conv_state: rolls the
 * state left by one, writes x's columns at the clamped positions and returns
 * the state; a prefill passes cache_position = 0..K-1 and K columns.
 * The returned view (`*out`, may be NULL) is owned by the cache; like the
 * state view it is strided (time contiguous, batch and channel strides set
 * by the buffer's capacity).
 * Errors: OUT_OF_RANGE (layer, state_index), INVALID_ARGUMENT (a layer that
 * is not LINEAR: "Cannot call update_conv_state on a non-LinearAttention
 * layer"), SHAPE_MISMATCH, DTYPE_MISMATCH, DEVICE_MISMATCH, INVALID_STATE
 * (cache_position on a recorded state longer than K), OUT_OF_MEMORY.
 */
KVC_API kvc_error* kvc_cache_update_conv_state(kvc_cache* cache, uint32_t layer, const kvc_tensor* x,
                                               const kvc_conv_update_options* options, kvc_tensor* out);

/**
 * update_recurrent_state(state, layer, state_idx) (MambaCache's
 * update_ssm_state): copies `state` (batch first, 1 to 6 dimensions) into the
 * layer's recurrent state, in place, and returns a view of it in `*out` (may
 * be NULL). Errors as kvc_cache_update_conv_state.
 */
KVC_API kvc_error* kvc_cache_update_recurrent_state(kvc_cache* cache, uint32_t layer, uint32_t state_index,
                                                    const kvc_tensor* state, kvc_tensor* out);

/**
 * Views of a layer's states (transformers' conv_states[i] and
 * recurrent_states[i]); either output may be NULL. A state that has not been
 * allocated yet is returned with data NULL and ndim 0. Views are owned by the
 * cache, valid until its next mutating call. Errors: OUT_OF_RANGE,
 * INVALID_ARGUMENT (not a LINEAR kind).
 */
KVC_API kvc_error* kvc_cache_state_view(const kvc_cache* cache, uint32_t layer, uint32_t state_index,
                                        kvc_tensor* conv_state, kvc_tensor* recurrent_state);

/**
 * has_previous_state(layer, state_idx): whether the state(s) have had their
 * first conv update. `layer` KVC_ALL_LAYERS means the last linear layer;
 * `state_index` -1 means all states of the layer; a layer index beyond the
 * layers gives 0. Errors: INVALID_ARGUMENT when there is no linear layer or
 * the layer is not linear, OUT_OF_RANGE for a state index beyond the layer's
 * pairs (or a layer or state index below -1).
 */
KVC_API kvc_error* kvc_cache_has_previous_state(const kvc_cache* cache, int32_t layer, int32_t state_index,
                                                int* out);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_RECURRENT_H */
