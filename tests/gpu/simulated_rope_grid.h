/*
 * tests/gpu/simulated_rope_grid.h: the sink layers' kernels
 * (backends/gpu/kernels_rope.cuh) run on the CPU as a simulated grid: every
 * thread of every block takes the work items the kernel's grid-stride loop
 * gives it and runs gpu_rope.h's item function on them, as the device does.
 * Blocks run last to first and threads in a scrambled order, since a GPU
 * promises no order either: a result that depended on one would show.
 *
 * Shared by the emulated device (which computes with the kernels'
 * arithmetic instead of the CPU backend's) and tests/unit/gpu_rope (which
 * compares it with the CPU backend bit for bit).
 */
#ifndef KVC_SIMULATED_ROPE_GRID_H
#define KVC_SIMULATED_ROPE_GRID_H

#include "gpu_rope.h"

/* Thread t of a block in the simulated order: a permutation of [0, KVC_GPU_BLOCK) (odd multiplier mod a power of 2). */
static inline int64_t kvc_sim_thread(int64_t t) { return (t * 77 + 13) % KVC_GPU_BLOCK; }

/* gpu_rerotate_kernel<dtype> (or its by-value variant) over `grid` blocks with the tables rcos/rsin. */
static inline void kvc_sim_rerotate(const kvc_gpu_rope* p, const float* rcos, const float* rsin, uint32_t grid) {
  const int64_t items = kvc_gpu_rope_items(p), step = (int64_t)grid * KVC_GPU_BLOCK;
  for (int64_t block = (int64_t)grid - 1; block >= 0; block--)
    for (int64_t t = 0; t < KVC_GPU_BLOCK; t++)
      for (int64_t i = block * KVC_GPU_BLOCK + kvc_sim_thread(t); i < items; i += step)
        kvc_gpu_rerotate_item(p, p->dtype, rcos, rsin, i);
}

/* gpu_read_f32_kernel<dtype> over `grid` blocks into dst. */
static inline void kvc_sim_read_f32(const kvc_gpu_read* p, uint32_t* dst, uint32_t grid) {
  const int64_t items = kvc_gpu_read_items(p), step = (int64_t)grid * KVC_GPU_BLOCK;
  for (int64_t block = (int64_t)grid - 1; block >= 0; block--)
    for (int64_t t = 0; t < KVC_GPU_BLOCK; t++)
      for (int64_t i = block * KVC_GPU_BLOCK + kvc_sim_thread(t); i < items; i += step)
        kvc_gpu_read_item(p, p->dtype, dst, i);
}

#endif /* KVC_SIMULATED_ROPE_GRID_H */
