/*
 * tests/gpu/fake_runtime/fake_cuda_kernels.h: the kernel side of the fake
 * runtime (C++ only, included by fake_cuda_runtime.h): CUDA's qualifiers as
 * nothing, the thread and block indices as thread-local variables that the
 * simulated grid sets (fake_grid.cpp), __shared__ memory as a thread-local
 * static (one block runs at a time on the launching thread, so it is the
 * block's), __syncthreads as a barrier between the block's threads, each of
 * which runs as a fiber once one waits at a barrier.
 *
 * KVC_GPU_LAUNCH(grid, block, stream, kernel)(args...) (gpu_vendor.h)
 * becomes kvc_fake_launcher(grid, block, stream, kernel)(args...): the
 * arguments are converted to the kernel's parameter types and copied, as a
 * launch copies them, so a graph replays them as they were at capture.
 */
#ifndef KVC_FAKE_CUDA_KERNELS_H
#define KVC_FAKE_CUDA_KERNELS_H

#include <functional>
#include <memory>
#include <tuple>
#include <utility>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local

/* The simulated thread's indices (set per thread by the grid). */
extern thread_local uint3 threadIdx;
extern thread_local uint3 blockIdx;
extern thread_local uint3 blockDim;
extern thread_local uint3 gridDim;

/* Waits until every thread of the block has reached it (or returned). */
void __syncthreads();

namespace kvc_fake {

/* Runs `thread` once per thread of the grid now, or records the launch when `stream` is being captured. */
cudaError_t launch(dim3 grid, dim3 block, cudaStream_t stream, std::function<void()> thread);

template <typename... P>
struct launcher {
  dim3 grid, block;
  cudaStream_t stream;
  void (*kernel)(P...);
  template <typename... A>
  void operator()(A&&... args) const {
    /* Shared by the grid's threads: each call copies the parameters again, as each CUDA thread reads its own. */
    auto params = std::make_shared<const std::tuple<P...>>(std::forward<A>(args)...);
    void (*k)(P...) = kernel;
    (void)launch(grid, block, stream, [k, params]() { std::apply(k, *params); });
  }
};

} /* namespace kvc_fake */

template <typename... P>
static inline kvc_fake::launcher<P...> kvc_fake_launcher(dim3 grid, dim3 block, cudaStream_t stream,
                                                         void (*kernel)(P...)) {
  return kvc_fake::launcher<P...>{grid, block, stream, kernel};
}

#endif /* KVC_FAKE_CUDA_KERNELS_H */
