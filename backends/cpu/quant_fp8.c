/*
 * backends/cpu/quant_fp8.c: float8 e4m3fn and transformers' per-tensor FP8 scale
 * (see quant_fp8.h). The conversion follows torch's c10::Float8_e4m3fn bit
 * for bit (as torch 2.15 converts on CPU: saturating), with integer
 * arithmetic only, so that no floating-point environment setting (flush to
 * zero, x87 precision) can change a code. tests/unit/
 * test_internal_quant_fp8.c checks every float32 bit pattern against torch.
 */
#include "quant_fp8.h"

#include <float.h>
#include <math.h>

#include "half.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

uint8_t kvci_fp8_e4m3fn_from_f32(float f) {
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

float kvci_fp8_e4m3fn_to_f32(uint8_t code) {
  uint32_t sign = (uint32_t)(code & 0x80u) << 24;
  uint32_t exp = (code >> 3) & 0xfu, man = code & 0x7u;
  if (exp == 0xfu && man == 0x7u) return kvci_f32_from_bits(sign | 0x7ff00000u); /* torch's NaN */
  if (exp == 0) {
    float v = (float)man * (1.0f / 512.0f); /* subnormal: man * 2^-9, exact */
    return sign ? -v : v;
  }
  return kvci_f32_from_bits(sign | ((exp + 120u) << 23) | (man << 20));
}

float kvci_fp8_amax(kvc_dtype dtype, const void* data, int64_t n) {
  float m = 0.0f;
  int nan = 0;
  for (int64_t i = 0; i < n; i++) {
    float a = fabsf(kvci_load_f32(dtype, data, i));
    if (a != a)
      nan = 1;
    else if (a > m)
      m = a;
  }
  return nan ? kvci_f32_from_bits(0x7fc00000u) : m;
}

float kvci_fp8_scale(float amax) {
  float s = amax / KVC_FP8_E4M3FN_MAX;
  if (s < FLT_MIN) s = FLT_MIN; /* clamp(min=tiny); a NaN fails the test and stays */
  return s;
}

float kvci_fp8_calibrate(kvc_dtype dtype, const void* data, int64_t n) {
  return kvci_fp8_scale(kvci_fp8_amax(dtype, data, n));
}

void kvci_fp8_quantize(kvc_dtype dtype, const void* x, int64_t n, float scale, uint8_t* codes) {
  for (int64_t i = 0; i < n; i++) codes[i] = kvci_fp8_e4m3fn_from_f32(kvci_load_f32(dtype, x, i) / scale);
}

void kvci_fp8_dequantize(const uint8_t* codes, int64_t n, float scale, kvc_dtype dtype, void* out) {
  float table[256];
  for (int c = 0; c < 256; c++) table[c] = kvci_fp8_e4m3fn_to_f32((uint8_t)c) * scale;
  for (int64_t i = 0; i < n; i++) kvci_store_f32(dtype, out, i, table[codes[i]]);
}
