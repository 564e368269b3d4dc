/*
 * backends/quant_math/fp8.h: float8 e4m3fn conversions and transformers'
 * per-tensor FP8 scale (backends/cpu/quant_fp8.h says what they compute),
 * shared by the CPU backend and the GPU kernels. The conversion uses integer
 * arithmetic only, so that no floating-point environment (flush to zero, x87
 * precision, a device's denormal mode) can change a code; the one float
 * operation of the scale is a correctly rounded division on both.
 */
#ifndef KVC_QUANT_MATH_FP8_H
#define KVC_QUANT_MATH_FP8_H

#include <float.h>
#include <stdint.h>

#include "quant_math.h"

#define KVC_FP8_E4M3FN_MAX 448.0f /* torch.finfo(torch.float8_e4m3fn).max */
#define KVC_FP8_E4M3FN_NAN 0x7fu  /* | 0x80 for the negative one */

/* float32 -> e4m3fn code, as torch's `.to(torch.float8_e4m3fn)`. */
KVC_QM_FN uint8_t kvci_fp8_e4m3fn_from_f32(float f) {
  uint32_t bits = kvci_f32_bits(f);
  uint8_t sign = (uint8_t)((bits >> 24) & 0x80u);
  uint32_t a = bits & 0x7fffffffu;
  uint8_t code;
  if (a > 0x7f800000u) {
    code = KVC_FP8_E4M3FN_NAN; /* NaN (any payload) */
  } else if (a > 0x43e00000u) {
    code = 0x7eu; /* above 448, infinities included: saturates to 448 (torch 2.15's CPU conversion) */
  } else if (a < (121u << 23)) {
    /* below 2^-6, the smallest normal: a multiple of 2^-9 (a subnormal code, or 0x08 = 2^-6 when it rounds up) */
    uint32_t e = a >> 23;
    uint32_t shift = 141u - e; /* value / 2^-9 = mantissa >> shift */
    if (e == 0 || shift > 25u) {
      code = 0; /* under a quarter of 2^-9: rounds to zero */
    } else {
      uint32_t man = (a & 0x7fffffu) | 0x800000u;
      uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
      if (rem > half || (rem == half && (q & 1u))) q++;
      code = (uint8_t)q;
    }
  } else {
    /* normal up to 448: rebias the exponent (127 -> 7), keep 3 mantissa bits, round to nearest even; a carry
       out of the mantissa moves to the next binade (never past 448 here) */
    uint32_t odd = (a >> 20) & 1u;
    a += ((uint32_t)(7 - 127) << 23) + 0x7ffffu + odd;
    code = (uint8_t)(a >> 20);
  }
  return (uint8_t)(code | sign);
}

/* e4m3fn code -> float32 (exact; NaN as torch decodes it). */
KVC_QM_FN float kvci_fp8_e4m3fn_to_f32(uint8_t code) {
  uint32_t sign = (uint32_t)(code & 0x80u) << 24;
  uint32_t exp = (code >> 3) & 0xfu, man = code & 0x7u;
  if (exp == 0xfu && man == 0x7u) return kvci_f32_from_bits(sign | 0x7ff00000u); /* torch's NaN */
  if (exp == 0) {
    float v = (float)man * (1.0f / 512.0f); /* subnormal: man * 2^-9, exact */
    return sign ? -v : v;
  }
  return kvci_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

/* The scale transformers calibrates from an amax (quant_fp8.h, kvci_fp8_scale). */
KVC_QM_FN float kvci_fp8_scale(float amax) {
  float s = amax / KVC_FP8_E4M3FN_MAX;
  if (s < FLT_MIN) s = FLT_MIN; /* clamp(min=tiny); a NaN fails the test and stays */
  return s;
}

/* One element of the round trip: dtype(float32(e4m3fn(v / scale)) * scale), before the rounding to dtype. A NaN
   code gives torch's NaN itself (what x86 returns for the product), so that the result does not depend on which
   NaN operand a compiler or a device propagates when the scale is a NaN too. */
KVC_QM_FN float kvc_qm_fp8_round_trip(float v, float scale) {
  const float decoded = kvci_fp8_e4m3fn_to_f32(kvci_fp8_e4m3fn_from_f32(v / scale));
  return decoded != decoded ? decoded : decoded * scale;
}

#endif /* KVC_QUANT_MATH_FP8_H */
