/* core/layer_sink.c: PLACEHOLDER until the sink layer lands: creating such a layer is refused at its first update. */
#include "internal.h"

static kvc_error* refuse(const char* fn, uint32_t index, const kvc_layer* l, int64_t n, const kvc_update_options* o) {
  (void)l;
  (void)n;
  (void)o;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "%s: layer %u: sink layers are not available yet", fn, index);
}
const kvc_layer_ops kvc_sink_layer_ops = {.check_update = refuse};
void kvc_sink_free_state(kvc_cache* c) { (void)c; }
kvc_error* kvc_sink_clone_state(const kvc_cache* src, kvc_cache* dst) {
  (void)src;
  (void)dst;
  return NULL;
}
