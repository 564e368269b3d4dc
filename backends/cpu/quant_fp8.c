/*
 * backends/cpu/quant_fp8.c: float8 e4m3fn and transformers' per-tensor FP8 scale
 * (see quant_fp8.h). The conversion follows torch's c10::Float8_e4m3fn bit
 * for bit (as torch 2.15 converts on CPU: saturating), with integer
 * arithmetic only, so that no floating-point environment setting (flush to
 * zero, x87 precision) can change a code. tests/unit/
 * test_internal_quant_fp8.c checks every float32 bit pattern against torch.
 */
#include "quant_fp8.h"

#include <math.h>

#include "half.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

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
