/*
 * backends/gpu/gpu_vendor.h: the few names the GPU backend uses, mapped to
 * CUDA (nvcc) or HIP (hipcc), so that one source builds both plugins.
 *
 * The vendor is the compiler's: hipcc defines __HIPCC__, nvcc __CUDACC__.
 * A third build, KVC_GPU_FAKE_RUNTIME, compiles the CUDA names with the host
 * C++ compiler against tests/gpu/fake_runtime (host memory for device
 * memory, kernels run as simulated grids), so that the plugin's host code
 * runs in CTest under ASan/UBSan without a GPU.
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
typedef hipStreamCaptureMode gpuStreamCaptureMode;
#define gpuStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed
#define gpuThreadExchangeStreamCaptureMode(...) KVC_GPU_NAMED(hipThreadExchangeStreamCaptureMode, __VA_ARGS__)
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
/* 1 when `device`'s primary context is active, 0 when not, -1 when the runtime cannot tell (see the CUDA one). */
static inline int gpuPrimaryContextActive(int device) {
  unsigned int flags = 0;
  int active = 0;
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  hipError_t e = hipDevicePrimaryCtxGetState(device, &flags, &active);
#pragma clang diagnostic pop
  if (e != hipSuccess) {
    (void)hipGetLastError();
    return -1;
  }
  return active != 0;
}

#elif defined(__CUDACC__) || defined(KVC_GPU_FAKE_RUNTIME)
#if defined(__CUDACC__)
#include <cuda_runtime.h>
#else
#include "fake_cuda_runtime.h" /* tests/gpu/fake_runtime: the CUDA names on the host */
#endif

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
typedef cudaStreamCaptureMode gpuStreamCaptureMode;
#define gpuStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed
#define gpuThreadExchangeStreamCaptureMode(...) KVC_GPU_NAMED(cudaThreadExchangeStreamCaptureMode, __VA_ARGS__)
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
/*
 * 1 when `device`'s primary context exists (is active), 0 when not, -1 when the runtime cannot tell. Asked of the
 * driver (cuDevicePrimaryCtxGetState, found through the runtime: the plugin does not link libcuda), since no
 * runtime call tells it without creating the context.
 */
static inline int gpuPrimaryContextActive(int device) {
  typedef int (*primary_state_fn)(int dev, unsigned int* flags, int* active);
  static primary_state_fn fn = NULL;
  static int looked = 0;
  if (!looked) {
    void* p = NULL;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &p, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      p = NULL;
    (void)cudaGetLastError();
    fn = (primary_state_fn)p;
    looked = 1; /* a race here looks the same pointer up twice */
  }
  unsigned int flags = 0;
  int active = 0;
  if (!fn || fn(device, &flags, &active) != 0) return -1;
  return active != 0;
}

#else
#error "backends/gpu is compiled by nvcc (CUDA), hipcc (HIP), or against the fake runtime (KVC_GPU_FAKE_RUNTIME)"
#endif

/*
 * Every kernel launch: KVC_GPU_LAUNCH(grid, block, stream, kernel)(args...), the kernel last so that a template's
 * commas need no parentheses. The fake runtime runs the kernel on the host as a simulated grid instead.
 */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_GPU_LAUNCH(grid, block, stream, ...) __VA_ARGS__<<<(grid), (block), 0, (stream)>>>
#else
#define KVC_GPU_LAUNCH(grid, block, stream, ...) kvc_fake_launcher((grid), (block), (stream), __VA_ARGS__)
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
