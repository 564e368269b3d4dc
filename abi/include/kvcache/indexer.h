/*
 * kvcache/indexer.h: the indexer keys of sparse-attention layers
 * (transformers' DynamicIndexedLayer and StaticIndexedLayer, layer type
 * "indexed_attention": DeepSeek V3.2, GLM-MoE-DSA; docs/semantics.md,
 * 'Indexed layers').
 *
 * A layer of kind KVC_LAYER_DYNAMIC_INDEXED or KVC_LAYER_STATIC_INDEXED keeps,
 * next to its K/V, one tensor of indexer keys [batch, seq, index_head_dim]
 * (one head). Its first kvc_cache_update_indexer fixes its dtype and width,
 * independently of the K/V; its batch is the layer's (K/V and indexer share
 * one batch). The indexer does not count in any length query. reorder,
 * batch_select_indices, batch_repeat_interleave, batch_split /
 * from_batch_splits, clone, crop and reset act on it too; offloading moves
 * the K/V only (docs/differences-from-transformers.md).
 */
#ifndef KVCACHE_INDEXER_H
#define KVCACHE_INDEXER_H

#include "kvcache/ops.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Cache.update_indexer(indexer_key_states, layer_idx): `x` is
 * [batch, n, index_head_dim] (any strides, n >= 0).
 * KVC_LAYER_DYNAMIC_INDEXED appends x after the stored indexer keys and
 * returns them all, [batch, total, index_head_dim]. KVC_LAYER_STATIC_INDEXED
 * allocates a zeroed [batch, max_cache_len, index_head_dim] buffer on its
 * first call, writes x at its counter, advances the counter by n and returns
 * the whole buffer. The returned view (`*out`, may be NULL) is owned by the
 * cache and valid until its next mutating call; it is strided (rows of the
 * buffer's capacity).
 * Errors, each leaving the cache unchanged: OUT_OF_RANGE (layer beyond the
 * layers; a static write past max_cache_len), INVALID_ARGUMENT (the layer is
 * not indexed: "Cannot call update_indexer on layer i which is a ... layer";
 * x NULL), SHAPE_MISMATCH (x not 3-D, a batch other than the layer's, a
 * width other than the stored one), DTYPE_MISMATCH (a dtype other than the
 * stored one, or one kvcache cannot store), DEVICE_MISMATCH, OUT_OF_MEMORY.
 * Since 0.5.
 */
KVC_API kvc_error* kvc_cache_update_indexer(kvc_cache* cache, uint32_t layer, const kvc_tensor* x, kvc_tensor* out);

/**
 * layers[layer].indexer_keys: the indexer store as kvc_cache_update_indexer
 * returns it; data NULL and ndim 0 before the first update_indexer (and
 * after a reset of a dynamic indexed layer), as transformers' None. The view
 * is owned by the cache, valid until its next mutating call. Errors:
 * OUT_OF_RANGE (layer), INVALID_ARGUMENT (not an indexed layer, out NULL).
 * Since 0.5.
 */
KVC_API kvc_error* kvc_cache_indexer_view(const kvc_cache* cache, uint32_t layer, kvc_tensor* out);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_INDEXER_H */
