/*
 * core/util/registry.c: which backend serves which device type.
 *
 * The CPU backend is built in. GPU backends are plugins (libkvcache-cuda.so,
 * libkvcache-hip.so) loaded on first use so that one build of the core runs
 * on machines with or without a GPU runtime; "no device" is an error value.
 * Search order for a plugin: $KVC_BACKEND_PATH (a directory), the directory
 * of libkvcache itself, then the dynamic loader's default search path.
 */
#define _GNU_SOURCE /* dladdr */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "registry.h"

#if defined(KVC_BACKEND_DL) && KVC_BACKEND_DL
#include <dlfcn.h>
#include <pthread.h>
#endif

#if defined(KVC_LINKED_BACKEND)
/*
 * KVC_LINK_BACKEND=CUDA|HIP (CMake): one GPU backend (backends/gpu) is
 * linked into this library and serves its device type, KVC_LINKED_BACKEND,
 * without a plugin; the other GPU type still loads as a plugin.
 */
const kvc_backend* kvci_linked_backend(void);
#endif

#if defined(KVC_BACKEND_DL) && KVC_BACKEND_DL
typedef const kvc_backend* (*kvc_backend_entry_fn)(uint32_t api_version);

typedef struct plugin_slot {
  pthread_once_t once;
  const char* file;
  kvc_device_type type;
  const kvc_backend* backend;
  char why[512];
} plugin_slot;

static plugin_slot cuda_slot = {PTHREAD_ONCE_INIT, "libkvcache-cuda.so", KVC_DEVICE_CUDA, NULL, ""};
static plugin_slot hip_slot = {PTHREAD_ONCE_INIT, "libkvcache-hip.so", KVC_DEVICE_ROCM, NULL, ""};

static void* try_open(const char* dir, const char* file, char* tried, size_t tried_len) {
  char path[1024];
  if (dir && *dir)
    snprintf(path, sizeof path, "%s/%s", dir, file);
  else
    snprintf(path, sizeof path, "%s", file);
  size_t used = strlen(tried);
  snprintf(tried + used, tried_len - used, "%s%s", used ? ", " : "", path);
  return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

static void load_plugin(plugin_slot* slot) {
  char tried[400] = "";
  void* h = NULL;
  const char* env = getenv("KVC_BACKEND_PATH");
  if (env) h = try_open(env, slot->file, tried, sizeof tried);
  if (!h) {
    Dl_info info;
    if (dladdr((void*)&kvci_backend_for, &info) && info.dli_fname) {
      char dir[512];
      snprintf(dir, sizeof dir, "%s", info.dli_fname);
      char* slash = strrchr(dir, '/');
      if (slash) {
        *slash = 0;
        h = try_open(dir, slot->file, tried, sizeof tried);
      }
    }
  }
  if (!h) h = try_open(NULL, slot->file, tried, sizeof tried);
  if (!h) {
    snprintf(slot->why, sizeof slot->why, "the backend plugin %s was not found (tried %s; set KVC_BACKEND_PATH)",
             slot->file, tried);
    return;
  }
  kvc_backend_entry_fn entry = (kvc_backend_entry_fn)dlsym(h, "kvc_backend_entry");
  if (!entry) {
    snprintf(slot->why, sizeof slot->why, "%s has no kvc_backend_entry symbol", slot->file);
    dlclose(h);
    return;
  }
  const kvc_backend* b = entry(KVC_BACKEND_API_VERSION);
  if (!b || b->api_version != KVC_BACKEND_API_VERSION || b->struct_size < sizeof(kvc_backend)) {
    snprintf(slot->why, sizeof slot->why,
             "%s speaks backend API version %u but this core needs version %u; install matching versions",
             slot->file, b ? b->api_version : 0u, (unsigned)KVC_BACKEND_API_VERSION);
    dlclose(h);
    return;
  }
  if (b->device_count(b->ctx) <= 0) {
    /* The plugin's probe tells no device from no driver or a driver too old (backends/gpu/gpu_probe.h). */
    const char* probe = b->last_error ? b->last_error(b->ctx) : NULL;
    if (probe && *probe)
      snprintf(slot->why, sizeof slot->why, "%s loaded but can use no device: %s", slot->file, probe);
    else
      snprintf(slot->why, sizeof slot->why, "%s loaded but found no device", slot->file);
    return;
  }
  slot->backend = b;
}

static void load_cuda(void) { load_plugin(&cuda_slot); }
static void load_hip(void) { load_plugin(&hip_slot); }
#endif

kvc_error* kvci_backend_for(const char* fn, const kvc_device* device, const kvc_backend** out) {
  if (device->device_type == KVC_DEVICE_CPU) {
    if (device->device_id != 0)
      return kvci_err(KVC_ERROR_NO_DEVICE, "%s: device.device_id is %d but the CPU device has id 0", fn,
                     (int)device->device_id);
    *out = kvci_cpu_backend();
    return NULL;
  }
  if (device->device_type != KVC_DEVICE_CUDA && device->device_type != KVC_DEVICE_ROCM)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: device.device_type is %d; caches live on KVC_DEVICE_CPU (1), KVC_DEVICE_CUDA (2) or "
                   "KVC_DEVICE_ROCM (10)",
                   fn, (int)device->device_type);
#if defined(KVC_LINKED_BACKEND)
  if (device->device_type == KVC_LINKED_BACKEND) {
    const kvc_backend* linked = kvci_linked_backend();
    int found = linked->device_count(linked->ctx);
    const char* probe = found <= 0 && linked->last_error ? linked->last_error(linked->ctx) : NULL;
    if (device->device_id < 0 || device->device_id >= found)
      return kvci_err(KVC_ERROR_NO_DEVICE, "%s: device.device_id is %d but %d %s device(s) were found%s%s", fn,
                     (int)device->device_id, found, device->device_type == KVC_DEVICE_CUDA ? "CUDA" : "ROCm",
                     probe ? ": " : "", probe ? probe : "");
    *out = linked;
    return NULL;
  }
#endif
#if defined(KVC_BACKEND_DL) && KVC_BACKEND_DL
  plugin_slot* slot = device->device_type == KVC_DEVICE_CUDA ? &cuda_slot : &hip_slot;
  pthread_once(&slot->once, device->device_type == KVC_DEVICE_CUDA ? load_cuda : load_hip);
  if (!slot->backend)
    return kvci_err(KVC_ERROR_NO_DEVICE, "%s: no %s device: %s", fn,
                   device->device_type == KVC_DEVICE_CUDA ? "CUDA" : "ROCm", slot->why);
  int count = slot->backend->device_count(slot->backend->ctx);
  if (device->device_id < 0 || device->device_id >= count)
    return kvci_err(KVC_ERROR_NO_DEVICE, "%s: device.device_id is %d but %d %s device(s) were found", fn,
                   (int)device->device_id, count, device->device_type == KVC_DEVICE_CUDA ? "CUDA" : "ROCm");
  *out = slot->backend;
  return NULL;
#else
  return kvci_err(KVC_ERROR_NO_DEVICE,
                 "%s: no %s device: this build of kvcache has no GPU backend (built without KVC_BACKEND_DL)", fn,
                 device->device_type == KVC_DEVICE_CUDA ? "CUDA" : "ROCm");
#endif
}
