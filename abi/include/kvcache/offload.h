/*
 * kvcache/offload.h: moving a layer's K/V between the device tier and the
 * host tier (docs/semantics.md, 'Offloading').
 *
 * A cache created with offloading (kvc_cache_options.offload, or the
 * OFFLOADED presets) does this by itself in kvc_cache_update, in
 * transformers' order: prefetch the next offloadable layer, update, offload
 * the updated layer. These calls are for callers that drive it themselves
 * (for instance to prefetch layer 0 before a step). On the CPU backend the
 * two tiers are separate allocations of host memory; on GPU backends the host
 * tier is pinned memory and the copies are asynchronous on a side stream.
 * Views returned before an offload stay valid until the next mutating call,
 * as always: the device copy an update wrote stays alive until the next
 * update (kvc_memory_info counts it in bytes_device). kvc_cache_offload and
 * kvc_cache_prefetch are mutating calls themselves, and free the copy they
 * leave at once.
 */
#ifndef KVCACHE_OFFLOAD_H
#define KVCACHE_OFFLOAD_H

#include "kvcache/cache.h"

#ifdef __cplusplus
extern "C" {
#endif

/**
 * Moves layer `layer`'s K/V to the host tier. A layer that is already there,
 * not initialized, or of a kind whose K/V never moves is left as it is: the
 * LINEAR kinds that transformers counts as linear (all but
 * KVC_LAYER_LINEAR_DYNAMIC, whose K/V moves while its recurrent states stay
 * on the device), KVC_LAYER_QUANTIZED and KVC_LAYER_SINK. Any other layer
 * can be offloaded, whatever the cache's offload mode. Errors: OUT_OF_RANGE,
 * OUT_OF_MEMORY (nothing moved).
 */
KVC_API kvc_error* kvc_cache_offload(kvc_cache* cache, uint32_t layer);

/**
 * Moves layer `layer`'s K/V back to the device tier (a layer already there is
 * left as it is). Errors: OUT_OF_RANGE, OUT_OF_MEMORY (nothing moved).
 */
KVC_API kvc_error* kvc_cache_prefetch(kvc_cache* cache, uint32_t layer);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_OFFLOAD_H */
