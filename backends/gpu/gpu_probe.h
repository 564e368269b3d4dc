/*
 * backends/gpu/gpu_probe.h: the words for a GPU runtime that cannot run the
 * plugin, so that "no device" is said only when there is none: no driver, a
 * driver older than the runtime the plugin carries, no device, or no kernel
 * image in the plugin for a device's architecture.
 *
 * The plugin gathers the facts from its runtime (gpu_backend.cpp) and these
 * plain C functions word them, so that the CPU suite checks every case
 * (tests/unit/gpu_plugin), including those no CI machine has (an old driver,
 * a card the build left out).
 */
#ifndef KVC_GPU_PROBE_H
#define KVC_GPU_PROBE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What the device count met. */
typedef enum kvc_gpu_probe_status {
  KVC_GPU_PROBE_NO_DEVICE = 0,  /* the runtime works and counts no device (or reports "no device") */
  KVC_GPU_PROBE_OLD_DRIVER = 1, /* "insufficient driver": none found (driver_version 0) or older than the runtime */
  KVC_GPU_PROBE_FAILED = 2,     /* any other runtime error */
} kvc_gpu_probe_status;

typedef struct kvc_gpu_probe {
  const char* vendor;        /* "cuda" or "hip" */
  kvc_gpu_probe_status status;
  int driver_version;        /* the vendor's encoding (CUDA: 1000 * major + 10 * minor); 0: no driver found */
  int runtime_version;       /* of the runtime the plugin carries (CUDA: CUDART_VERSION; HIP: HIP_VERSION) */
  const char* error_name;    /* the runtime's name and words for the error; NULL when there was none */
  const char* error_text;
} kvc_gpu_probe;

/* Why the plugin can use no device, in one sentence for kvc_error's message. */
void kvc_gpu_probe_why(char* out, size_t len, const kvc_gpu_probe* probe);

/*
 * Why a cache cannot run on `device`: the plugin holds no kernel image for its
 * architecture ("8.6" for CUDA, "gfx942" for HIP). `built_for` lists the
 * targets the plugin was compiled for (KVC_CUDA_ARCHITECTURES or
 * KVC_HIP_ARCHITECTURES).
 */
void kvc_gpu_no_image_why(char* out, size_t len, const char* vendor, int device, const char* device_name,
                          const char* arch, const char* built_for, const char* error_name, const char* error_text);

#ifdef __cplusplus
}
#endif

#endif /* KVC_GPU_PROBE_H */
