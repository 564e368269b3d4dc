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

/*
 * copy_rows_batch: every job's row copies in one launch (gpu_plan.h,
 * kvc_gpu_rows_job). Grid-stride over the batch's blocks; a block finds its
 * job by binary search over first_block, then either runs one block of one
 * pair's plan (as gpu_rows_kernel does) or, when the job's pairs share
 * blocks, moves every unit of its pairs with all its threads: consecutive
 * threads take consecutive units of a row, so loads and stores coalesce.
 */
template <int U>
static __device__ __forceinline__ void gpu_run_pairs(const kvc_gpu_rows_job& j, const int32_t* index, int32_t pair0,
                                                     int32_t npairs) {
  typedef typename gpu_unit<U>::type T;
  const int32_t total = npairs * kvc_gpu_rows_job_units(&j);
  const int32_t nthreads = (int32_t)blockDim.x;
  /* Four units in flight per thread, as gpu_run_share's single rows: all loads, then all stores. */
  for (int32_t t = (int32_t)threadIdx.x; t < total; t += 4 * nthreads) {
    T v[4];
    char* d[4];
#pragma unroll
    for (int k = 0; k < 4; k++) {
      const int32_t tk = t + k * nthreads;
      if (tk < total) {
        const char* s;
        kvc_gpu_rows_job_unit(&j, index, pair0, tk, &d[k], &s);
        v[k] = *reinterpret_cast<const T*>(s);
      }
    }
#pragma unroll
    for (int k = 0; k < 4; k++)
      if (t + k * nthreads < total) *reinterpret_cast<T*>(d[k]) = v[k];
  }
}

static __device__ __forceinline__ void gpu_rows_batch_block(const kvc_gpu_rows_job* jobs, int32_t njobs,
                                                            uint32_t block) {
  const int32_t* index = kvc_gpu_rows_batch_index(jobs, njobs);
  const kvc_gpu_rows_job& j = jobs[kvc_gpu_rows_batch_find(jobs, njobs, block)];
  int32_t pair0, npairs;
  uint32_t plan_block;
  kvc_gpu_rows_job_share(&j, block - j.first_block, &pair0, &npairs, &plan_block);
  if (j.pairs_per_block == 1) {
    gpu_run_share_any<false>(kvc_gpu_rows_job_pair(&j, index, pair0), plan_block);
    return;
  }
  switch (j.rows.plan.unit) {
    case 16:
      gpu_run_pairs<16>(j, index, pair0, npairs);
      break;
    case 8:
      gpu_run_pairs<8>(j, index, pair0, npairs);
      break;
    case 4:
      gpu_run_pairs<4>(j, index, pair0, npairs);
      break;
    case 2:
      gpu_run_pairs<2>(j, index, pair0, npairs);
      break;
    default:
      gpu_run_pairs<1>(j, index, pair0, npairs);
      break;
  }
}

/*
 * The batch by value: `area` holds the jobs, then their index array
 * (kvc_gpu_rows_batch's layout), read in place from parameter space (a
 * __grid_constant__ parameter on CUDA; HIP's arguments are memory anyway).
 */
template <int BYTES>
struct gpu_rows_batch_params {
  int32_t njobs;
  uint32_t blocks;
  uint64_t area[BYTES / 8];
};

template <int BYTES>
__global__ void __launch_bounds__(KVC_GPU_BLOCK)
    gpu_rows_batch_inline_kernel(const KVC_GRID_CONSTANT gpu_rows_batch_params<BYTES> p) {
  const kvc_gpu_rows_job* jobs = reinterpret_cast<const kvc_gpu_rows_job*>(p.area);
  for (uint64_t block = blockIdx.x; block < p.blocks; block += gridDim.x)
    gpu_rows_batch_block(jobs, p.njobs, (uint32_t)block);
}

/* The batch from device memory (the same layout, staged there on the stream by gpu_backend.cpp). */
__global__ void __launch_bounds__(KVC_GPU_BLOCK)
    gpu_rows_batch_kernel(const kvc_gpu_rows_job* jobs, int32_t njobs, uint32_t blocks) {
  for (uint64_t block = blockIdx.x; block < blocks; block += gridDim.x)
    gpu_rows_batch_block(jobs, njobs, (uint32_t)block);
}

#endif /* KVC_GPU_KERNELS_ROWS_CUH */
