/*
 * backends/gpu/kernels_common.cuh: what every kernel of backends/gpu shares:
 * the load/store type of each unit size and the walk of one block's share
 * of a plan (gpu_plan.h), copying or zeroing.
 */
#ifndef KVC_GPU_KERNELS_COMMON_CUH
#define KVC_GPU_KERNELS_COMMON_CUH

#include "gpu_plan.h"
#include "gpu_vendor.h"

/* The type one thread moves per unit: a 16-byte unit is one vector load and one vector store. */
template <int U>
struct gpu_unit;
template <>
struct gpu_unit<16> {
  typedef uint4 type;
};
template <>
struct gpu_unit<8> {
  typedef uint2 type;
};
template <>
struct gpu_unit<4> {
  typedef uint32_t type;
};
template <>
struct gpu_unit<2> {
  typedef uint16_t type;
};
template <>
struct gpu_unit<1> {
  typedef uint8_t type;
};

/* A unit of zero bytes (value-initialised: vector types and integers alike). */
template <int U>
static __device__ __forceinline__ typename gpu_unit<U>::type gpu_zero_unit() {
  return typename gpu_unit<U>::type{};
}

/* Copies (or, FILL, zeroes) the share of block `local` of plan `p` with the block's threads. */
template <int U, bool FILL>
static __device__ __forceinline__ void gpu_run_share(const kvc_gpu_copy& p, uint32_t local) {
  static_assert(KVC_GPU_BLOCK % KVC_GPU_WAVE_MAX == 0, "blocks are whole warps/waves of every width");
  typedef typename gpu_unit<U>::type T;
  int64_t row0;
  int32_t nrows, u0, u1;
  kvc_gpu_block_share(&p, local, &row0, &nrows, &u0, &u1);
  int32_t i0, i1, i2;
  kvc_gpu_row_coords(&p, row0, &i0, &i1, &i2);
  const int32_t tid = (int32_t)threadIdx.x;
  const int32_t nthreads = (int32_t)blockDim.x;
  const int64_t dsu = p.dst_stride[3], ssu = p.src_stride[3];

  if (nrows == 1) {
    /* One row (or a tile of one): four units in flight per thread. */
    char* d = p.dst + i0 * p.dst_stride[0] + i1 * p.dst_stride[1] + i2 * p.dst_stride[2];
    const char* s = FILL ? nullptr : p.src + i0 * p.src_stride[0] + i1 * p.src_stride[1] + i2 * p.src_stride[2];
    (void)s;
    /* 64-bit counters: a row of nearly 2^31 units would carry u + 4 * nthreads past INT32_MAX. */
    if constexpr (FILL) {
      const T zero = gpu_zero_unit<U>();
      for (int64_t u = (int64_t)u0 + tid; u < u1; u += nthreads) *reinterpret_cast<T*>(d + u * dsu) = zero;
    } else {
      for (int64_t u = (int64_t)u0 + tid; u < u1; u += 4 * (int64_t)nthreads) {
        T v[4];
#pragma unroll
        for (int j = 0; j < 4; j++) {
          int64_t uj = u + (int64_t)j * nthreads;
          if (uj < u1) v[j] = *reinterpret_cast<const T*>(s + uj * ssu);
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
          int64_t uj = u + (int64_t)j * nthreads;
          if (uj < u1) *reinterpret_cast<T*>(d + uj * dsu) = v[j];
        }
      }
    }
    return;
  }
  /* Whole short rows: thread t takes unit t % units of row t / units. */
  const int64_t units = u1 - u0;
  const int64_t total = nrows * units;
  for (int64_t t = tid; t < total; t += nthreads) {
    int32_t r = (int32_t)(t / units);
    int64_t u = t - r * units;
    int32_t j0 = i0, j1 = i1, j2 = i2;
    kvc_gpu_row_advance(&p, r, &j0, &j1, &j2);
    char* d = p.dst + j0 * p.dst_stride[0] + j1 * p.dst_stride[1] + j2 * p.dst_stride[2] + u * dsu;
    if constexpr (FILL) {
      *reinterpret_cast<T*>(d) = gpu_zero_unit<U>();
    } else {
      const char* s = p.src + j0 * p.src_stride[0] + j1 * p.src_stride[1] + j2 * p.src_stride[2] + u * ssu;
      *reinterpret_cast<T*>(d) = *reinterpret_cast<const T*>(s);
    }
  }
}

/* gpu_run_share for the plan's unit size (uniform across the block). */
template <bool FILL>
static __device__ __forceinline__ void gpu_run_share_any(const kvc_gpu_copy& p, uint32_t local) {
  switch (p.unit) {
    case 16:
      gpu_run_share<16, FILL>(p, local);
      break;
    case 8:
      gpu_run_share<8, FILL>(p, local);
      break;
    case 4:
      gpu_run_share<4, FILL>(p, local);
      break;
    case 2:
      gpu_run_share<2, FILL>(p, local);
      break;
    default:
      gpu_run_share<1, FILL>(p, local);
      break;
  }
}

#endif /* KVC_GPU_KERNELS_COMMON_CUH */
