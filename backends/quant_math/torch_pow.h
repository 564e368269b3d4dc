/*
 * backends/quant_math/torch_pow.h: x^y as torch's vectorized CPU pow computes it for float32 (SLEEF's powf, 1-ulp,
 * with fused multiply-adds), for the HQQ solver's |error|^(0.7 - 1): the CPU backend (through
 * backends/cpu/torch_cpu_math.c, which adds a copy compiled for the FMA instruction) and the GPU kernels run this
 * one copy. fmaf is exact on both (one rounding), and every other operation is its own statement, so the device's
 * results are the CPU's bit for bit.
 *
 * The algorithm and coefficients are SLEEF's (Copyright Naoki Shibata and contributors, Boost Software License
 * 1.0; the notice and the licence text are in third_party/SLEEF-LICENSE.txt).
 */
#ifndef KVC_QUANT_MATH_TORCH_POW_H
#define KVC_QUANT_MATH_TORCH_POW_H

#include <math.h>
#include <stdint.h>

#include "quant_math.h"

/* A float-float number: the value is x + y with |y| <= ulp(x) / 2. */
typedef struct {
  float x, y;
} kvc_qm_ff;

KVC_QM_FN kvc_qm_ff kvc_qm_ff_make(float x, float y) {
  kvc_qm_ff r;
  r.x = x;
  r.y = y;
  return r;
}

/* Arithmetic shift right of a negative int without implementation-defined behaviour. */
KVC_QM_FN int32_t kvc_qm_sra(int32_t v, int k) { return v >= 0 ? v >> k : ~(~v >> k); }
KVC_QM_FN int32_t kvc_qm_shl(int32_t v, int k) { return (int32_t)((uint32_t)v << k); }

KVC_QM_FN kvc_qm_ff kvc_qm_ff_add2_f_f(float x, float y) {
  float s = x + y;
  float v = s - x;
  float a = s - v;
  float b = x - a;
  float c = y - v;
  return kvc_qm_ff_make(s, b + c);
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_add2_ff_f(kvc_qm_ff x, float y) {
  float s = x.x + y;
  float v = s - x.x;
  float a = s - v;
  float b = x.x - a;
  float c = y - v;
  float t = b + c;
  return kvc_qm_ff_make(s, t + x.y);
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_add2_ff_ff(kvc_qm_ff x, kvc_qm_ff y) {
  float s = x.x + y.x;
  float v = s - x.x;
  float a = s - v;
  float b = x.x - a;
  float c = y.x - v;
  float t = b + c;
  float lo = x.y + y.y;
  return kvc_qm_ff_make(s, t + lo);
}

/* |x| >= |y| */
KVC_QM_FN kvc_qm_ff kvc_qm_ff_add_ff_ff(kvc_qm_ff x, kvc_qm_ff y) {
  float s = x.x + y.x;
  float t = x.x - s;
  t = t + y.x;
  t = t + x.y;
  t = t + y.y;
  return kvc_qm_ff_make(s, t);
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_add_f_ff(float x, kvc_qm_ff y) {
  float s = x + y.x;
  float t = x - s;
  t = t + y.x;
  t = t + y.y;
  return kvc_qm_ff_make(s, t);
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_normalize(kvc_qm_ff t) {
  float s = t.x + t.y;
  float d = t.x - s;
  return kvc_qm_ff_make(s, d + t.y);
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_scale(kvc_qm_ff d, float s) { return kvc_qm_ff_make(d.x * s, d.y * s); }

KVC_QM_FN kvc_qm_ff kvc_qm_ff_mul_ff_f(kvc_qm_ff x, float y) {
  float s = x.x * y;
  return kvc_qm_ff_make(s, fmaf(x.y, y, fmaf(x.x, y, -s)));
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_mul_ff_ff(kvc_qm_ff x, kvc_qm_ff y) {
  float s = x.x * y.x;
  return kvc_qm_ff_make(s, fmaf(x.x, y.y, fmaf(x.y, y.x, fmaf(x.x, y.x, -s))));
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_square(kvc_qm_ff x) {
  float s = x.x * x.x;
  float twice = x.x + x.x;
  return kvc_qm_ff_make(s, fmaf(twice, x.y, fmaf(x.x, x.x, -s)));
}

KVC_QM_FN kvc_qm_ff kvc_qm_ff_div(kvc_qm_ff n, kvc_qm_ff d) {
  float t = 1.0f / d.x;
  float s = n.x * t;
  float u = fmaf(t, n.x, -s);
  float v = fmaf(-d.y, t, fmaf(-d.x, t, 1.0f));
  return kvc_qm_ff_make(s, fmaf(s, v, fmaf(n.y, t, u)));
}

/* Round half to even, as the vector float-to-int conversion does. */
KVC_QM_FN int32_t kvc_qm_round_to_int(float v) {
  float a = fabsf(v);
  if (a < 8388608.0f) a = (a + 8388608.0f) - 8388608.0f;
  return (int32_t)copysignf(a, v);
}

/* ldexp by exponent-field arithmetic, in SLEEF's four-step form (exact for normal results). */
KVC_QM_FN float kvc_qm_ldexp_steps(float x, int32_t q) {
  int32_t m = kvc_qm_sra(q, 31);
  m = kvc_qm_shl(kvc_qm_sra(m + q, 6) - m, 4);
  q = q - kvc_qm_shl(m, 2);
  m = m + 0x7f;
  if (m < 0) m = 0;
  if (m > 0xff) m = 0xff;
  float u = kvci_f32_from_bits((uint32_t)m << 23);
  x = x * u;
  x = x * u;
  x = x * u;
  x = x * u;
  u = kvci_f32_from_bits((uint32_t)(q + 0x7f) << 23);
  return x * u;
}

/* log(d) as a float-float, d > 0. */
KVC_QM_FN kvc_qm_ff kvc_qm_log_ff(float d) {
  int small = d < 0x1p-126f;
  if (small) d = d * 0x1p64f;
  float scaled = d * (1.0f / 0.75f);
  int32_t e = (int32_t)((kvci_f32_bits(scaled) >> 23) & 0xff) - 0x7f;
  float m = kvci_f32_from_bits(kvci_f32_bits(d) + ((uint32_t)(-e) << 23));
  if (small) e -= 64;

  kvc_qm_ff x = kvc_qm_ff_div(kvc_qm_ff_add2_f_f(-1.0f, m), kvc_qm_ff_add2_f_f(1.0f, m));
  kvc_qm_ff x2 = kvc_qm_ff_square(x);
  float t = 0.240320354700088500976562f;
  t = fmaf(t, x2.x, 0.285112679004669189453125f);
  t = fmaf(t, x2.x, 0.400007992982864379882812f);
  const kvc_qm_ff c = {0.66666662693023681640625f, 3.69183861259614332084311e-09f};
  const kvc_qm_ff ln2 = {0.69314718246459960938f, -1.904654323148236017e-09f};

  kvc_qm_ff s = kvc_qm_ff_mul_ff_f(ln2, (float)e);
  s = kvc_qm_ff_add_ff_ff(s, kvc_qm_ff_scale(x, 2.0f));
  s = kvc_qm_ff_add_ff_ff(s, kvc_qm_ff_mul_ff_ff(kvc_qm_ff_mul_ff_ff(x2, x), kvc_qm_ff_add2_ff_ff(kvc_qm_ff_mul_ff_f(x2, t), c)));
  return s;
}

/* exp of a float-float. */
KVC_QM_FN float kvc_qm_exp_ff(kvc_qm_ff d) {
  const float r_ln2 = 1.442695040888963407359924681001892137426645954152985934135449406931f;
  const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187045e-06f;
  float u = d.x + d.y;
  u = u * r_ln2;
  int32_t q = kvc_qm_round_to_int(u);
  float qf = (float)q;

  kvc_qm_ff s = kvc_qm_ff_add2_ff_f(d, qf * -ln2_hi);
  s = kvc_qm_ff_add2_ff_f(s, qf * -ln2_lo);
  s = kvc_qm_ff_normalize(s);

  u = 0.00136324646882712841033936f;
  u = fmaf(u, s.x, 0.00836596917361021041870117f);
  u = fmaf(u, s.x, 0.0416710823774337768554688f);
  u = fmaf(u, s.x, 0.166665524244308471679688f);
  u = fmaf(u, s.x, 0.499999850988388061523438f);

  kvc_qm_ff t = kvc_qm_ff_add_ff_ff(s, kvc_qm_ff_mul_ff_f(kvc_qm_ff_square(s), u));
  t = kvc_qm_ff_add_f_ff(1.0f, t);
  u = t.x + t.y;
  u = kvc_qm_ldexp_steps(u, q);
  if (d.x < -104.0f) u = 0.0f;
  return u;
}

KVC_QM_FN float kvc_qm_powf_vec(float x, float y) {
  if (isnan(x) || isnan(y)) return x + y;
  if (x == 1.0f || y == 0.0f) return 1.0f;
  if (x == 0.0f || isinf(x)) return (signbit(y) != 0) != (x == 0.0f) ? 0.0f : INFINITY;
  float r = kvc_qm_exp_ff(kvc_qm_ff_mul_ff_f(kvc_qm_log_ff(x), y));
  return isnan(r) ? INFINITY : r;
}

/* The exponent hqq's shrinkage passes, lp - 1 with lp = 0.7, as Python computed it (-0.30000000000000004). */
#define KVC_HQQ_POW_EXPONENT (0.7 - 1.0)

/*
 * |x|^(lp - 1) where torch's loop has no whole vector left (the last n % 16 values of a call): the C library's
 * double pow, rounded to float. On a device this is the vendor's double pow, which is not glibc's: the float
 * results agree unless the exact power lies within a few double ulps of a float rounding boundary, where they may
 * differ by one float ulp (docs/design.md, 'Quantizing on devices', states what that can change).
 */
KVC_QM_FN float kvc_qm_pow_tail(float x) { return (float)pow((double)x, KVC_HQQ_POW_EXPONENT); }

#endif /* KVC_QUANT_MATH_TORCH_POW_H */
