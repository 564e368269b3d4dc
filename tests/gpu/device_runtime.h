/*
 * tests/gpu/device_runtime.h: the device runtime as the GPU tests see it.
 *
 * The tests need device memory for their inputs, copies to read device views
 * back, and streams to bind caches to. Three implementations give them that:
 * device_runtime_cuda.c (the CUDA runtime), device_runtime_hip.c (HIP) and
 * device_runtime_emulated.c (the emulated device plugin's poisoned host
 * memory). Each test source is compiled once per implementation.
 *
 * Device memory here is memory the cache's backend accepts as device memory
 * of `device`; host-tier pointers of a cache (offloaded layers) are accepted
 * by drt_download as well.
 */
#ifndef KVC_TESTS_DEVICE_RUNTIME_H
#define KVC_TESTS_DEVICE_RUNTIME_H

#include <stddef.h>

#include "kvcache.h"

/* Exit status of a test that skipped (CTest's SKIP_RETURN_CODE). */
#define DRT_SKIP_EXIT 77

typedef enum drt_status {
  DRT_READY = 0, /* a device is there */
  DRT_SKIP = 1,  /* no device on this machine: the test prints SKIPPED and why, and exits DRT_SKIP_EXIT */
  DRT_BROKEN = 2 /* set up wrongly (a test misconfigured, a runtime error with a device present): fail */
} drt_status;

/*
 * Finds the devices. On DRT_SKIP and DRT_BROKEN, `why` (of why_len bytes)
 * says why. Called once, before anything else.
 */
drt_status drt_open(char* why, size_t why_len);

/* "cuda", "hip" or "emulated". */
const char* drt_name(void);

/* The kvc device type caches of this runtime live on (KVC_DEVICE_CUDA or KVC_DEVICE_ROCM). */
kvc_device_type drt_device_type(void);

/* The host tier's device type of this runtime (KVC_DEVICE_CUDA_HOST or KVC_DEVICE_ROCM_HOST). */
kvc_device_type drt_host_device_type(void);

/* Number of devices (>= 1 after DRT_READY). */
int drt_device_count(void);

/* Zeroed device memory of `bytes` (> 0) on `device`; NULL on failure (drt_error says why). */
void* drt_alloc(int device, size_t bytes);

/* Frees what drt_alloc returned, after the work issued on any stream has finished with it. NULL is ignored. */
void drt_free(int device, void* ptr);

/* Copies host bytes into device memory; ordered on `stream` (NULL: the default stream); returns once `src` may be
   reused. 0 on success. */
int drt_upload(int device, void* dst, const void* src, size_t bytes, void* stream);

/*
 * Copies device (or host-tier) bytes to the host after all work issued on the
 * device so far, on every stream (a device-wide synchronisation: this is test
 * code reading results, not the hot path). 0 on success.
 */
int drt_download(int device, void* dst, const void* src, size_t bytes);

/* A new stream on `device` (NULL on failure), its destruction, and waiting for it. */
void* drt_stream_create(int device);
void drt_stream_destroy(int device, void* stream);
int drt_stream_synchronize(int device, void* stream);

/* The last runtime error as text ("" when none). */
const char* drt_error(void);

#endif /* KVC_TESTS_DEVICE_RUNTIME_H */
