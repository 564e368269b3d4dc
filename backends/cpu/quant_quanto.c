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
    for (int64_t i = 1; i < group; i++) {
      if (v[i] < lo) lo = v[i];
      if (v[i] > hi) hi = v[i];
    }
    /* scale = (rmax - rmin) / (qmax - qmin); shift = -rmin. A constant group
     * divides 0 by 0 below: torch turns the NaN into code 0, and 0 * 0 + rmin
     * gives the value back. */
    const float s = kvci_round_to(dt, kvci_round_to(dt, hi - lo) / max_code);
    const float shift = -lo;
    if (dt == KVC_DTYPE_FLOAT32) {
      for (int64_t i = 0; i < group; i++) {
        float t = v[i] + shift;
        q[i] = kvci_quant_code(kvci_round_half_even(t / s), max_code);
      }
    } else {
      for (int64_t i = 0; i < group; i++) {
        float t = kvci_round_to(dt, v[i] + shift);
        q[i] = kvci_quant_code(kvci_round_half_even(kvci_round_to(dt, t / s)), max_code);
      }
    }
    scale[k] = s;
    zero[k] = shift;
  }
}

/* scale * code - shift, each operation rounded to dt as torch computes in it. */
static inline float quanto_value(kvc_dtype dt, float s, float shift, uint8_t code) {
  float scaled = kvci_round_to(dt, s * (float)code);
  return kvci_round_to(dt, scaled - shift);
}

static inline void quanto_group(kvc_dtype dt, const uint8_t* q, float s, float shift, int64_t group, float* o) {
  for (int64_t i = 0; i < group; i++) o[i] = quanto_value(dt, s, shift, q[i]);
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
