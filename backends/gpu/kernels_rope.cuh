/*
 * backends/gpu/kernels_rope.cuh: the kernels of sink layers (gpu_rope.cpp):
 * the re-rotation of kept keys and the read of cos/sin as float32. Each
 * thread runs work items of gpu_rope.h, grid-striding past the grid cap;
 * the dtype is a template parameter so that each kernel is one dtype's code.
 */
#ifndef KVC_GPU_KERNELS_ROPE_CUH
#define KVC_GPU_KERNELS_ROPE_CUH

#include "gpu_rope.h"
#include "gpu_vendor.h"

/* The items of one launch from thread blockIdx.x * blockDim.x + threadIdx.x on, a grid apart. */
template <int DT>
static __device__ __forceinline__ void gpu_rerotate_items(const kvc_gpu_rope& p, const float* rcos,
                                                          const float* rsin) {
  const int64_t items = kvc_gpu_rope_items(&p);
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += step)
    kvc_gpu_rerotate_item(&p, DT, rcos, rsin, i);
}

/* The tables in device memory (uploaded in stream order by the launch). */
template <int DT>
__global__ void __launch_bounds__(KVC_GPU_BLOCK)
    gpu_rerotate_kernel(const kvc_gpu_rope p, const float* __restrict__ rcos, const float* __restrict__ rsin) {
  gpu_rerotate_items<DT>(p, rcos, rsin);
}

/* The tables by value in the parameters, cos then sin ([n[2]][dim] each): nothing to upload or keep alive. */
template <int N>
struct gpu_rope_params {
  kvc_gpu_rope rope;
  float table[N];
};

template <int DT, int N>
__global__ void __launch_bounds__(KVC_GPU_BLOCK) gpu_rerotate_inline_kernel(const KVC_GRID_CONSTANT gpu_rope_params<N> p) {
  const int64_t values = (int64_t)p.rope.n[2] * p.rope.dim;
  gpu_rerotate_items<DT>(p.rope, p.table, p.table + values);
}

template <int DT>
__global__ void __launch_bounds__(KVC_GPU_BLOCK) gpu_read_f32_kernel(const kvc_gpu_read p, uint32_t* __restrict__ dst) {
  const int64_t items = kvc_gpu_read_items(&p);
  const int64_t step = (int64_t)gridDim.x * blockDim.x;
  for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += step)
    kvc_gpu_read_item(&p, DT, dst, i);
}

#endif /* KVC_GPU_KERNELS_ROPE_CUH */
