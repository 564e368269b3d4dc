/*
 * backends/gpu/kernels_fill.cuh: zero fills (fill_zero_4d, and the zeroing
 * of host-tier buffers that are handed out again). A fill is a copy plan
 * with no source, run by the batched kernel with FILL set, so it shares the
 * copy's vectorised, strided walk and writes through mapped host pointers
 * as well as device ones.
 */
#ifndef KVC_GPU_KERNELS_FILL_CUH
#define KVC_GPU_KERNELS_FILL_CUH

#include "kernels_batch.cuh"

#define gpu_fill_kernel gpu_batch_kernel<1, true>

#endif /* KVC_GPU_KERNELS_FILL_CUH */
