/*
 * backends/gpu/kernels_copy.cuh: the overlapping strided copy that
 * core/backend.h allows, a move of rows along the seq axis of one buffer
 * (the window roll, compaction), which must behave like memmove.
 *
 * One block per (b, h) plane, so that a block barrier orders the plane's
 * reads before the writes that overwrite them. The plane moves in chunks of
 * rows, ascending when moving to lower addresses and descending when moving
 * to higher ones: a chunk then only overwrites rows that earlier chunks have
 * read. A chunk of |shift| rows or more never reads what it writes and is
 * copied directly; shorter shifts (a roll by one token) would make tiny
 * chunks, so their chunks are as many rows as shared memory stages: read
 * all, barrier, write all. Non-overlapping copies use the batched kernel.
 */
#ifndef KVC_GPU_KERNELS_COPY_CUH
#define KVC_GPU_KERNELS_COPY_CUH

#include "kernels_common.cuh"

template <int U>
static __device__ __forceinline__ void gpu_move_planes(const kvc_gpu_copy& p, int64_t shift, int32_t chunk_rows,
                                                       int staged, uint4* stage_raw) {
  typedef typename gpu_unit<U>::type T;
  T* stage = reinterpret_cast<T*>(stage_raw);
  const int32_t rows = p.n[2], units = p.n[3];
  const int32_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int32_t tid = (int32_t)threadIdx.x, nthreads = (int32_t)blockDim.x;
  const int64_t planes = (int64_t)p.n[0] * p.n[1];
  for (int64_t plane = blockIdx.x; plane < planes; plane += gridDim.x) {
    int64_t i0 = plane / p.n[1], i1 = plane - i0 * p.n[1];
    char* d = p.dst + i0 * p.dst_stride[0] + i1 * p.dst_stride[1];
    const char* s = p.src + i0 * p.src_stride[0] + i1 * p.src_stride[1];
    for (int32_t c = 0; c < chunks; c++) {
      int32_t a, b;
      kvc_gpu_move_chunk(rows, chunk_rows, shift, c, &a, &b);
      const int64_t total = (int64_t)(b - a) * units; /* a direct chunk may hold 2^31 units and more */
      if (staged) {
        for (int64_t t = tid; t < total; t += nthreads) {
          int64_t r = a + t / units, u = t % units;
          stage[t] = *reinterpret_cast<const T*>(s + r * p.src_stride[2] + u * p.src_stride[3]);
        }
        __syncthreads();
        for (int64_t t = tid; t < total; t += nthreads) {
          int64_t r = a + t / units, u = t % units;
          *reinterpret_cast<T*>(d + r * p.dst_stride[2] + u * p.dst_stride[3]) = stage[t];
        }
      } else {
        for (int64_t t = tid; t < total; t += nthreads) {
          int64_t r = a + t / units, u = t % units;
          *reinterpret_cast<T*>(d + r * p.dst_stride[2] + u * p.dst_stride[3]) =
              *reinterpret_cast<const T*>(s + r * p.src_stride[2] + u * p.src_stride[3]);
        }
      }
      __syncthreads(); /* this chunk's writes land before the next chunk reads what they overwrote */
    }
  }
}

__global__ void __launch_bounds__(KVC_GPU_BLOCK)
    gpu_move_kernel(const kvc_gpu_copy p, int64_t shift, int32_t chunk_rows, int staged) {
  /* One buffer for every unit size: a __shared__ array inside the template would be one per instantiation. */
  __shared__ uint4 stage[KVC_GPU_STAGE_BYTES / sizeof(uint4)];
  switch (p.unit) {
    case 16:
      gpu_move_planes<16>(p, shift, chunk_rows, staged, stage);
      break;
    case 8:
      gpu_move_planes<8>(p, shift, chunk_rows, staged, stage);
      break;
    case 4:
      gpu_move_planes<4>(p, shift, chunk_rows, staged, stage);
      break;
    case 2:
      gpu_move_planes<2>(p, shift, chunk_rows, staged, stage);
      break;
    default:
      gpu_move_planes<1>(p, shift, chunk_rows, staged, stage);
      break;
  }
}

#endif /* KVC_GPU_KERNELS_COPY_CUH */
