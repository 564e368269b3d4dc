/* core/offload.c: PLACEHOLDER until the offloading work lands (kvc_cache_offload/prefetch refuse). */
#include "internal.h"

int kvc_offload_layer_takes_part(kvc_offload mode, const kvc_layer* l) {
  (void)mode;
  (void)l;
  return 0;
}
uint64_t kvc_offload_retired_bytes(const kvc_cache* c) {
  (void)c;
  return 0;
}
void kvc_offload_release_retired(kvc_cache* c) { (void)c; }
kvc_error* kvc_offload_prepare(const char* fn, kvc_cache* c, uint32_t first, uint32_t count) {
  (void)fn;
  (void)c;
  (void)first;
  (void)count;
  return NULL;
}
void kvc_offload_after_update(kvc_cache* c, uint32_t layer) {
  (void)c;
  (void)layer;
}
void kvc_offload_free_state(kvc_cache* c) { (void)c; }
kvc_error* kvc_cache_offload(kvc_cache* c, uint32_t layer) {
  (void)c;
  (void)layer;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "kvc_cache_offload: not yet available");
}
kvc_error* kvc_cache_prefetch(kvc_cache* c, uint32_t layer) {
  (void)c;
  (void)layer;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "kvc_cache_prefetch: not yet available");
}
