/*
 * backends/gpu/gpu_vendor.h: the few names the GPU backend uses, mapped to
 * CUDA (nvcc) or HIP (hipcc), so that one source builds both plugins.
 *
 * The vendor is the compiler's: hipcc defines __HIPCC__, nvcc __CUDACC__.
 * Only what backends/gpu needs is mapped; a name missing here is a name the
 * backend does not use.
 *
 * Warp/wave size: nothing in backends/gpu depends on it. NVIDIA warps are
 * 32 wide; AMD waves are 64 wide on GCN/CDNA (gfx9: MI100, MI200, MI300)
 * and 32 wide by default on RDNA (gfx10 and later), and current LLVM no
 * longer tells the width as a macro (__AMDGCN_WAVEFRONT_SIZE is gone). So
 * the kernels use no warp-level operation (shuffle, ballot, vote, lane id,
 * warpSize): each thread's work follows from threadIdx and blockDim alone,
 * and blocks are whole waves of either width (KVC_GPU_WAVE_MAX). CTest's
 * gpu_hip_targets test compiles them for wave64 and wave32 targets and
 * fails when a warp-level name appears in them.
 */
#ifndef KVC_GPU_VENDOR_H
#define KVC_GPU_VENDOR_H

#include <stdint.h>

/*
 * Failure messages name the runtime call that failed ("cudaMemcpy2DAsync
 * failed: cudaErrorInvalidValue (invalid argument)"): every gpuX(...) below
 * that returns an error code goes through KVC_GPU_NAMED, which keeps the
 * vendor's name of a call that failed (nothing is written on success) for
 * gpu_check (gpu_internal.h) to put into last_error.
 */
inline const char*& kvc_gpu_failed_call() {
  static thread_local const char* name = "a runtime call";
  return name;
}
template <typename E>
inline E kvc_gpu_named(E e, const char* name) {
  if (e != (E)0) kvc_gpu_failed_call() = name; /* success is 0 for both vendors */
  return e;
}
#define KVC_GPU_NAMED(fn, ...) kvc_gpu_named(fn(__VA_ARGS__), #fn)

#if defined(__HIPCC__)
#include <hip/hip_runtime.h>

#define KVC_GPU_VENDOR "hip"
typedef hipError_t gpuError_t;
typedef hipStream_t gpuStream_t;
typedef hipEvent_t gpuEvent_t;
#define gpuSuccess hipSuccess
#define gpuErrorNotReady hipErrorNotReady
#define gpuMemcpyDefault hipMemcpyDefault
#define gpuDevAttrMemoryPoolsSupported hipDeviceAttributeMemoryPoolsSupported
#define gpuGetDeviceCount(...) KVC_GPU_NAMED(hipGetDeviceCount, __VA_ARGS__)
#define gpuGetDevice(...) KVC_GPU_NAMED(hipGetDevice, __VA_ARGS__)
#define gpuSetDevice(...) KVC_GPU_NAMED(hipSetDevice, __VA_ARGS__)
#define gpuDeviceGetAttribute(...) KVC_GPU_NAMED(hipDeviceGetAttribute, __VA_ARGS__)
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
/* The device probe (gpu_probe.h): driver checks and whether the plugin holds an image for a device. */
#define KVC_GPU_RUNTIME_VERSION HIP_VERSION
#define gpuErrorInsufficientDriver hipErrorInsufficientDriver
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorNoKernelImage hipErrorNoBinaryForGpu
#define gpuErrorInvalidDeviceFunction hipErrorInvalidDeviceFunction
#define gpuDriverGetVersion(...) KVC_GPU_NAMED(hipDriverGetVersion, __VA_ARGS__)
#define gpuFuncAttributes hipFuncAttributes
#define gpuFuncGetAttributes(...) KVC_GPU_NAMED(hipFuncGetAttributes, __VA_ARGS__)
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceProperties(...) KVC_GPU_NAMED(hipGetDeviceProperties, __VA_ARGS__)
#define gpuMalloc(...) KVC_GPU_NAMED(hipMalloc, __VA_ARGS__)
#define gpuFree(...) KVC_GPU_NAMED(hipFree, __VA_ARGS__)
#define gpuMallocAsync(...) KVC_GPU_NAMED(hipMallocAsync, __VA_ARGS__)
#define gpuFreeAsync(...) KVC_GPU_NAMED(hipFreeAsync, __VA_ARGS__)
#define gpuMemsetAsync(...) KVC_GPU_NAMED(hipMemsetAsync, __VA_ARGS__)
#define gpuMemcpy2DAsync(...) KVC_GPU_NAMED(hipMemcpy2DAsync, __VA_ARGS__)
#define gpuMemcpyAsync(...) KVC_GPU_NAMED(hipMemcpyAsync, __VA_ARGS__)
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuFreeHost(...) KVC_GPU_NAMED(hipHostFree, __VA_ARGS__)
#define gpuStreamDestroy(...) KVC_GPU_NAMED(hipStreamDestroy, __VA_ARGS__)
#define gpuStreamSynchronize(...) KVC_GPU_NAMED(hipStreamSynchronize, __VA_ARGS__)
#define gpuStreamWaitEvent(stream, event) KVC_GPU_NAMED(hipStreamWaitEvent, (stream), (event), 0)
#define gpuEventDestroy(...) KVC_GPU_NAMED(hipEventDestroy, __VA_ARGS__)
#define gpuEventRecord(...) KVC_GPU_NAMED(hipEventRecord, __VA_ARGS__)
#define gpuEventQuery(...) KVC_GPU_NAMED(hipEventQuery, __VA_ARGS__)
#define gpuEventSynchronize(...) KVC_GPU_NAMED(hipEventSynchronize, __VA_ARGS__)
/* The stream-ordered allocator's pool (gpu_exec.cpp keeps what it frees instead of returning it at once). */
typedef hipMemPool_t gpuMemPool_t;
#define gpuMemPoolAttrReleaseThreshold hipMemPoolAttrReleaseThreshold
#define gpuDeviceGetMemPool(...) KVC_GPU_NAMED(hipDeviceGetMemPool, __VA_ARGS__)
#define gpuMemPoolGetAttribute(...) KVC_GPU_NAMED(hipMemPoolGetAttribute, __VA_ARGS__)
#define gpuMemPoolSetAttribute(...) KVC_GPU_NAMED(hipMemPoolSetAttribute, __VA_ARGS__)
#define gpuMemPoolTrimTo(...) KVC_GPU_NAMED(hipMemPoolTrimTo, __VA_ARGS__)
/* Pinned, mapped into every device's address space (same pointer on the device: unified addressing). */
static inline gpuError_t gpuHostAllocMapped(void** p, size_t bytes) {
  return KVC_GPU_NAMED(hipHostMalloc, p, bytes, hipHostMallocMapped | hipHostMallocPortable);
}
static inline gpuError_t gpuStreamCreateNonBlocking(gpuStream_t* s) {
  return KVC_GPU_NAMED(hipStreamCreateWithFlags, s, hipStreamNonBlocking);
}
static inline gpuError_t gpuEventCreateNoTiming(gpuEvent_t* e) {
  return KVC_GPU_NAMED(hipEventCreateWithFlags, e, hipEventDisableTiming);
}
/* 1 while `s` is being captured into a graph (or when the runtime cannot tell): no host memory may be read then. */
static inline int gpuStreamCapturing(gpuStream_t s) {
  hipStreamCaptureStatus st = hipStreamCaptureStatusNone;
  if (hipStreamIsCapturing(s, &st) != hipSuccess) {
    (void)hipGetLastError();
    return 1;
  }
  return st != hipStreamCaptureStatusNone;
}

#elif defined(__CUDACC__)
#include <cuda_runtime.h>

#define KVC_GPU_VENDOR "cuda"
typedef cudaError_t gpuError_t;
typedef cudaStream_t gpuStream_t;
typedef cudaEvent_t gpuEvent_t;
#define gpuSuccess cudaSuccess
#define gpuErrorNotReady cudaErrorNotReady
#define gpuMemcpyDefault cudaMemcpyDefault
#define gpuDevAttrMemoryPoolsSupported cudaDevAttrMemoryPoolsSupported
#define gpuGetDeviceCount(...) KVC_GPU_NAMED(cudaGetDeviceCount, __VA_ARGS__)
#define gpuGetDevice(...) KVC_GPU_NAMED(cudaGetDevice, __VA_ARGS__)
#define gpuSetDevice(...) KVC_GPU_NAMED(cudaSetDevice, __VA_ARGS__)
#define gpuDeviceGetAttribute(...) KVC_GPU_NAMED(cudaDeviceGetAttribute, __VA_ARGS__)
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define KVC_GPU_RUNTIME_VERSION CUDART_VERSION
#define gpuErrorInsufficientDriver cudaErrorInsufficientDriver
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorNoKernelImage cudaErrorNoKernelImageForDevice
#define gpuErrorInvalidDeviceFunction cudaErrorInvalidDeviceFunction
#define gpuDriverGetVersion(...) KVC_GPU_NAMED(cudaDriverGetVersion, __VA_ARGS__)
#define gpuFuncAttributes cudaFuncAttributes
#define gpuFuncGetAttributes(...) KVC_GPU_NAMED(cudaFuncGetAttributes, __VA_ARGS__)
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties(...) KVC_GPU_NAMED(cudaGetDeviceProperties, __VA_ARGS__)
#define gpuMalloc(...) KVC_GPU_NAMED(cudaMalloc, __VA_ARGS__)
#define gpuFree(...) KVC_GPU_NAMED(cudaFree, __VA_ARGS__)
#define gpuMallocAsync(...) KVC_GPU_NAMED(cudaMallocAsync, __VA_ARGS__)
#define gpuFreeAsync(...) KVC_GPU_NAMED(cudaFreeAsync, __VA_ARGS__)
#define gpuMemsetAsync(...) KVC_GPU_NAMED(cudaMemsetAsync, __VA_ARGS__)
#define gpuMemcpy2DAsync(...) KVC_GPU_NAMED(cudaMemcpy2DAsync, __VA_ARGS__)
#define gpuMemcpyAsync(...) KVC_GPU_NAMED(cudaMemcpyAsync, __VA_ARGS__)
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuFreeHost(...) KVC_GPU_NAMED(cudaFreeHost, __VA_ARGS__)
#define gpuStreamDestroy(...) KVC_GPU_NAMED(cudaStreamDestroy, __VA_ARGS__)
#define gpuStreamSynchronize(...) KVC_GPU_NAMED(cudaStreamSynchronize, __VA_ARGS__)
#define gpuStreamWaitEvent(stream, event) KVC_GPU_NAMED(cudaStreamWaitEvent, (stream), (event), 0)
#define gpuEventDestroy(...) KVC_GPU_NAMED(cudaEventDestroy, __VA_ARGS__)
#define gpuEventRecord(...) KVC_GPU_NAMED(cudaEventRecord, __VA_ARGS__)
#define gpuEventQuery(...) KVC_GPU_NAMED(cudaEventQuery, __VA_ARGS__)
#define gpuEventSynchronize(...) KVC_GPU_NAMED(cudaEventSynchronize, __VA_ARGS__)
/* The stream-ordered allocator's pool (gpu_exec.cpp keeps what it frees instead of returning it at once). */
typedef cudaMemPool_t gpuMemPool_t;
#define gpuMemPoolAttrReleaseThreshold cudaMemPoolAttrReleaseThreshold
#define gpuDeviceGetMemPool(...) KVC_GPU_NAMED(cudaDeviceGetMemPool, __VA_ARGS__)
#define gpuMemPoolGetAttribute(...) KVC_GPU_NAMED(cudaMemPoolGetAttribute, __VA_ARGS__)
#define gpuMemPoolSetAttribute(...) KVC_GPU_NAMED(cudaMemPoolSetAttribute, __VA_ARGS__)
#define gpuMemPoolTrimTo(...) KVC_GPU_NAMED(cudaMemPoolTrimTo, __VA_ARGS__)
static inline gpuError_t gpuHostAllocMapped(void** p, size_t bytes) {
  return KVC_GPU_NAMED(cudaHostAlloc, p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
}
static inline gpuError_t gpuStreamCreateNonBlocking(gpuStream_t* s) {
  return KVC_GPU_NAMED(cudaStreamCreateWithFlags, s, cudaStreamNonBlocking);
}
static inline gpuError_t gpuEventCreateNoTiming(gpuEvent_t* e) {
  return KVC_GPU_NAMED(cudaEventCreateWithFlags, e, cudaEventDisableTiming);
}
static inline int gpuStreamCapturing(gpuStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &st) != cudaSuccess) {
    (void)cudaGetLastError();
    return 1;
  }
  return st != cudaStreamCaptureStatusNone;
}

#else
#error "backends/gpu is compiled by nvcc (CUDA) or hipcc (HIP)"
#endif

/*
 * Kernel parameters: CUDA passes a `const __grid_constant__` parameter by
 * reference into parameter space, so that a kernel indexing an array inside
 * it (the batched copies' descriptors) reads it in place instead of copying
 * it to the stack; HIP's kernel arguments are plain memory already.
 */
#if defined(__CUDACC__)
#define KVC_GRID_CONSTANT __grid_constant__
#else
#define KVC_GRID_CONSTANT
#endif

/* The widest warp/wave of any target (AMD wave64): a block of a multiple of it is whole warps on every GPU. */
#define KVC_GPU_WAVE_MAX 64

#endif /* KVC_GPU_VENDOR_H */
