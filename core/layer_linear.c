/* core/layer_linear.c: PLACEHOLDER until the linear-attention layers land. */
#include "internal.h"

static kvc_error* refuse(const char* fn, uint32_t index, const kvc_layer* l, int64_t n, const kvc_update_options* o) {
  (void)l;
  (void)n;
  (void)o;
  return kvc_err(KVC_ERROR_UNSUPPORTED, "%s: layer %u: linear layers are not available yet", fn, index);
}
const kvc_layer_ops kvc_linear_layer_ops = {.check_update = refuse};
const kvc_layer_ops kvc_linear_dynamic_layer_ops = {.check_update = refuse};
const kvc_layer_ops kvc_linear_dynamic_sliding_layer_ops = {.check_update = refuse};
const kvc_layer_ops kvc_linear_static_layer_ops = {.check_update = refuse};
const kvc_layer_ops kvc_linear_static_sliding_layer_ops = {.check_update = refuse};
