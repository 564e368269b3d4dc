/*
 * kvcache.h: the key/value caches of transformer inference behind a C ABI.
 *
 * kvcache holds every kind of KV cache Hugging Face transformers has, with
 * transformers' semantics (same returned shapes, same positions kept, same
 * lengths and mask sizes), on interchangeable CPU, CUDA and ROCm backends.
 * docs/semantics.md describes what every layer kind and operation does.
 *
 * Conventions that hold for every function of this header:
 *
 *  - Names: functions kvc_<object>_<verb>, opaque types kvc_<object>, macros
 *    and enumerators KVC_*. Only kvc_* symbols leave the shared library.
 *  - Handles are opaque and allocated by the library: kvc_x_create(options,
 *    &out) and kvc_x_destroy(x), which accepts NULL and never fails.
 *    Out-parameters come last.
 *  - Errors are returned: a fallible function returns kvc_error* (NULL means
 *    success), owned by the caller (kvc_error_destroy). A failed call changes
 *    nothing: no state is touched, out-parameters keep their values, nothing
 *    leaks.
 *  - Option structs begin with uint32_t struct_size, grow only by appending,
 *    and come with a KVC_X_OPTIONS_INIT macro and a kvc_x_options_init()
 *    function. A struct_size the library does not know is rejected.
 *  - Enumerations cross the ABI as fixed-width integers and are never
 *    renumbered.
 *  - Ownership: every pointer argument is borrowed for the duration of the
 *    call unless its documentation says otherwise. Returned views (kvc_kv)
 *    point into cache-owned memory and stay valid until the next call that
 *    mutates that cache.
 *
 * Thread safety: a handle (kvc_cache, kvc_encoder_decoder_cache, kvc_pool
 * with its sequences, kvc_tier) is used by one thread at a time; distinct
 * handles are fully independent and may be used concurrently from different
 * threads. Functions taking a const handle do not modify it, so several
 * threads may call them concurrently as long as no thread mutates that handle
 * meanwhile. Overlapping calls are detected, never undefined behaviour (since
 * 0.7): a call that finds another thread inside a call on the same handle
 * that it may not share (a mutating call meets anything, a const call meets
 * a mutating one) returns KVC_ERROR_BUSY at once and does nothing. The few
 * functions that cannot return an error wait for the other call instead
 * (kvc_cache_num_layers, kvc_cache_stream, kvc_pool_sequence_length,
 * kvc_pool_sequence_committed, kvc_pool_tier, kvc_pool_sequence_destroy), and
 * so do the destroys; destroying a handle while another thread may still call
 * it afterwards remains the caller's bug. A sequence's calls, and a tier's
 * once given to a pool, count as calls on the pool; the halves of an
 * encoder-decoder cache are handles of their own, and a call on the pair
 * (but kvc_encoder_decoder_cache_is_updated) is a call on both halves too.
 * Views returned before are
 * not checked: a view read while another thread mutates its handle is the
 * caller's race. docs/threads.md has the details and the bindings' behaviour.
 * Error objects are independent values. Global functions (kvc_version,
 * kvc_features, the *_init functions, kvc_dtype_*, kvc_block_hash*) are
 * thread-safe.
 */
#ifndef KVCACHE_H
#define KVCACHE_H

#include "kvcache/version.h"
#include "kvcache/error.h"
#include "kvcache/tensor.h"
#include "kvcache/allocator.h"
#include "kvcache/cache.h"
#include "kvcache/ops.h"
#include "kvcache/encoder_decoder.h"
#include "kvcache/offload.h"
#include "kvcache/quantized.h"
#include "kvcache/recurrent.h"
#include "kvcache/indexer.h"
#include "kvcache/block_hash.h"
#include "kvcache/pool.h"
#include "kvcache/tier.h"
#include "kvcache/redis_tier.h"
#include "kvcache/persist.h"

#endif /* KVCACHE_H */
