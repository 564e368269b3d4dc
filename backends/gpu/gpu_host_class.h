/*
 * backends/gpu/gpu_host_class.h: the sizes the GPU backend's pinned host
 * buffers come in (gpu_exec.cpp). A buffer given back is kept and handed
 * out again for any request of its class, so that steps of varying sizes
 * (a staged row batch, a growing offloaded store, a RoPE table) reuse
 * buffers instead of pinning new ones: pinning and unpinning are slow, and
 * unpinning (cudaFreeHost, hipHostFree) waits for the whole device.
 *
 * Classes: KVC_GPU_HOST_CLASS_MIN and below share one class; above it, the
 * classes are 2^k times 1, 1.25, 1.5 and 1.75, so a buffer is at most a
 * quarter larger than its request (powers of two would pin up to twice the
 * host tier's bytes, and the tier is the largest pinned use). Plain C, so
 * that a unit test (tests/unit/gpu_plan) checks it without a GPU.
 */
#ifndef KVC_GPU_HOST_CLASS_H
#define KVC_GPU_HOST_CLASS_H

#include <stddef.h>
#include <stdint.h>

/* The smallest class: one page's worth of small requests share it. */
#define KVC_GPU_HOST_CLASS_MIN ((size_t)4096)

/* The class (the buffer's capacity) of a request of `bytes`; 0 when no class holds it (near SIZE_MAX). */
static inline size_t kvc_gpu_host_class(size_t bytes) {
  if (bytes <= KVC_GPU_HOST_CLASS_MIN) return KVC_GPU_HOST_CLASS_MIN;
  int k = 63;
  while (!(((uint64_t)bytes >> k) & 1)) k--; /* 2^k <= bytes < 2^(k+1), k >= 12 */
  const size_t step = (size_t)1 << (k - 2);
  if (bytes > SIZE_MAX - (step - 1)) return 0;
  return (bytes + step - 1) / step * step;
}

#endif /* KVC_GPU_HOST_CLASS_H */
