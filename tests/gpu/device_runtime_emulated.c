/*
 * tests/gpu/device_runtime_emulated.c: the device runtime of the emulated
 * device. Device memory is host memory behind a poisoned pointer, like the
 * plugin's own buffers, so test inputs are as unreadable to the core as real
 * device memory; streams are distinct tokens the plugin only compares.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_runtime.h"
#include "emulated_device.h"
#include "emulated_probe.h"

static char last_error[256];

drt_status drt_open(char* why, size_t why_len) {
  if (emulated_probe_open(why, why_len)) return DRT_BROKEN;
  if (emulated_probe_device_count() < 1) {
    snprintf(why, why_len, "the emulated device plugin reports no device (%s=%s)", KVC_EMULATED_DEVICES_ENV,
             getenv(KVC_EMULATED_DEVICES_ENV) ? getenv(KVC_EMULATED_DEVICES_ENV) : "(unset)");
    return DRT_SKIP;
  }
  return DRT_READY;
}

const char* drt_name(void) { return "emulated"; }
kvc_device_type drt_device_type(void) { return KVC_DEVICE_CUDA; }
kvc_device_type drt_host_device_type(void) { return KVC_DEVICE_CUDA_HOST; }
int drt_device_count(void) { return emulated_probe_device_count(); }

static int bad_device(int device) {
  if (device >= 0 && device < drt_device_count()) return 0;
  snprintf(last_error, sizeof last_error, "device %d out of range [0, %d)", device, drt_device_count());
  return 1;
}

void* drt_alloc(int device, size_t bytes) {
  if (bad_device(device)) return NULL;
  void* p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    snprintf(last_error, sizeof last_error, "out of host memory for %zu bytes", bytes);
    return NULL;
  }
  return kvc_emulated_tag(p);
}

void drt_free(int device, void* ptr) {
  (void)device;
  free(kvc_emulated_untag(ptr));
}

int drt_upload(int device, void* dst, const void* src, size_t bytes, void* stream) {
  (void)stream; /* the emulated device runs everything in issue order */
  if (bad_device(device)) return 1;
  if (bytes) memcpy(kvc_emulated_untag(dst), src, bytes);
  return 0;
}

int drt_download(int device, void* dst, const void* src, size_t bytes) {
  if (bad_device(device)) return 1;
  emulated_probe_synchronize();
  if (bytes) memcpy(dst, kvc_emulated_untag(src), bytes);
  return 0;
}

void* drt_stream_create(int device) {
  if (bad_device(device)) return NULL;
  return malloc(1); /* a token: distinct from every other live stream and from NULL */
}

void drt_stream_destroy(int device, void* stream) {
  (void)device;
  free(stream);
}

int drt_stream_synchronize(int device, void* stream) {
  (void)stream;
  return bad_device(device);
}

const char* drt_error(void) { return last_error; }
