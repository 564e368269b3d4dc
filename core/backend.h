/*
 * core/backend.h: the backend table (DESIGN.md section 5).
 *
 * A backend moves bytes on one device type; it knows nothing about caches,
 * windows or layers. The core reaches every byte of K/V storage only through
 * this table, so the CUDA and HIP plugins slot in without touching the core.
 * The table is versioned: struct_size and api_version are checked when a
 * backend registers or a plugin is loaded; new entries are only appended.
 *
 * Conventions: pointers are device pointers of the backend's device type.
 * Strides and shapes are in elements, always 4-D [batch, heads, seq, dim].
 * Functions return 0 on success, non-zero on failure (the core turns that
 * into a kvc_error). `ctx` is the backend's own pointer.
 */
#ifndef KVC_CORE_BACKEND_H
#define KVC_CORE_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/tensor.h"

#define KVC_BACKEND_API_VERSION 2 /* 2: the host tier of offloading */

typedef struct kvc_backend {
  uint32_t struct_size;     /* sizeof(kvc_backend) of the backend's build */
  uint32_t api_version;     /* KVC_BACKEND_API_VERSION of the backend's build */
  const char* name;         /* "cpu", "cuda", "hip" */
  kvc_device_type device_type;
  void* ctx;

  /* Number of devices of this type, 0 if none. */
  int (*device_count)(void* ctx);

  /* Zero-filled allocation of `bytes` (> 0) on device `device_id`; NULL on failure. */
  void* (*alloc_zeroed)(void* ctx, int32_t device_id, size_t bytes);
  void (*free)(void* ctx, int32_t device_id, void* ptr);

  /*
   * dst[b,h,s,d] = src[b,h,s,d] over `shape`. Source and destination may
   * overlap when they are the same buffer with the same strides and the move
   * is along the seq axis (window compaction): the copy must then behave like
   * memmove within each (b, h) row.
   */
  int (*copy_4d)(void* ctx, int32_t device_id, void* dst, const int64_t dst_strides[4], const void* src,
                 const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);

  /* dst[b,h,s,d] = 0 over `shape`. */
  int (*fill_zero_4d)(void* ctx, int32_t device_id, void* dst, const int64_t strides[4],
                      const int64_t shape[4], size_t elem_size);

  /*
   * For i in [0, count): dst row dst_rows[i] = src row src_rows[i] (a row is
   * one batch entry: shape[1..3] elements). Index arrays are host memory.
   * Rows do not overlap between dst and src unless the buffers are distinct.
   */
  int (*copy_rows)(void* ctx, int32_t device_id, void* dst, const int64_t dst_strides[4], const int64_t* dst_rows,
                   const void* src, const int64_t src_strides[4], const int64_t* src_rows, int64_t count,
                   const int64_t row_shape[4], size_t elem_size);

  /*
   * Version 2: the host tier, where offloaded layers keep their K/V (spec
   * A.11). On the CPU backend it is ordinary heap memory and every copy is
   * synchronous. A GPU backend allocates it as pinned host memory mapped into
   * the device's address space, so every entry above also accepts host-tier
   * pointers (operations on an offloaded layer run there, through unified
   * addressing), and runs the tier copies asynchronously: offloads on the
   * compute stream after the work issued before them, prefetches on a side
   * stream that first waits for the compute stream.
   */
  void* (*host_alloc_zeroed)(void* ctx, int32_t device_id, size_t bytes); /* NULL on failure */
  void (*host_free)(void* ctx, int32_t device_id, void* ptr);
  /*
   * dst[b,h,s,d] = src[b,h,s,d] from one tier to the other: `to_host` 1 is
   * an offload (src device tier, dst host tier), 0 a prefetch. Buffers never
   * overlap. A prefetch may still be running when this returns: work issued
   * after the next tier_wait sees its result. free and host_free may be given
   * a buffer that a copy issued before is still reading; the backend orders
   * the release after it (GPU: stream-ordered free).
   */
  int (*copy_tier_4d)(void* ctx, int32_t device_id, int to_host, void* dst, const int64_t dst_strides[4],
                      const void* src, const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);
  /* Work issued after this call waits for every copy_tier_4d issued before it (GPU: an event wait, no host sync). */
  int (*tier_wait)(void* ctx, int32_t device_id);
} kvc_backend;

/* The CPU backend, always built in. */
const kvc_backend* kvc_cpu_backend(void);

#endif /* KVC_CORE_BACKEND_H */
