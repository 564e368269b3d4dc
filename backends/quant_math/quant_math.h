/*
 * backends/quant_math/quant_math.h: the per-value arithmetic of the group
 * quantizers (docs/semantics.md, 'quanto quantizer' and 'HQQ quantizer'),
 * the bit packing of their codes, and the records' unaligned scalars, in
 * the one form that both the CPU backend (backends/cpu) and the GPU
 * backend's kernels (backends/gpu/gpu_quant_phases.h) compile: plain C whose
 * functions become __host__ __device__ under nvcc and hipcc (KVC_QM_FN).
 * One copy of every rounding step is what keeps the device's codes and
 * values bit for bit the CPU's (docs/design.md, 'Quantizing on devices').
 *
 * Every operation is its own statement and must round on its own: the CPU
 * build compiles C11 without contraction, the GPU targets compile with
 * contraction off (-fmad=false, -ffp-contract=off) and IEEE division.
 */
#ifndef KVC_QUANT_MATH_H
#define KVC_QUANT_MATH_H

#include <math.h>
#include <stdint.h>

#include "half.h"

#if defined(__CUDACC__) || defined(__HIPCC__)
#define KVC_QM_FN static __host__ __device__ __forceinline__
#elif defined(__GNUC__) || defined(__clang__)
#define KVC_QM_FN static inline __attribute__((always_inline))
#else
#define KVC_QM_FN static inline
#endif

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The largest code of nbits, and the code torch's clamp-and-convert gives a rounded value (NaN: 0). */
KVC_QM_FN float kvci_quant_max_code(int nbits) { return (float)((1 << nbits) - 1); }
KVC_QM_FN uint8_t kvci_quant_code(float rounded, float max_code) {
  if (!(rounded > 0.0f)) return 0;
  return rounded < max_code ? (uint8_t)rounded : (uint8_t)max_code;
}

/* Round half to even, as torch.round (exact for |v| < 2^23; larger values are already integers). */
KVC_QM_FN float kvci_round_half_even(float v) {
  float a = v < 0.0f ? -v : v;
  if (!(a < 8388608.0f)) return v;
  a = a + 8388608.0f;
  a = a - 8388608.0f;
  return v < 0.0f ? -a : a;
}

/* One value of a group's running minimum and maximum (v[0] starts both): a NaN first value stays, later NaNs
   are passed over, as the comparisons of quanto's and hqq's min/max reductions on CPU. */
KVC_QM_FN void kvc_qm_min_max(float v, float* lo, float* hi) {
  if (v < *lo) *lo = v;
  if (v > *hi) *hi = v;
}

/* ---- quanto: computes in the tensor's dtype, each float32 operation rounded to it ---- */

/* scale = (rmax - rmin) / (qmax - qmin), shift = -rmin. A constant group divides 0 by 0 in the codes: torch
   turns the NaN into code 0, and 0 * 0 + rmin gives the value back. */
KVC_QM_FN float kvc_qm_quanto_scale(kvc_dtype dt, float lo, float hi, float max_code) {
  float range = kvci_round_to(dt, hi - lo);
  return kvci_round_to(dt, range / max_code);
}

KVC_QM_FN uint8_t kvc_qm_quanto_code(kvc_dtype dt, float v, float s, float shift, float max_code) {
  if (dt == KVC_DTYPE_FLOAT32) {
    float t = v + shift;
    return kvci_quant_code(kvci_round_half_even(t / s), max_code);
  }
  float t = kvci_round_to(dt, v + shift);
  return kvci_quant_code(kvci_round_half_even(kvci_round_to(dt, t / s)), max_code);
}

/* scale * code - shift, each operation rounded to dt. */
KVC_QM_FN float kvc_qm_quanto_value(kvc_dtype dt, float s, float shift, uint8_t code) {
  float scaled = kvci_round_to(dt, s * (float)code);
  return kvci_round_to(dt, scaled - shift);
}

/* ---- HQQ: float32 work, scale and zero point kept in the dtype ---- */

enum { KVC_HQQ_ITERS = 20 };
#define KVC_HQQ_SHRINK 0.1f /* 1 / beta, beta = 10 */

/* torch.clamp(v, 0, max_code): NaN stays, -0 stays. */
KVC_QM_FN float kvc_qm_clamp_code(float v, float max_code) {
  if (v < 0.0f) return 0.0f;
  if (v > max_code) return max_code;
  return v;
}

/* The solver's start for a group of minimum lo and maximum hi: the inverse scale (2^b - 1) / (max - min), which
   torch computes as a reciprocal times 2^b - 1, and the zero point -min * s. */
KVC_QM_FN void kvc_qm_hqq_start(float lo, float hi, float max_code, float* s_out, float* z_out) {
  const float range = hi - lo;
  float s = 1.0f / range;
  s = s * max_code;
  if (fabsf(range) <= 1e-4f) s = 1.0f;
  if (s > 2e4f) s = 2e4f;
  const float neg = -lo;
  *s_out = s;
  *z_out = neg * s;
}

/* The clamped rounded code of value w under inverse scale s and zero point z (still a float). */
KVC_QM_FN float kvc_qm_hqq_rounded(float w, float s, float z, float max_code) {
  float t = w * s;
  t = t + z;
  return kvc_qm_clamp_code(kvci_round_half_even(t), max_code);
}

/*
 * One value of a solver step: *err = |W - W_r| and *target = W_q - (W - W_e) * s, where W_e is the error shrunk
 * towards 0 under the L^0.7 norm; `pow_m03` is |W - W_r|^(0.7 - 1) as torch computed it for this value's place
 * (kvc_qm_shrink_pow).
 */
KVC_QM_FN float kvc_qm_hqq_error(float w, float s, float z, float max_code, float* q_out) {
  const float q = kvc_qm_hqq_rounded(w, s, z, max_code);
  float r = q - z;
  r = r / s;
  *q_out = q;
  return w - r;
}

KVC_QM_FN float kvc_qm_hqq_target(float w, float s, float q, float d, float a, float pow_m03) {
  float shrunk = KVC_HQQ_SHRINK * pow_m03;
  shrunk = a - shrunk;
  if (shrunk < 0.0f) shrunk = 0.0f;
  const float sign = d > 0.0f ? 1.0f : (d < 0.0f ? -1.0f : 0.0f);
  const float e = shrunk * sign;
  float target = w - e;
  target = target * s;
  return q - target;
}

/* The record's scale and zero point of a group of inverse scale s and zero point z, in the dtype. */
KVC_QM_FN float kvc_qm_hqq_scale(kvc_dtype dt, float s) { return kvci_round_to(dt, 1.0f / s); }

/* (code - zero) * scale, each operation rounded to dt (hqq dequantizes in the cache's dtype). */
KVC_QM_FN float kvc_qm_hqq_value(kvc_dtype dt, float s, float z, uint8_t code) {
  float shifted = kvci_round_to(dt, (float)code - z);
  return kvci_round_to(dt, shifted * s);
}

/* A record's dequantized value of `code` under its scale and zero point, for either quantizer. */
KVC_QM_FN float kvc_qm_value(int hqq, kvc_dtype dt, float scale, float zero, uint8_t code) {
  return hqq ? kvc_qm_hqq_value(dt, scale, zero, code) : kvc_qm_quanto_value(dt, scale, zero, code);
}

/* ---- records: scalars at any byte offset, codes as a little-endian bit stream ---- */

/* A float32 stored in dt at p, read byte by byte (records put scales at any offset). */
KVC_QM_FN float kvc_qm_load_bytes(kvc_dtype dt, const unsigned char* p) {
  if (dt == KVC_DTYPE_FLOAT32)
    return kvci_f32_from_bits((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
  const uint16_t h = (uint16_t)(p[0] | p[1] << 8);
  return dt == KVC_DTYPE_FLOAT16 ? kvci_f16_to_f32(h) : kvci_bf16_to_f32(h);
}

/* f rounded to dt and stored at p byte by byte. */
KVC_QM_FN void kvc_qm_store_bytes(kvc_dtype dt, unsigned char* p, float f) {
  uint32_t u = dt == KVC_DTYPE_FLOAT32   ? kvci_f32_bits(f)
               : dt == KVC_DTYPE_FLOAT16 ? kvci_f32_to_f16(f)
                                         : kvci_f32_to_bf16(f);
  const int bytes = dt == KVC_DTYPE_FLOAT32 ? 4 : 2;
  for (int i = 0; i < bytes; i++) p[i] = (unsigned char)(u >> (8 * i));
}

/* Code i of a packed stream of nbits codes: bits [i * nbits, (i + 1) * nbits), reading no byte past them. */
KVC_QM_FN uint8_t kvc_qm_code_at(const unsigned char* codes, int64_t i, int nbits) {
  const int64_t bit = i * nbits;
  const unsigned shift = (unsigned)(bit & 7);
  unsigned v = codes[bit >> 3];
  if (shift + (unsigned)nbits > 8u) v |= (unsigned)codes[(bit >> 3) + 1] << 8;
  return (uint8_t)((v >> shift) & ((1u << nbits) - 1u));
}

/* Packs codes one after the other into whole bytes (kvci_pack_codes' format: the last byte's spare bits 0). */
typedef struct kvc_qm_packer {
  unsigned char* out;
  uint32_t acc;
  int held;
} kvc_qm_packer;

KVC_QM_FN void kvc_qm_pack(kvc_qm_packer* p, uint8_t code, int nbits) {
  p->acc |= (uint32_t)(code & ((1u << nbits) - 1u)) << p->held;
  p->held += nbits;
  while (p->held >= 8) {
    *p->out++ = (unsigned char)p->acc;
    p->acc >>= 8;
    p->held -= 8;
  }
}

KVC_QM_FN void kvc_qm_pack_end(kvc_qm_packer* p) {
  if (p->held > 0) *p->out++ = (unsigned char)p->acc;
  p->acc = 0;
  p->held = 0;
}

#endif /* KVC_QUANT_MATH_H */
