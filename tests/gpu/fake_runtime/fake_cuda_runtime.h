/*
 * tests/gpu/fake_runtime/fake_cuda_runtime.h: the part of the CUDA runtime API
 * that backends/gpu and the device tests use, implemented on the host
 * (fake_runtime.cpp, fake_grid.cpp) so that the GPU plugin's host code runs
 * in CTest under ASan/UBSan without a GPU (tests/gpu/README.md, 'The fake
 * runtime').
 *
 * Device memory is host memory (an overrun is an ASan report), work runs
 * when it is issued, in issue order, unless its stream is being captured
 * into a graph; kernels run as simulated grids. What it checks beyond
 * CUDA's return codes: capture rules (no event query, synchronisation,
 * unsafe allocation or pageable host copy inside a global capture: the
 * capture is invalidated and the violation printed), contexts per device
 * (created, as CUDA's primary contexts are, when a device is made current
 * or used), and that every launch is a grid CUDA accepts.
 *
 * C and C++: device_runtime_cuda.c compiles against it unchanged (through
 * include/cuda_runtime_api.h); the kernel-side names (threadIdx, __global__,
 * the launcher) are C++ only.
 */
#ifndef KVC_FAKE_CUDA_RUNTIME_H
#define KVC_FAKE_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The runtime this fake claims to be (CUDART_VERSION); KVC_FAKE_GPU_DRIVER may claim an older driver. */
#define CUDART_VERSION 13000

typedef enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInsufficientDriver = 35,
  cudaErrorInvalidDeviceFunction = 98,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoKernelImageForDevice = 209,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureWrongThread = 908,
} cudaError_t;

typedef struct kvc_fake_stream* cudaStream_t;
typedef struct kvc_fake_event* cudaEvent_t;
typedef struct kvc_fake_graph* cudaGraph_t;
typedef struct kvc_fake_graph_exec* cudaGraphExec_t;
typedef struct kvc_fake_mem_pool* cudaMemPool_t;

typedef struct uint2 {
  uint32_t x, y;
} uint2;
typedef struct uint3 {
  uint32_t x, y, z;
} uint3;
typedef struct uint4 {
  uint32_t x, y, z, w;
} uint4;

#ifdef __cplusplus
struct dim3 {
  uint32_t x, y, z;
  dim3(uint32_t vx = 1, uint32_t vy = 1, uint32_t vz = 1) : x(vx), y(vy), z(vz) {}
};
#else
typedef struct dim3 {
  uint32_t x, y, z;
} dim3;
#endif

typedef enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
} cudaMemcpyKind;

typedef enum cudaDeviceAttr { cudaDevAttrMemoryPoolsSupported = 115 } cudaDeviceAttr;

/* Only the attribute the plugin sets (CUDA's value). */
typedef enum cudaMemPoolAttr { cudaMemPoolAttrReleaseThreshold = 4 } cudaMemPoolAttr;

typedef enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
} cudaStreamCaptureStatus;

typedef enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
} cudaStreamCaptureMode;

typedef enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
} cudaDriverEntryPointQueryResult;
#define cudaEnableDefault 0x0

#define cudaHostAllocPortable 0x01
#define cudaHostAllocMapped 0x02
#define cudaStreamNonBlocking 0x01
#define cudaEventDisableTiming 0x02

typedef struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  int major, minor;
  int multiProcessorCount;
} cudaDeviceProp;

typedef struct cudaFuncAttributes {
  size_t sharedSizeBytes;
  int maxThreadsPerBlock;
  int numRegs;
} cudaFuncAttributes;

cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int cuda_version,
                                             unsigned long long flags, cudaDriverEntryPointQueryResult* status);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorName(cudaError_t e);
const char* cudaGetErrorString(cudaError_t e);
cudaError_t cudaDeviceSynchronize(void);

cudaError_t cudaMalloc(void** p, size_t bytes);
cudaError_t cudaFree(void* p);
cudaError_t cudaMallocAsync(void** p, size_t bytes, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* p, cudaStream_t stream);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream);

/* A device's stream-ordered pool: its release threshold is kept (and read back); trimming releases nothing, since
   the fake returns freed memory at once. cudaErrorNotSupported on a device without pools (KVC_FAKE_GPU_POOLS=0). */
cudaError_t cudaDeviceGetMemPool(cudaMemPool_t* pool, int device);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t keep);

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int flags);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);

cudaError_t cudaStreamBeginCapture(cudaStream_t s, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t s, cudaStreamCaptureStatus* status);
cudaError_t cudaThreadExchangeStreamCaptureMode(cudaStreamCaptureMode* mode);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t s);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

/* ---- the fake's own: what tests read and set ---- */

/* Contexts created on `device` since the process started (0 or 1: primary contexts are never released here). */
int kvc_fake_contexts(int device);
/* Capture rules broken so far (each also printed to stderr as it happens). */
long kvc_fake_capture_violations(void);
/* Kernel launches run or captured so far. */
long kvc_fake_launches(void);

#ifdef __cplusplus
} /* extern "C" */
#include "fake_cuda_kernels.h"
#endif

#endif /* KVC_FAKE_CUDA_RUNTIME_H */
