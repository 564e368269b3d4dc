/* core/quantize.c: the quantizer entry points of quantize.h, dispatching to quant_quanto.c and quant_hqq.c. */
#include "quantize.h"

int kvc_quantize_groups(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                        uint8_t* codes, float* scale, float* zero) {
  if (spec->quantizer == KVC_QUANTIZER_HQQ) return kvc_hqq_quantize(spec, x, ngroups, group, codes, scale, zero);
  kvc_quanto_quantize(spec, x, ngroups, group, codes, scale, zero);
  return 0;
}

void kvc_dequantize_groups(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out) {
  if (spec->quantizer == KVC_QUANTIZER_HQQ)
    kvc_hqq_dequantize(spec, codes, scale, zero, ngroups, group, out);
  else
    kvc_quanto_dequantize(spec, codes, scale, zero, ngroups, group, out);
}
