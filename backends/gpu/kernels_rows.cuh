/*
 * backends/gpu/kernels_rows.cuh: gather/scatter of batch rows (copy_rows:
 * reorder for beam search, select, repeat-interleave). Row i of the launch
 * copies batch row src_row into dst_row; both indices come from host memory
 * and travel by value in the parameters (as 32-bit pairs), so no index
 * upload is needed; a larger index list is split across launches
 * (KVC_GPU_ROWS_CAP in gpu_backend.cpp). grid.y is the pair, grid.x the
 * blocks of one row's plan (a [1, heads, seq, dim] copy), whose unit
 * kvc_gpu_plan_rows chose to divide the batch-row strides as well: the
 * pairs' offsets are addresses the kernel forms too.
 */
#ifndef KVC_GPU_KERNELS_ROWS_CUH
#define KVC_GPU_KERNELS_ROWS_CUH

#include "kernels_common.cuh"

template <int N>
struct gpu_rows_params {
  kvc_gpu_rows rows;   /* row 0's plan (its unit divides the batch-row strides too) and those strides */
  int32_t count;
  int32_t pairs[N][2]; /* {dst_row, src_row} */
};

template <int N>
__global__ void __launch_bounds__(KVC_GPU_BLOCK) gpu_rows_kernel(const KVC_GRID_CONSTANT gpu_rows_params<N> p) {
  const int32_t i = (int32_t)blockIdx.y;
  if (i >= p.count) return;
  const kvc_gpu_copy row = kvc_gpu_rows_pair(&p.rows, p.pairs[i][0], p.pairs[i][1]);
  const uint32_t blocks = kvc_gpu_plan_blocks(&row);
  for (uint64_t block = blockIdx.x; block < blocks; block += gridDim.x) gpu_run_share_any<false>(row, (uint32_t)block);
}

#endif /* KVC_GPU_KERNELS_ROWS_CUH */
