/*
 * backends/gpu/gpu_probe.c: the words of gpu_probe.h.
 *
 * Minimum NVIDIA driver: a CUDA 13.x runtime runs on every driver of CUDA
 * 13.0 and later, 580 or newer on Linux (NVIDIA, "CUDA Compatibility: Minor
 * Version Compatibility", table "CUDA Toolkit 11.x, 12.x, and 13.x Minimum
 * and Maximum Required Driver Versions"; the CUDA 13.0 GA release notes list
 * 580.65.06 as the driver of that release). Such a driver runs the SASS the
 * plugin ships; it cannot compile PTX of a newer toolkit (docs/gpus.md).
 */
#include "gpu_probe.h"

#include <stdio.h>
#include <string.h>

/* The Linux driver branch of each CUDA major release the plugin may be built with (minor version compatibility). */
static const char* cuda_driver_floor(int runtime_major) {
  switch (runtime_major) {
    case 12: return "525";
    case 13: return "580";
    default: return NULL;
  }
}

/* " (name: text)" when the runtime gave an error, else "". */
static void vendor_words(char* out, size_t len, const char* name, const char* text) {
  if (name && *name) snprintf(out, len, " (%s: %s)", name, text && *text ? text : "no description");
  else if (len) out[0] = '\0';
}

static void cuda_old_driver(char* out, size_t len, const kvc_gpu_probe* p, const char* words) {
  int major = p->runtime_version / 1000;
  const char* floor = cuda_driver_floor(major);
  char need[96];
  if (floor) snprintf(need, sizeof need, "CUDA %d.0 or newer (Linux driver %s or newer)", major, floor);
  else snprintf(need, sizeof need, "CUDA %d.0 or newer", major);
  if (p->driver_version <= 0)
    snprintf(out, len,
             "no NVIDIA driver: libcuda.so.1 was not found or did not load; this plugin needs a driver for %s%s "
             "(docs/gpus.md)",
             need, words);
  else
    snprintf(out, len, "the NVIDIA driver supports CUDA %d.%d, this plugin needs %s%s (docs/gpus.md)",
             p->driver_version / 1000, p->driver_version % 1000 / 10, need, words);
}

/* HIP_VERSION and hipDriverGetVersion: 10^7 * major + 10^5 * minor + patch. */
static void hip_old_driver(char* out, size_t len, const kvc_gpu_probe* p, const char* words) {
  int rmajor = p->runtime_version / 10000000, rminor = p->runtime_version / 100000 % 100;
  if (p->driver_version <= 0)
    snprintf(out, len, "no ROCm driver (amdgpu kernel driver and HSA runtime) was found; this plugin needs HIP %d.%d%s",
             rmajor, rminor, words);
  else
    snprintf(out, len, "the ROCm driver supports HIP %d.%d, this plugin needs HIP %d.%d or newer%s",
             p->driver_version / 10000000, p->driver_version / 100000 % 100, rmajor, rminor, words);
}

void kvc_gpu_probe_why(char* out, size_t len, const kvc_gpu_probe* p) {
  if (!out || !len) return;
  int cuda = strcmp(p->vendor, "cuda") == 0;
  char words[256];
  vendor_words(words, sizeof words, p->error_name, p->error_text);
  switch (p->status) {
    case KVC_GPU_PROBE_OLD_DRIVER:
      if (cuda) cuda_old_driver(out, len, p, words);
      else hip_old_driver(out, len, p, words);
      return;
    case KVC_GPU_PROBE_NO_DEVICE:
      snprintf(out, len, "no %s device%s", cuda ? "CUDA" : "HIP (ROCm)", words[0] ? words : " (the runtime counts 0)");
      return;
    case KVC_GPU_PROBE_FAILED:
      break;
  }
  snprintf(out, len, "the %s runtime could not count devices%s", cuda ? "CUDA" : "HIP", words);
}

void kvc_gpu_no_image_why(char* out, size_t len, const char* vendor, int device, const char* device_name,
                          const char* arch, const char* built_for, const char* error_name, const char* error_text) {
  if (!out || !len) return;
  int cuda = strcmp(vendor, "cuda") == 0;
  char words[256];
  vendor_words(words, sizeof words, error_name, error_text);
  snprintf(out, len,
           "libkvcache-%s.so has no kernel image for device %d (%s, %s %s): it was built for %s; rebuild it with "
           "%s naming this architecture (docs/gpus.md)%s",
           vendor, device, device_name && *device_name ? device_name : "unnamed", cuda ? "compute capability" : "target",
           arch, built_for && *built_for ? built_for : "unknown targets",
           cuda ? "-DKVC_CUDA_ARCHITECTURES" : "-DKVC_HIP_ARCHITECTURES", words);
}
