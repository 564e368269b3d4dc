/*
 * kvcache/allocator.h: caller-provided storage. Since 0.7.
 *
 * By default a cache's K/V stores and a pool's blocks are allocated by the
 * library from its backend (the CPU heap, cudaMallocAsync, hipMallocAsync).
 * A host framework that wants them to be its own memory (candle or torch
 * tensors, an arena its engine manages) passes a kvc_allocator in
 * kvc_cache_options.allocator, kvc_pool_options.allocator or
 * kvc_load_options.allocator: the views the library returns are then slices
 * of that memory, and the framework can wrap them without a copy.
 * docs/allocator.md explains the choices.
 *
 * The contract:
 *
 *  - What comes from it: every K/V store in the device tier of a cache (the
 *    memory kvc_cache_layer_view and the returned views of a non-quantized
 *    layer point into), and a pool's whole block storage (two buffers per
 *    layer, K and V, allocated once by kvc_pool_create and never grown). Not
 *    from it: the host tier of offloaded layers (pinned memory the backend
 *    makes), quantized records, recurrent states, indexer keys, scratch and
 *    bookkeeping; these stay the backend's and the heap's.
 *  - When: a cache allocates a layer's store at its first update (or early
 *    initialization, or kvc_cache_reserve); a dynamic layer that outgrows
 *    its store gets a new one of about twice the capacity, the kept tokens
 *    are copied into it (a device copy on the cache's stream), and the old
 *    one is freed: growth never reallocates in place, so for a moment both
 *    are live. Clones, batch splits and stacks, loads and restores of a
 *    cache made with an allocator use the same allocator.
 *  - Zero-fill: the allocator returns uninitialized memory; the library
 *    zeroes what it hands out (on the device, on the cache's stream).
 *  - Alignment: `alignment` is a power of two (KVC_ALLOCATOR_ALIGNMENT,
 *    256 bytes, the alignment cudaMalloc/hipMalloc give and the widest any
 *    backend kernel loads); the returned pointer must be a multiple of it.
 *  - Device and stream: `device` is the cache's or pool's device
 *    ({KVC_DEVICE_CUDA, n}, ...), and memory must be addressable there
 *    (device memory for CUDA/ROCm, any host memory for the CPU). `stream` is
 *    the stream the cache or pool is bound to (NULL: the default stream, and
 *    always NULL on the CPU). Work issued on it before `free` may still use
 *    the buffer: free it stream-ordered (cudaFreeAsync(ptr, stream)) or
 *    synchronize the stream first. Memory handed out by `alloc` is used by
 *    work issued on `stream` afterwards.
 *  - Failure: `alloc` returns NULL; the call that needed memory returns
 *    KVC_ERROR_OUT_OF_MEMORY and changes nothing (the stores it had are
 *    kept; the message names the allocator and the bytes asked for, for a
 *    pool's storage and a layer's first or grown store). A pointer
 *    that is not aligned as asked is freed at once and counts as a NULL.
 *    `free` cannot fail.
 *  - Lifetime: the kvc_allocator struct is copied at creation, but `ctx` and
 *    the functions must stay valid until the last cache or pool made with
 *    them (clones and loads included) is destroyed. Every pointer `alloc`
 *    returned is given to `free` exactly once, with the same `bytes` and
 *    `device`, at the latest by kvc_cache_destroy / kvc_pool_destroy.
 *    `release` (optional, since 0.7) tells when that moment has come: it is
 *    called once for every successful kvc_cache_create,
 *    kvc_cache_create_from_tensors, kvc_pool_create or load given the
 *    allocator, after the last object sharing it (the created one and every
 *    clone, split, stack and pair made from it) was destroyed and after the
 *    last `free`. A call that fails never calls it: `ctx` is still the
 *    caller's. A binding that cannot see the library's clones (a reference
 *    counted context, a handle table) frees its context there.
 *  - Threads: the library calls the allocator from the thread calling into
 *    the cache or pool, inside that call. Caches made from one another (a
 *    clone and its source) share the allocator and may be used from
 *    different threads at once (distinct handles): the allocator must then
 *    be thread-safe. A single cache or pool never calls it concurrently.
 */
#ifndef KVCACHE_ALLOCATOR_H
#define KVCACHE_ALLOCATOR_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/tensor.h"
#include "kvcache/version.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The alignment the library asks every allocation for, in bytes. Since 0.7. */
#define KVC_ALLOCATOR_ALIGNMENT 256

/**
 * Alloc/free callbacks with a context. Since 0.7.
 * Published sizes: 32, 40 (0.7; 40 adds `release`).
 */
typedef struct kvc_allocator {
  uint32_t struct_size; /**< sizeof(kvc_allocator) */
  void* ctx;            /**< passed to both functions; owned by the caller */
  /** `bytes` (> 0) aligned to `alignment` on `device`, ordered on `stream`; NULL when it cannot. */
  void* (*alloc)(void* ctx, size_t bytes, size_t alignment, kvc_device device, void* stream);
  /** Gives back a pointer `alloc` returned, with the `bytes` and `device` it was asked for. */
  void (*free)(void* ctx, void* ptr, size_t bytes, kvc_device device, void* stream);
  /** NULL, or called once when the library is done with `ctx` (see Lifetime in kvcache/allocator.h). Since 0.7. */
  void (*release)(void* ctx);
} kvc_allocator;

#define KVC_ALLOCATOR_INIT {sizeof(kvc_allocator), NULL, NULL, NULL, NULL}
/** Sets `allocator` to KVC_ALLOCATOR_INIT. Never fails; NULL is ignored. Since 0.7. */
KVC_API void kvc_allocator_init(kvc_allocator* allocator);

/*
 * The library's own host memory (the CPU backend's stores and pool blocks,
 * and the host tier of offloading on the CPU, when no kvc_allocator is
 * given). Since 0.7.
 *
 * A block of 1 MiB or more is mapped aligned to 2 MiB and advised as huge
 * pages (Linux's transparent huge pages in their "madvise" mode), and when it
 * is freed the library keeps it for the next block of about the same size
 * (no smaller, at most a quarter larger) instead of giving it back to the
 * kernel: a restore, a load or a new cache then writes into memory that is
 * already faulted in, where fresh memory costs a fault and the kernel's
 * zeroing per page on first write. A kept block goes back to the kernel when
 * it has waited 10 seconds without reuse (noticed at the next allocation or
 * free of such a block), when keeping it would put more than the retention
 * limit aside, and on kvc_host_memory_release. The limit is
 * $KVC_HOST_MEMORY_RETAIN (bytes, read once) or else the smaller of 1 GiB and an eighth of the
 * machine's memory, until kvc_host_memory_set_retention sets it.
 * $KVC_HOST_MEMORY_HUGE_PAGES=0 turns the huge-page advice off (a kernel
 * that stalls compacting memory to find huge pages). docs/allocator.md says
 * why, and what it costs.
 *
 * These functions never fail and may be called from any thread at any time.
 * GPU backends (device memory, pinned host tiers) are not affected: their
 * runtimes pool memory themselves.
 */

/** Sets the most bytes kept aside for reuse (0: keep nothing, and give back what is kept now); returns the
 * previous limit. Blocks kept past the new limit are given back at once, the oldest first. Since 0.7. */
KVC_API uint64_t kvc_host_memory_set_retention(uint64_t max_bytes);
/** Gives every kept block back to the kernel; returns the bytes given back. The limit is unchanged. Since 0.7. */
KVC_API uint64_t kvc_host_memory_release(void);
/** The bytes kept aside for reuse now (blocks idle past their time are given back first). Since 0.7. */
KVC_API uint64_t kvc_host_memory_retained(void);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_ALLOCATOR_H */
