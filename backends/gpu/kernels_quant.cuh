/*
 * backends/gpu/kernels_quant.cuh: the one kernel of the quantizer entries:
 * a grid-stride loop that runs thread t of a phase (gpu_quant_plan.h) for
 * every t below `threads`. The per-thread functions are plain C shared with
 * the CPU tests; this file only puts them on a grid.
 */
#ifndef KVC_GPU_KERNELS_QUANT_CUH
#define KVC_GPU_KERNELS_QUANT_CUH

#include "gpu_quant_plan.h"
#include "gpu_vendor.h"

static __device__ __forceinline__ void gpu_quant_thread(const kvc_gpu_quant* p, int32_t phase, int64_t t) {
  kvc_gpu_quant_thread(p, phase, t);
}
static __device__ __forceinline__ void gpu_quant_thread(const kvc_gpu_dequant* p, int32_t phase, int64_t t) {
  (void)phase;
  kvc_gpu_dequant_thread(p, t);
}
static __device__ __forceinline__ void gpu_quant_thread(const kvc_gpu_fp8* p, int32_t phase, int64_t t) {
  kvc_gpu_fp8_thread(p, phase, t);
}

template <typename P>
__global__ void __launch_bounds__(KVC_GPU_BLOCK)
    gpu_quant_kernel(const KVC_GRID_CONSTANT P p, int32_t phase, int64_t threads) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t t = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; t < threads; t += stride)
    gpu_quant_thread(&p, phase, t);
}

#endif /* KVC_GPU_KERNELS_QUANT_CUH */
