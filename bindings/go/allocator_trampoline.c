//go:build cgo

// Allocator's C side: the kvc_allocator functions the library calls, which call the Go functions
// allocator_cgo.go exports (a file with //export may only declare C functions, so they live here).
#include <stdint.h>

#include <kvcache.h>

#include "_cgo_export.h"

static void* trampoline_alloc(void* ctx, size_t bytes, size_t alignment, kvc_device device, void* stream) {
  return kvcgoAlloc((uintptr_t)ctx, bytes, alignment, device.device_type, device.device_id, (uintptr_t)stream);
}

static void trampoline_free(void* ctx, void* ptr, size_t bytes, kvc_device device, void* stream) {
  kvcgoFree((uintptr_t)ctx, ptr, bytes, device.device_type, device.device_id, (uintptr_t)stream);
}

static void trampoline_release(void* ctx) { kvcgoRelease((uintptr_t)ctx); }

// library_releases: the library deletes the handle (release) after the last cache sharing it; else the Go
// side does, after the pool is destroyed.
void kvcgo_allocator_fill(kvc_allocator* a, uintptr_t handle, int library_releases) {
  kvc_allocator_init(a);
  a->ctx = (void*)handle;
  a->alloc = trampoline_alloc;
  a->free = trampoline_free;
  if (library_releases) a->release = trampoline_release;
}
