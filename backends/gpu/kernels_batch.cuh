/*
 * backends/gpu/kernels_batch.cuh: many strided copies in one launch
 * (copy_4d_batch: the writes of every layer of a decode step), and single
 * copies and fills as batches of one.
 *
 * The plans travel by value in the kernel's parameters, so a launch reads
 * no descriptor memory that the host would have to upload and keep alive.
 * Each plan records its first block (host-computed prefix sums); a block
 * finds its plan by binary search over them, so copies of any sizes share
 * one grid. How many plans fit in one launch is the vendor's parameter
 * limit: see KVC_GPU_BATCH_CAP in gpu_backend.cpp.
 */
#ifndef KVC_GPU_KERNELS_BATCH_CUH
#define KVC_GPU_KERNELS_BATCH_CUH

#include "kernels_common.cuh"

template <int N>
struct gpu_batch_params {
  int32_t count;
  uint32_t blocks; /* sum of the plans' blocks */
  kvc_gpu_copy plans[N];
};

/* Grid-stride over the batch's blocks, so any number of blocks runs on a grid the hardware accepts. */
template <int N, bool FILL>
__global__ void __launch_bounds__(KVC_GPU_BLOCK) gpu_batch_kernel(const KVC_GRID_CONSTANT gpu_batch_params<N> p) {
  for (uint64_t block = blockIdx.x; block < p.blocks; block += gridDim.x) {
    int32_t i = N == 1 ? 0 : kvc_gpu_batch_find(p.plans, p.count, (uint32_t)block);
    gpu_run_share_any<FILL>(p.plans[i], (uint32_t)block - p.plans[i].first_block);
  }
}

#endif /* KVC_GPU_KERNELS_BATCH_CUH */
