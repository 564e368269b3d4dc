/*
 * tests/unit/gpu_plugin/test_gpu_probe.c: the GPU plugins' words for a
 * machine they cannot run on (backends/gpu/gpu_probe.h), for every case,
 * including those no CI machine has: a driver older than the runtime, no
 * driver at all, no device, another runtime failure, and a card whose
 * architecture the build left out. Each message must name what to install
 * or rebuild and carry the runtime's own words.
 */
#include <stdio.h>
#include <string.h>

#include "gpu_probe.h"

static int failures;

/* `text` holds every one of the NULL-terminated `parts`. */
static void expect_has(const char* what, const char* text, const char* const* parts) {
  for (; *parts; parts++)
    if (!strstr(text, *parts)) {
      fprintf(stderr, "FAIL %s: \"%s\" lacks \"%s\"\n", what, text, *parts);
      failures++;
    }
}

#define EXPECT_HAS(what, text, ...)                          \
  do {                                                       \
    const char* const parts_[] = {__VA_ARGS__, NULL};        \
    expect_has((what), (text), parts_);                      \
  } while (0)

static void test_cuda_driver(void) {
  char out[400];
  kvc_gpu_probe p = {"cuda", KVC_GPU_PROBE_OLD_DRIVER, 12040, 13020, "cudaErrorInsufficientDriver",
                     "CUDA driver version is insufficient for CUDA runtime version"};
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("old driver", out, "the NVIDIA driver supports CUDA 12.4", "this plugin needs CUDA 13.0 or newer",
             "Linux driver 580 or newer", "cudaErrorInsufficientDriver: CUDA driver version is insufficient");
  if (strstr(out, "no device") || strstr(out, "no CUDA device")) {
    fprintf(stderr, "FAIL old driver: \"%s\" reads as no device\n", out);
    failures++;
  }
  p.driver_version = 0;
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("no driver", out, "no NVIDIA driver", "libcuda.so.1", "CUDA 13.0 or newer", "580",
             "cudaErrorInsufficientDriver");
  /* A plugin built with CUDA 12 names 12.0 and its driver branch. */
  p.driver_version = 11080;
  p.runtime_version = 12080;
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("CUDA 12 plugin", out, "supports CUDA 11.8", "needs CUDA 12.0 or newer", "driver 525 or newer");
}

static void test_cuda_other(void) {
  char out[400];
  kvc_gpu_probe p = {"cuda", KVC_GPU_PROBE_NO_DEVICE, 13000, 13020, "cudaErrorNoDevice",
                     "no CUDA-capable device is detected"};
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("no device", out, "no CUDA device", "cudaErrorNoDevice: no CUDA-capable device is detected");
  p.error_name = p.error_text = NULL;
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("counts 0", out, "no CUDA device (the runtime counts 0)");
  kvc_gpu_probe f = {"cuda", KVC_GPU_PROBE_FAILED, 13000, 13020, "cudaErrorSystemDriverMismatch",
                     "system has unsupported display driver / cuda driver combination"};
  kvc_gpu_probe_why(out, sizeof out, &f);
  EXPECT_HAS("failed", out, "the CUDA runtime could not count devices", "cudaErrorSystemDriverMismatch: system has");
}

static void test_hip(void) {
  char out[400];
  kvc_gpu_probe p = {"hip", KVC_GPU_PROBE_OLD_DRIVER, 50000000, 50222000, "hipErrorInsufficientDriver",
                     "hipErrorInsufficientDriver"};
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("hip old driver", out, "the ROCm driver supports HIP 5.0", "needs HIP 5.2 or newer",
             "hipErrorInsufficientDriver");
  p.status = KVC_GPU_PROBE_NO_DEVICE;
  p.error_name = "hipErrorNoDevice";
  p.error_text = "no ROCm-capable device is detected";
  kvc_gpu_probe_why(out, sizeof out, &p);
  EXPECT_HAS("hip no device", out, "no HIP (ROCm) device", "hipErrorNoDevice");
}

static void test_no_image(void) {
  char out[512];
  kvc_gpu_no_image_why(out, sizeof out, "cuda", 1, "Tesla T4", "7.5", "CUDA architectures 80, 90",
                       "cudaErrorNoKernelImageForDevice", "no kernel image is available for execution on the device");
  EXPECT_HAS("cuda no image", out, "libkvcache-cuda.so has no kernel image for device 1",
             "Tesla T4, compute capability 7.5", "built for CUDA architectures 80, 90", "-DKVC_CUDA_ARCHITECTURES",
             "cudaErrorNoKernelImageForDevice: no kernel image");
  kvc_gpu_no_image_why(out, sizeof out, "hip", 0, "AMD Instinct MI300X", "gfx942:sramecc+:xnack-", "gfx90a",
                       "hipErrorNoBinaryForGpu", "hipErrorNoBinaryForGpu");
  EXPECT_HAS("hip no image", out, "libkvcache-hip.so has no kernel image for device 0", "target gfx942",
             "built for gfx90a", "-DKVC_HIP_ARCHITECTURES", "hipErrorNoBinaryForGpu");
}

/* A short buffer gets a terminated prefix, never an overrun. */
static void test_truncation(void) {
  char out[24];
  memset(out, 'x', sizeof out);
  kvc_gpu_probe p = {"cuda", KVC_GPU_PROBE_OLD_DRIVER, 12040, 13020, "cudaErrorInsufficientDriver", "text"};
  kvc_gpu_probe_why(out, 16, &p);
  if (strlen(out) != 15 || out[16] != 'x') {
    fprintf(stderr, "FAIL truncation: %zu bytes written into 16\n", strlen(out) + 1);
    failures++;
  }
}

int main(void) {
  test_cuda_driver();
  test_cuda_other();
  test_hip();
  test_no_image();
  test_truncation();
  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("gpu_probe: every case worded\n");
  return 0;
}
