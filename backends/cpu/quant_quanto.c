/*
 * backends/cpu/quant_quanto.c: optimum-quanto's MaxOptimizer and affine quantizer
 * (docs/semantics.md, 'quanto quantizer'), as transformers' QuantoQuantizedLayer calls them. quanto
 * computes in the tensor's dtype: for float16/bfloat16 every operation is
 * a float32 operation rounded to that dtype (torch's CPU kernels), so each
 * step below rounds where torch does. Division stays a division: multiplying
 * by a reciprocal rounds differently.
 */
#include "half.h"
#include "quantize.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

void kvci_quanto_quantize(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                         uint8_t* codes, float* scale, float* zero) {
  const kvc_dtype dt = spec->dtype;
  const float max_code = kvci_quant_max_code(spec->nbits);
  for (int64_t k = 0; k < ngroups; k++) {
    const float* v = x + k * group;
    uint8_t* q = codes + k * group;
    float lo = v[0], hi = v[0];
    for (int64_t i = 1; i < group; i++) kvc_qm_min_max(v[i], &lo, &hi);
    const float s = kvc_qm_quanto_scale(dt, lo, hi, max_code);
    const float shift = -lo;
    for (int64_t i = 0; i < group; i++) q[i] = kvc_qm_quanto_code(dt, v[i], s, shift, max_code);
    scale[k] = s;
    zero[k] = shift;
  }
}

static inline void quanto_group(kvc_dtype dt, const uint8_t* q, float s, float shift, int64_t group, float* o) {
  for (int64_t i = 0; i < group; i++) o[i] = kvc_qm_quanto_value(dt, s, shift, q[i]);
}

void kvci_quanto_dequantize(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out) {
  const kvc_dtype dt = spec->dtype;
  for (int64_t k = 0; k < ngroups; k++) {
    const uint8_t* q = codes + k * group;
    float* o = out + k * group;
    KVC_WITH_CONST_DTYPE(dt, quanto_group, q, scale[k], zero[k], group, o);
  }
}
