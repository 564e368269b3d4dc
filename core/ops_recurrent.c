/* core/ops_recurrent.c: PLACEHOLDER until the linear-attention layers land. */
#include "internal.h"

kvc_error* kvc_cache_update_conv_state(kvc_cache* c, uint32_t layer, const kvc_tensor* x,
                                       const kvc_conv_update_options* o, kvc_tensor* out) {
  (void)c, (void)layer, (void)x, (void)o, (void)out;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "kvc_cache_update_conv_state: not yet available");
}
kvc_error* kvc_cache_update_recurrent_state(kvc_cache* c, uint32_t layer, uint32_t s, const kvc_tensor* x,
                                            kvc_tensor* out) {
  (void)c, (void)layer, (void)s, (void)x, (void)out;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "kvc_cache_update_recurrent_state: not yet available");
}
kvc_error* kvc_cache_state_view(const kvc_cache* c, uint32_t layer, uint32_t s, kvc_tensor* a, kvc_tensor* b) {
  (void)c, (void)layer, (void)s, (void)a, (void)b;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "kvc_cache_state_view: not yet available");
}
kvc_error* kvc_cache_has_previous_state(const kvc_cache* c, int32_t layer, int32_t s, int* out) {
  (void)c, (void)layer, (void)s, (void)out;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "kvc_cache_has_previous_state: not yet available");
}
