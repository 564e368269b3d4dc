/*
 * tests/unit/gpu_plugin/test_gpu_plugin_load.c: a built GPU backend plugin
 * loads as core/registry.c loads it and answers without a device.
 *
 * Usage: test_gpu_plugin_load PLUGIN NAME DEVICE_TYPE
 * dlopen (RTLD_NOW: every symbol resolves, whatever GPU runtime the machine
 * has), kvc_backend_entry(KVC_BACKEND_API_VERSION), a table of this core's
 * version and size with every entry set, then device_count(): 0 on a
 * machine without a device or driver, never a crash, and then last_error
 * says why. CI runs this on machines without a GPU; on a GPU machine it
 * reports the devices found.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

typedef const kvc_backend* (*entry_fn)(uint32_t api_version);

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: %s PLUGIN NAME DEVICE_TYPE\n", argv[0]);
    return 2;
  }
  void* h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
    return 1;
  }
  entry_fn entry = (entry_fn)dlsym(h, "kvc_backend_entry");
  if (!entry) {
    fprintf(stderr, "%s has no kvc_backend_entry\n", argv[1]);
    return 1;
  }
  const kvc_backend* b = entry(KVC_BACKEND_API_VERSION);
  int bad = 0;
  if (!b) {
    fprintf(stderr, "kvc_backend_entry(%d) returned NULL\n", KVC_BACKEND_API_VERSION);
    return 1;
  }
  if (b->api_version != KVC_BACKEND_API_VERSION || b->struct_size != sizeof(kvc_backend)) {
    fprintf(stderr, "table speaks version %u (size %u); this core: version %d (size %zu)\n", b->api_version,
            b->struct_size, KVC_BACKEND_API_VERSION, sizeof(kvc_backend));
    bad = 1;
  }
  if (!b->name || strcmp(b->name, argv[2]) != 0) {
    fprintf(stderr, "name is %s, want %s\n", b->name ? b->name : "(null)", argv[2]);
    bad = 1;
  }
  if ((int)b->device_type != atoi(argv[3])) {
    fprintf(stderr, "device_type is %d, want %s\n", (int)b->device_type, argv[3]);
    bad = 1;
  }
  const void* entries[] = {
      (const void*)b->device_count,  (const void*)b->exec_open,         (const void*)b->exec_close,
      (const void*)b->exec_set_stream, (const void*)b->alloc_zeroed,    (const void*)b->free,
      (const void*)b->copy_4d,       (const void*)b->fill_zero_4d,      (const void*)b->copy_rows,
      (const void*)b->host_alloc_zeroed, (const void*)b->host_free,     (const void*)b->copy_tier_4d,
      (const void*)b->tier_wait,     (const void*)b->copy_4d_batch};
  for (size_t i = 0; i < sizeof entries / sizeof *entries; i++)
    if (!entries[i]) {
      fprintf(stderr, "table entry %zu is NULL\n", i);
      bad = 1;
    }
  if (bad) return 1;
  int count = b->device_count(b->ctx);
  if (count < 0) {
    fprintf(stderr, "device_count returned %d\n", count);
    return 1;
  }
  printf("%s: backend \"%s\", API version %u, %d device(s)\n", argv[1], b->name, b->api_version, count);
  /* Twice: a failed runtime initialisation must not turn into a crash on the next call either. */
  if (b->device_count(b->ctx) != count) {
    fprintf(stderr, "device_count changed between two calls\n");
    return 1;
  }
  /*
   * No device: the probe says why in last_error (no driver, a driver too old, none found: gpu_probe.h), with
   * the runtime's own error name; the registry puts it into "loaded but can use no device".
   */
  if (count == 0) {
    const char* why = b->last_error ? b->last_error(b->ctx) : NULL;
    if (!why || !*why) {
      fprintf(stderr, "device_count found no device but last_error gives no reason\n");
      return 1;
    }
    printf("why: %s\n", why);
    const char* expected = strcmp(argv[2], "cuda") == 0 ? "cuda" : "hip";
    if (!strstr(why, expected) && !strstr(why, strcmp(expected, "cuda") == 0 ? "CUDA" : "HIP")) {
      fprintf(stderr, "last_error \"%s\" names neither the runtime nor its error\n", why);
      return 1;
    }
  }
  dlclose(h);
  return 0;
}
