/*
 * backends/gpu/kernels_rows.cuh: gather/scatter of batch rows (copy_rows:
 * reorder for beam search, select, repeat-interleave). Row i of the launch
 * copies batch row src_row into dst_row; both indices come from host memory
 * and travel by value in the parameters (as 32-bit pairs), so no index
 * upload is needed; a larger index list is split across launches
 * (KVC_GPU_ROWS_CAP in gpu_backend.cpp). grid.y is the pair, grid.x the
 * blocks of one row's plan (a [1, heads, seq, dim] copy).
 */
#ifndef KVC_GPU_KERNELS_ROWS_CUH
#define KVC_GPU_KERNELS_ROWS_CUH

#include "kernels_common.cuh"

template <int N>
struct gpu_rows_params {
  kvc_gpu_copy plan;       /* one row: dst and src at batch row 0 */
  int64_t dst_row_bytes;   /* byte stride between batch rows */
  int64_t src_row_bytes;
  int32_t count;
  int32_t pairs[N][2];     /* {dst_row, src_row} */
};

template <int N>
__global__ void __launch_bounds__(KVC_GPU_BLOCK) gpu_rows_kernel(const KVC_GRID_CONSTANT gpu_rows_params<N> p) {
  const int32_t i = (int32_t)blockIdx.y;
  if (i >= p.count) return;
  kvc_gpu_copy row = p.plan;
  row.dst += p.pairs[i][0] * p.dst_row_bytes;
  row.src += p.pairs[i][1] * p.src_row_bytes;
  const uint32_t blocks = kvc_gpu_plan_blocks(&p.plan);
  for (uint64_t block = blockIdx.x; block < blocks; block += gridDim.x) gpu_run_share_any<false>(row, (uint32_t)block);
}

#endif /* KVC_GPU_KERNELS_ROWS_CUH */
