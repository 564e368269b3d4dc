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
#define gpuGetDeviceCount hipGetDeviceCount
#define gpuGetDevice hipGetDevice
#define gpuSetDevice hipSetDevice
#define gpuDeviceGetAttribute hipDeviceGetAttribute
#define gpuGetLastError hipGetLastError
#define gpuGetErrorString hipGetErrorString
#define gpuGetErrorName hipGetErrorName
/* The device probe (gpu_probe.h): driver checks and whether the plugin holds an image for a device. */
#define KVC_GPU_RUNTIME_VERSION HIP_VERSION
#define gpuErrorInsufficientDriver hipErrorInsufficientDriver
#define gpuErrorNoDevice hipErrorNoDevice
#define gpuErrorNoKernelImage hipErrorNoBinaryForGpu
#define gpuErrorInvalidDeviceFunction hipErrorInvalidDeviceFunction
#define gpuDriverGetVersion hipDriverGetVersion
#define gpuFuncAttributes hipFuncAttributes
#define gpuFuncGetAttributes hipFuncGetAttributes
#define gpuDeviceProp hipDeviceProp_t
#define gpuGetDeviceProperties hipGetDeviceProperties
#define gpuMalloc hipMalloc
#define gpuFree hipFree
#define gpuMallocAsync hipMallocAsync
#define gpuFreeAsync hipFreeAsync
#define gpuMemsetAsync hipMemsetAsync
#define gpuMemcpy2DAsync hipMemcpy2DAsync
#define gpuMemcpyAsync hipMemcpyAsync
#define gpuMemcpyDeviceToHost hipMemcpyDeviceToHost
#define gpuFreeHost hipHostFree
#define gpuStreamDestroy hipStreamDestroy
#define gpuStreamSynchronize hipStreamSynchronize
#define gpuStreamWaitEvent(stream, event) hipStreamWaitEvent((stream), (event), 0)
#define gpuEventDestroy hipEventDestroy
#define gpuEventRecord hipEventRecord
#define gpuEventQuery hipEventQuery
#define gpuEventSynchronize hipEventSynchronize
/* Pinned, mapped into every device's address space (same pointer on the device: unified addressing). */
static inline gpuError_t gpuHostAllocMapped(void** p, size_t bytes) {
  return hipHostMalloc(p, bytes, hipHostMallocMapped | hipHostMallocPortable);
}
static inline gpuError_t gpuStreamCreateNonBlocking(gpuStream_t* s) {
  return hipStreamCreateWithFlags(s, hipStreamNonBlocking);
}
static inline gpuError_t gpuEventCreateNoTiming(gpuEvent_t* e) {
  return hipEventCreateWithFlags(e, hipEventDisableTiming);
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
#define gpuGetDeviceCount cudaGetDeviceCount
#define gpuGetDevice cudaGetDevice
#define gpuSetDevice cudaSetDevice
#define gpuDeviceGetAttribute cudaDeviceGetAttribute
#define gpuGetLastError cudaGetLastError
#define gpuGetErrorString cudaGetErrorString
#define gpuGetErrorName cudaGetErrorName
#define KVC_GPU_RUNTIME_VERSION CUDART_VERSION
#define gpuErrorInsufficientDriver cudaErrorInsufficientDriver
#define gpuErrorNoDevice cudaErrorNoDevice
#define gpuErrorNoKernelImage cudaErrorNoKernelImageForDevice
#define gpuErrorInvalidDeviceFunction cudaErrorInvalidDeviceFunction
#define gpuDriverGetVersion cudaDriverGetVersion
#define gpuFuncAttributes cudaFuncAttributes
#define gpuFuncGetAttributes cudaFuncGetAttributes
#define gpuDeviceProp cudaDeviceProp
#define gpuGetDeviceProperties cudaGetDeviceProperties
#define gpuMalloc cudaMalloc
#define gpuFree cudaFree
#define gpuMallocAsync cudaMallocAsync
#define gpuFreeAsync cudaFreeAsync
#define gpuMemsetAsync cudaMemsetAsync
#define gpuMemcpy2DAsync cudaMemcpy2DAsync
#define gpuMemcpyAsync cudaMemcpyAsync
#define gpuMemcpyDeviceToHost cudaMemcpyDeviceToHost
#define gpuFreeHost cudaFreeHost
#define gpuStreamDestroy cudaStreamDestroy
#define gpuStreamSynchronize cudaStreamSynchronize
#define gpuStreamWaitEvent(stream, event) cudaStreamWaitEvent((stream), (event), 0)
#define gpuEventDestroy cudaEventDestroy
#define gpuEventRecord cudaEventRecord
#define gpuEventQuery cudaEventQuery
#define gpuEventSynchronize cudaEventSynchronize
static inline gpuError_t gpuHostAllocMapped(void** p, size_t bytes) {
  return cudaHostAlloc(p, bytes, cudaHostAllocMapped | cudaHostAllocPortable);
}
static inline gpuError_t gpuStreamCreateNonBlocking(gpuStream_t* s) {
  return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking);
}
static inline gpuError_t gpuEventCreateNoTiming(gpuEvent_t* e) {
  return cudaEventCreateWithFlags(e, cudaEventDisableTiming);
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
