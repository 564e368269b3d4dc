/* core/layer_quantized.c: PLACEHOLDER until the quantized layer lands: creating such a layer is refused at its first update. */
#include "internal.h"

static kvc_error* refuse(const char* fn, uint32_t index, const kvc_layer* l, int64_t n, const kvc_update_options* o) {
  (void)l;
  (void)n;
  (void)o;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "%s: layer %u: quantized layers are not available yet", fn, index);
}
const kvc_layer_ops kvc_quantized_layer_ops = {.check_update = refuse};
