/*
 * tests/gpu/device_runtime_cuda.c: the device runtime on the CUDA runtime
 * API (CUDA::cudart). Test code, so it favours certainty over speed: reads
 * wait for the whole device, frees wait for the work issued before them.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "device_runtime.h"

static char last_error[256];
static int devices;

static int failed(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  snprintf(last_error, sizeof last_error, "%s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
  return 1;
}

static int use(int device) {
  if (device < 0 || device >= devices) {
    snprintf(last_error, sizeof last_error, "device %d out of range [0, %d)", device, devices);
    return 1;
  }
  return failed(cudaSetDevice(device), "cudaSetDevice");
}

drt_status drt_open(char* why, size_t why_len) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    /* No driver, no device, or a driver older than this runtime: all mean this machine cannot run the test. */
    snprintf(why, why_len, "no usable CUDA device: cudaGetDeviceCount failed with %s (%s)%s", cudaGetErrorName(e),
             cudaGetErrorString(e),
             e == cudaErrorInsufficientDriver ? "; the NVIDIA driver (libcuda.so.1) is missing or older than the "
                                                "CUDA runtime the tests were built with"
                                              : "");
    return DRT_SKIP;
  }
  if (n < 1) {
    snprintf(why, why_len, "no CUDA device: cudaGetDeviceCount found 0");
    return DRT_SKIP;
  }
  devices = n;
  return DRT_READY;
}

const char* drt_name(void) { return "cuda"; }
kvc_device_type drt_device_type(void) { return KVC_DEVICE_CUDA; }
kvc_device_type drt_host_device_type(void) { return KVC_DEVICE_CUDA_HOST; }
int drt_device_count(void) { return devices; }

void* drt_alloc(int device, size_t bytes) {
  void* p = NULL;
  if (use(device)) return NULL;
  if (failed(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc")) return NULL;
  if (failed(cudaMemset(p, 0, bytes ? bytes : 1), "cudaMemset") ||
      failed(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) {
    cudaFree(p);
    return NULL;
  }
  return p;
}

void drt_free(int device, void* ptr) {
  if (!ptr || use(device)) return;
  /* Work on other streams may still read it (a cache's copies of an input): wait for all of it. */
  if (!failed(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) failed(cudaFree(ptr), "cudaFree");
}

int drt_upload(int device, void* dst, const void* src, size_t bytes, void* stream) {
  if (use(device)) return 1;
  if (!bytes) return 0;
  /* Pageable source: the copy has read it when this returns. Default kind: `dst` may be the host tier. */
  if (failed(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, (cudaStream_t)stream), "cudaMemcpyAsync"))
    return 1;
  return failed(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

int drt_download(int device, void* dst, const void* src, size_t bytes) {
  if (use(device)) return 1;
  if (failed(cudaDeviceSynchronize(), "cudaDeviceSynchronize")) return 1;
  if (!bytes) return 0;
  /* cudaMemcpyDefault: `src` is device memory or pinned host memory of the host tier (unified addressing). */
  return failed(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
}

void* drt_stream_create(int device) {
  cudaStream_t s = NULL;
  if (use(device)) return NULL;
  /* Non-blocking: no implicit ordering with the legacy default stream, as in a serving stack. */
  if (failed(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags")) return NULL;
  return (void*)s;
}

void drt_stream_destroy(int device, void* stream) {
  if (!stream || use(device)) return;
  failed(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
  failed(cudaStreamDestroy((cudaStream_t)stream), "cudaStreamDestroy");
}

int drt_stream_synchronize(int device, void* stream) {
  if (use(device)) return 1;
  return failed(cudaStreamSynchronize((cudaStream_t)stream), "cudaStreamSynchronize");
}

const char* drt_error(void) { return last_error; }
