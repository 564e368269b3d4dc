/*
 * tests/gpu/device_runtime_hip.c: the device runtime on the HIP runtime
 * API (amdhip64). Test code, so it favours certainty over speed: reads
 * wait for the whole device, frees wait for the work issued before them.
 */
#include <stdio.h>
#include <string.h>

#include <hip/hip_runtime_api.h>

#include "device_runtime.h"

static char last_error[256];
static int devices;

static int failed(hipError_t e, const char* what) {
  if (e == hipSuccess) return 0;
  snprintf(last_error, sizeof last_error, "%s: %s (%s)", what, hipGetErrorString(e), hipGetErrorName(e));
  return 1;
}

static int use(int device) {
  if (device < 0 || device >= devices) {
    snprintf(last_error, sizeof last_error, "device %d out of range [0, %d)", device, devices);
    return 1;
  }
  return failed(hipSetDevice(device), "hipSetDevice");
}

drt_status drt_open(char* why, size_t why_len) {
  int n = 0;
  hipError_t e = hipGetDeviceCount(&n);
  if (e != hipSuccess) {
    /* No driver, no device, or a driver older than this runtime: all mean this machine cannot run the test. */
    snprintf(why, why_len, "no usable HIP (ROCm) device: hipGetDeviceCount failed with %s (%s)%s", hipGetErrorName(e),
             hipGetErrorString(e),
             e == hipErrorNoDevice ? "; no AMD GPU is visible (amdgpu driver, /dev/kfd)" : "");
    return DRT_SKIP;
  }
  if (n < 1) {
    snprintf(why, why_len, "no HIP (ROCm) device: hipGetDeviceCount found 0");
    return DRT_SKIP;
  }
  devices = n;
  return DRT_READY;
}

const char* drt_name(void) { return "hip"; }
kvc_device_type drt_device_type(void) { return KVC_DEVICE_ROCM; }
kvc_device_type drt_host_device_type(void) { return KVC_DEVICE_ROCM_HOST; }
int drt_device_count(void) { return devices; }

void* drt_alloc(int device, size_t bytes) {
  void* p = NULL;
  if (use(device)) return NULL;
  if (failed(hipMalloc(&p, bytes ? bytes : 1), "hipMalloc")) return NULL;
  if (failed(hipMemset(p, 0, bytes ? bytes : 1), "hipMemset") ||
      failed(hipDeviceSynchronize(), "hipDeviceSynchronize")) {
    hipFree(p);
    return NULL;
  }
  return p;
}

void drt_free(int device, void* ptr) {
  if (!ptr || use(device)) return;
  /* Work on other streams may still read it (a cache's copies of an input): wait for all of it. */
  if (!failed(hipDeviceSynchronize(), "hipDeviceSynchronize")) failed(hipFree(ptr), "hipFree");
}

int drt_upload(int device, void* dst, const void* src, size_t bytes, void* stream) {
  if (use(device)) return 1;
  if (!bytes) return 0;
  /* Pageable source: the copy has read it when this returns. Default kind: `dst` may be the host tier. */
  if (failed(hipMemcpyAsync(dst, src, bytes, hipMemcpyDefault, (hipStream_t)stream), "hipMemcpyAsync"))
    return 1;
  return failed(hipStreamSynchronize((hipStream_t)stream), "hipStreamSynchronize");
}

int drt_download(int device, void* dst, const void* src, size_t bytes) {
  if (use(device)) return 1;
  if (failed(hipDeviceSynchronize(), "hipDeviceSynchronize")) return 1;
  if (!bytes) return 0;
  /* hipMemcpyDefault: `src` is device memory or pinned host memory of the host tier (unified addressing). */
  return failed(hipMemcpy(dst, src, bytes, hipMemcpyDefault), "hipMemcpy");
}

void* drt_stream_create(int device) {
  hipStream_t s = NULL;
  if (use(device)) return NULL;
  /* Non-blocking: no implicit ordering with the legacy default stream, as in a serving stack. */
  if (failed(hipStreamCreateWithFlags(&s, hipStreamNonBlocking), "hipStreamCreateWithFlags")) return NULL;
  return (void*)s;
}

void drt_stream_destroy(int device, void* stream) {
  if (!stream || use(device)) return;
  failed(hipStreamSynchronize((hipStream_t)stream), "hipStreamSynchronize");
  failed(hipStreamDestroy((hipStream_t)stream), "hipStreamDestroy");
}

int drt_stream_synchronize(int device, void* stream) {
  if (use(device)) return 1;
  return failed(hipStreamSynchronize((hipStream_t)stream), "hipStreamSynchronize");
}

const char* drt_error(void) { return last_error; }
