/*
 * abi/backend/half.h: float16 and bfloat16 <-> float32, with
 * round-to-nearest-even as torch does on CPU. Quantizers and RoPE
 * re-rotation compute in float32 and must round to the cache dtype exactly
 * where transformers does. It lives beside the backend table because both
 * sides use it: the core (RoPE re-rotation, record scales) and the CPU
 * backend's quantizers.
 */
#ifndef KVC_BACKEND_HALF_H
#define KVC_BACKEND_HALF_H

#include <stdint.h>
#include <string.h>

#include "kvcache/tensor.h"

/* The GPU backend's quantizer kernels (backends/quant_math) convert with these very functions: compiled by nvcc or
   hipcc they are device functions too. */
#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_HALF_FN static __host__ __device__ __forceinline__
#else
#define KVC_HALF_FN static inline
#endif

KVC_HALF_FN uint32_t kvci_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

KVC_HALF_FN float kvci_f32_from_bits(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

KVC_HALF_FN float kvci_bf16_to_f32(uint16_t h) { return kvci_f32_from_bits((uint32_t)h << 16); }

KVC_HALF_FN uint16_t kvci_f32_to_bf16(float f) {
  uint32_t u = kvci_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays a quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

KVC_HALF_FN float kvci_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return kvci_f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return kvci_f32_from_bits(sign);
    float f = (float)man * (1.0f / 16777216.0f); /* subnormal: man * 2^-24 */
    return sign ? -f : f;
  }
  return kvci_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

KVC_HALF_FN uint16_t kvci_f32_to_f16(float f) {
  uint32_t u = kvci_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);     /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);    /* rounds to infinity */
  if (a < 0x38800000u) {                                       /* subnormal or zero in float16 */
    if (a < 0x33000000u) return (uint16_t)sign;                /* below half of the smallest subnormal */
    uint32_t man = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - (a >> 23);                         /* 14..24 */
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = ((a >> 13) - (112u << 10));
  uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)(sign | h);
}

/* kvci_bf16_to_f32(kvci_f32_to_bf16(f)), computed without leaving 32 bits (so that loops of it vectorize well). */
KVC_HALF_FN float kvci_round_to_bf16(float f) {
  uint32_t u = kvci_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kvci_f32_from_bits((u & 0xffff0000u) | 0x00400000u);
  return kvci_f32_from_bits((u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u);
}

/* Rounds a float32 to the nearest value of `dtype` (identity for float32). */
KVC_HALF_FN float kvci_round_to(kvc_dtype dtype, float f) {
  if (dtype == KVC_DTYPE_FLOAT16) return kvci_f16_to_f32(kvci_f32_to_f16(f));
  if (dtype == KVC_DTYPE_BFLOAT16) return kvci_round_to_bf16(f);
  return f;
}

/* Element i of a buffer of `dtype` as float32, and the store back (rounded). */
KVC_HALF_FN float kvci_load_f32(kvc_dtype dtype, const void* base, int64_t i) {
  if (dtype == KVC_DTYPE_FLOAT16) return kvci_f16_to_f32(((const uint16_t*)base)[i]);
  if (dtype == KVC_DTYPE_BFLOAT16) return kvci_bf16_to_f32(((const uint16_t*)base)[i]);
  return ((const float*)base)[i];
}

KVC_HALF_FN void kvci_store_f32(kvc_dtype dtype, void* base, int64_t i, float f) {
  if (dtype == KVC_DTYPE_FLOAT16)
    ((uint16_t*)base)[i] = kvci_f32_to_f16(f);
  else if (dtype == KVC_DTYPE_BFLOAT16)
    ((uint16_t*)base)[i] = kvci_f32_to_bf16(f);
  else
    ((float*)base)[i] = f;
}

/* A float32 stored in `dtype` at an address of any alignment (quantization records' scales and zero points). */
KVC_HALF_FN float kvci_load_f32_unaligned(kvc_dtype dtype, const void* p) {
  if (dtype == KVC_DTYPE_FLOAT32) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, sizeof h);
  return dtype == KVC_DTYPE_FLOAT16 ? kvci_f16_to_f32(h) : kvci_bf16_to_f32(h);
}

KVC_HALF_FN void kvci_store_f32_unaligned(kvc_dtype dtype, void* p, float f) {
  if (dtype == KVC_DTYPE_FLOAT32) {
    memcpy(p, &f, sizeof f);
    return;
  }
  uint16_t h = dtype == KVC_DTYPE_FLOAT16 ? kvci_f32_to_f16(f) : kvci_f32_to_bf16(f);
  memcpy(p, &h, sizeof h);
}

#endif /* KVC_BACKEND_HALF_H */
