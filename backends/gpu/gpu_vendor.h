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
typedef hipStreamCaptureMode gpuStreamCaptureMode;
#define gpuStreamCaptureModeRelaxed hipStreamCaptureModeRelaxed
#define gpuThreadExchangeStreamCaptureMode hipThreadExchangeStreamCaptureMode
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
typedef cudaStreamCaptureMode gpuStreamCaptureMode;
#define gpuStreamCaptureModeRelaxed cudaStreamCaptureModeRelaxed
#define gpuThreadExchangeStreamCaptureMode cudaThreadExchangeStreamCaptureMode
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
