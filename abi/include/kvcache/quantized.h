/*
 * kvcache/quantized.h: the options of quantized layers (docs/semantics.md,
 * 'Quantized layers').
 *
 * A quantized layer keeps old tokens as bit-packed integer codes with one
 * scale and zero point per group, and the most recent tokens in full
 * precision (the residual). Two quantizers, as in transformers:
 *  - KVC_QUANTIZER_QUANTO (optimum-quanto's MaxOptimizer): asymmetric
 *    min/max per group; nbits 2 or 4; axis 0 (groups of q_group_size
 *    consecutive head_dim elements) or -1 (one channel over q_group_size
 *    positions);
 *  - KVC_QUANTIZER_HQQ (Half-Quadratic Quantization): min/max followed by the
 *    proximal zero-point refinement with its early stop; nbits 1, 2, 3, 4 or
 *    8; axis 1 (consecutive elements) or 0 (strided groups).
 *
 * Three modes:
 *  - KVC_QUANT_MODE_INCREMENTAL (the default): tokens are quantized once,
 *    when they age out of a residual of residual_length tokens, in whole
 *    groups; history is never quantized again, so an update costs the same
 *    at any context length. Per-token axes need head_dim % q_group_size == 0;
 *    per-channel axes quantize q_group_size tokens at a time. The update
 *    returns the dequantized history followed by the residual, from a buffer
 *    the layer keeps and extends (each token is dequantized once).
 *  - KVC_QUANT_MODE_TRANSFORMERS: transformers' timeline exactly (5.23): the
 *    prefill is returned unquantized, the residual is flushed when the
 *    residual plus the new tokens reach residual_length, and each flush
 *    quantizes the whole history again from its dequantized values, so a
 *    model produces the same tokens as with transformers' QuantizedCache;
 *  - KVC_QUANT_MODE_COMPACT: incremental mode's tokens and values without
 *    the full-precision copy of the history (see its definition below).
 *
 * In every mode crop, reorder, batch_select_indices, batch_repeat_interleave
 * and reset act on the quantized tokens as well as on the residual
 * (transformers touches only the residual; see
 * docs/differences-from-transformers.md).
 */
#ifndef KVCACHE_QUANTIZED_H
#define KVCACHE_QUANTIZED_H

#include <stdint.h>

#include "kvcache/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef int32_t kvc_quantizer;
#define KVC_QUANTIZER_QUANTO 1
#define KVC_QUANTIZER_HQQ    2

typedef int32_t kvc_quant_mode;
#define KVC_QUANT_MODE_INCREMENTAL  0
#define KVC_QUANT_MODE_TRANSFORMERS 1
/**
 * Tokens are quantized exactly as in incremental mode (once, when they leave
 * the residual, in whole groups, never again) and an update returns the same
 * values, but the layer keeps only the packed groups and the full-precision
 * residual. Each update dequantizes the layer's quantized history into a
 * scratch buffer shared by all layers of the cache (allocated once, grown
 * geometrically, reused: no allocation per step in steady state), followed
 * by the residual and the new tokens, and returns a view of it. A call that
 * updates several layers (kvc_cache_update_all) gives each its own region
 * of the scratch, so every view it returns stays valid, until the next
 * mutating call as always. A step costs O(context) dequantization (as
 * transformers' does, without its allocations); memory is codes + scales +
 * residual + the working copy of one call's layers. kvc_cache_layer_view of
 * such a layer shows the residual only (the store; seq_length and the mask
 * sizes count the quantized tokens too): the view is const, so it cannot
 * dequantize; the last update's return is the full history.
 */
#define KVC_QUANT_MODE_COMPACT      2

/**
 * How a QUANTIZED layer quantizes. Defaults are transformers' (nbits 4,
 * axes 0, q_group_size 64, residual_length 128) with the quanto quantizer in
 * incremental mode.
 * Published sizes: 40 (0.2).
 */
typedef struct kvc_quant_options {
  uint32_t struct_size;      /**< sizeof(kvc_quant_options) */
  kvc_quantizer quantizer;   /**< default KVC_QUANTIZER_QUANTO */
  kvc_quant_mode mode;       /**< default KVC_QUANT_MODE_INCREMENTAL */
  int32_t nbits;             /**< quanto {2, 4}; hqq {1, 2, 3, 4, 8} */
  int32_t axis_key;          /**< quanto {0, -1}; hqq {0, 1} */
  int32_t axis_value;        /**< as axis_key */
  int64_t q_group_size;      /**< elements per group, in [1, 2^31) */
  int64_t residual_length;   /**< full-precision tokens kept, in [0, 2^31) */
} kvc_quant_options;

#define KVC_QUANT_OPTIONS_INIT \
  {sizeof(kvc_quant_options), KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 64, 128}
/** Sets `options` to KVC_QUANT_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_quant_options_init(kvc_quant_options* options);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_QUANTIZED_H */
