/*
 * backends/cpu/torch_cpu_math.c: torch's CPU summation order and vectorized powf
 * (see torch_cpu_math.h). Every operation is written as its own statement:
 * fusing a multiply and an add, or reassociating, changes the bits.
 *
 * The powf below follows SLEEF's algorithm and coefficients (Copyright Naoki
 * Shibata and contributors, Boost Software License 1.0; the notice and the
 * licence text are in third_party/SLEEF-LICENSE.txt).
 */
#include "torch_cpu_math.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* ------------------------------------------------------------------ sums */

/* The cascade torch's sum kernel runs over the rows of a block of columns:
 * 4 levels of partial sums, each level taking 2^power sums of the one
 * below, power = max(4, ceil(log2(rows)) / 4). */
enum { CASCADE_LEVELS = 4, MAX_COLUMNS = 4 * KVC_TORCH_VEC_FLOATS };

static int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  uint64_t v = (uint64_t)x - 1;
  int64_t bit = 63;
  while (!(v >> bit)) bit--;
  return bit + 1;
}

/* out[c] = the cascade sum over rows i < nrows of x[i * row_stride + c * col_stride], c < ncols. */
static void cascade_columns(const float* x, int64_t row_stride, int64_t col_stride, int64_t ncols, int64_t nrows,
                            float* out) {
  int64_t power = ceil_log2(nrows) / CASCADE_LEVELS;
  if (power < 4) power = 4;
  const int64_t step = (int64_t)1 << power, mask = step - 1;
  float acc[CASCADE_LEVELS][MAX_COLUMNS] = {{0.0f}};
  int64_t i = 0;
  while (i + step <= nrows) {
    for (int64_t j = 0; j < step; j++, i++)
      for (int64_t c = 0; c < ncols; c++) acc[0][c] += x[i * row_stride + c * col_stride];
    for (int level = 1; level < CASCADE_LEVELS; level++) {
      for (int64_t c = 0; c < ncols; c++) {
        acc[level][c] += acc[level - 1][c];
        acc[level - 1][c] = 0.0f;
      }
      if ((i & (mask << (level * power))) != 0) break;
    }
  }
  for (; i < nrows; i++)
    for (int64_t c = 0; c < ncols; c++) acc[0][c] += x[i * row_stride + c * col_stride];
  for (int level = 1; level < CASCADE_LEVELS; level++)
    for (int64_t c = 0; c < ncols; c++) acc[0][c] += acc[level][c];
  for (int64_t c = 0; c < ncols; c++) out[c] = acc[0][c];
}

/* torch's scalar row sum of n values spaced `stride` apart: four interleaved
 * cascades (element 4i + k feeds partial k), the leftover into partial 0. */
static float row_sum(const float* x, int64_t stride, int64_t n) {
  float p[4];
  int64_t quads = n / 4;
  cascade_columns(x, 4 * stride, stride, 4, quads, p);
  for (int64_t i = 4 * quads; i < n; i++) p[0] += x[i * stride];
  p[0] += p[1];
  p[0] += p[2];
  p[0] += p[3];
  return p[0];
}

/* The same over 8-float vectors, then the scalar tail, then the lanes. */
static float vector_row_sum(const float* x, int64_t n) {
  enum { V = KVC_TORCH_VEC_FLOATS };
  float p[4 * V];
  int64_t nvec = n / V, quads = nvec / 4;
  cascade_columns(x, 4 * V, 1, 4 * V, quads, p);
  for (int64_t r = 4 * quads; r < nvec; r++)
    for (int l = 0; l < V; l++) p[l] += x[r * V + l];
  for (int k = 1; k < 4; k++)
    for (int l = 0; l < V; l++) p[l] += p[k * V + l];
  float acc = 0.0f;
  for (int64_t i = nvec * V; i < n; i++) acc += x[i];
  for (int l = 0; l < V; l++) acc += p[l];
  return acc;
}

/* torch adds each sum into an output it filled with zeros: -0 becomes +0. */
static float stored(float sum) { return 0.0f + sum; }

float kvci_torch_sum_contiguous(const float* x, int64_t n) {
  return stored(n >= KVC_TORCH_VEC_FLOATS ? vector_row_sum(x, n) : row_sum(x, 1, n));
}

float kvci_torch_sum_column(const float* x, int64_t rows, int64_t cols, int64_t col) {
  /* Columns in whole blocks (4 vectors wide when the row holds a vector,
   * else 4 floats) are summed by one cascade down the rows; the rest by the
   * interleaved row sum. */
  if (cols == 1) return kvci_torch_sum_contiguous(x, rows); /* torch drops the unit dimension */
  int64_t block = cols >= KVC_TORCH_VEC_FLOATS ? 4 * KVC_TORCH_VEC_FLOATS : 4;
  float sum;
  if (col < cols / block * block)
    cascade_columns(x + col, cols, 1, 1, rows, &sum);
  else
    sum = row_sum(x + col, cols, rows);
  return stored(sum);
}

/* ------------------------------------------------------------------ powf */

/* Inlined everywhere so that the FMA copy of powf below gets the instruction. */
#if defined(__GNUC__) || defined(__clang__)
#define FORCE_INLINE static inline __attribute__((always_inline))
#else
#define FORCE_INLINE static inline
#endif

/* A float-float number: the value is x + y with |y| <= ulp(x) / 2. */
typedef struct {
  float x, y;
} ff;

FORCE_INLINE uint32_t bits_of(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

FORCE_INLINE float float_of(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* Arithmetic shift right of a negative int without implementation-defined behaviour. */
FORCE_INLINE int32_t sra(int32_t v, int k) { return v >= 0 ? v >> k : ~(~v >> k); }
FORCE_INLINE int32_t shl(int32_t v, int k) { return (int32_t)((uint32_t)v << k); }

FORCE_INLINE ff ff_add2_f_f(float x, float y) {
  float s = x + y;
  float v = s - x;
  float a = s - v;
  float b = x - a;
  float c = y - v;
  return (ff){s, b + c};
}

FORCE_INLINE ff ff_add2_ff_f(ff x, float y) {
  float s = x.x + y;
  float v = s - x.x;
  float a = s - v;
  float b = x.x - a;
  float c = y - v;
  float t = b + c;
  return (ff){s, t + x.y};
}

FORCE_INLINE ff ff_add2_ff_ff(ff x, ff y) {
  float s = x.x + y.x;
  float v = s - x.x;
  float a = s - v;
  float b = x.x - a;
  float c = y.x - v;
  float t = b + c;
  float lo = x.y + y.y;
  return (ff){s, t + lo};
}

/* |x| >= |y| */
FORCE_INLINE ff ff_add_ff_ff(ff x, ff y) {
  float s = x.x + y.x;
  float t = x.x - s;
  t = t + y.x;
  t = t + x.y;
  t = t + y.y;
  return (ff){s, t};
}

FORCE_INLINE ff ff_add_f_ff(float x, ff y) {
  float s = x + y.x;
  float t = x - s;
  t = t + y.x;
  t = t + y.y;
  return (ff){s, t};
}

FORCE_INLINE ff ff_normalize(ff t) {
  float s = t.x + t.y;
  float d = t.x - s;
  return (ff){s, d + t.y};
}

FORCE_INLINE ff ff_scale(ff d, float s) { return (ff){d.x * s, d.y * s}; }

FORCE_INLINE ff ff_mul_ff_f(ff x, float y) {
  float s = x.x * y;
  return (ff){s, fmaf(x.y, y, fmaf(x.x, y, -s))};
}

FORCE_INLINE ff ff_mul_ff_ff(ff x, ff y) {
  float s = x.x * y.x;
  return (ff){s, fmaf(x.x, y.y, fmaf(x.y, y.x, fmaf(x.x, y.x, -s)))};
}

FORCE_INLINE ff ff_square(ff x) {
  float s = x.x * x.x;
  float twice = x.x + x.x;
  return (ff){s, fmaf(twice, x.y, fmaf(x.x, x.x, -s))};
}

FORCE_INLINE ff ff_div(ff n, ff d) {
  float t = 1.0f / d.x;
  float s = n.x * t;
  float u = fmaf(t, n.x, -s);
  float v = fmaf(-d.y, t, fmaf(-d.x, t, 1.0f));
  return (ff){s, fmaf(s, v, fmaf(n.y, t, u))};
}

/* Round half to even, as the vector float-to-int conversion does. */
FORCE_INLINE int32_t round_to_int(float v) {
  float a = fabsf(v);
  if (a < 8388608.0f) a = (a + 8388608.0f) - 8388608.0f;
  return (int32_t)copysignf(a, v);
}

/* ldexp by exponent-field arithmetic, in SLEEF's four-step form (exact for normal results). */
FORCE_INLINE float ldexp_steps(float x, int32_t q) {
  int32_t m = sra(q, 31);
  m = shl(sra(m + q, 6) - m, 4);
  q = q - shl(m, 2);
  m = m + 0x7f;
  if (m < 0) m = 0;
  if (m > 0xff) m = 0xff;
  float u = float_of((uint32_t)m << 23);
  x = x * u;
  x = x * u;
  x = x * u;
  x = x * u;
  u = float_of((uint32_t)(q + 0x7f) << 23);
  return x * u;
}

/* log(d) as a float-float, d > 0. */
FORCE_INLINE ff log_ff(float d) {
  int small = d < 0x1p-126f;
  if (small) d = d * 0x1p64f;
  float scaled = d * (1.0f / 0.75f);
  int32_t e = (int32_t)((bits_of(scaled) >> 23) & 0xff) - 0x7f;
  float m = float_of(bits_of(d) + ((uint32_t)(-e) << 23));
  if (small) e -= 64;

  ff x = ff_div(ff_add2_f_f(-1.0f, m), ff_add2_f_f(1.0f, m));
  ff x2 = ff_square(x);
  float t = 0.240320354700088500976562f;
  t = fmaf(t, x2.x, 0.285112679004669189453125f);
  t = fmaf(t, x2.x, 0.400007992982864379882812f);
  const ff c = {0.66666662693023681640625f, 3.69183861259614332084311e-09f};
  const ff ln2 = {0.69314718246459960938f, -1.904654323148236017e-09f};

  ff s = ff_mul_ff_f(ln2, (float)e);
  s = ff_add_ff_ff(s, ff_scale(x, 2.0f));
  s = ff_add_ff_ff(s, ff_mul_ff_ff(ff_mul_ff_ff(x2, x), ff_add2_ff_ff(ff_mul_ff_f(x2, t), c)));
  return s;
}

/* exp of a float-float. */
FORCE_INLINE float exp_ff(ff d) {
  const float r_ln2 = 1.442695040888963407359924681001892137426645954152985934135449406931f;
  const float ln2_hi = 0.693145751953125f, ln2_lo = 1.428606765330187045e-06f;
  float u = d.x + d.y;
  u = u * r_ln2;
  int32_t q = round_to_int(u);
  float qf = (float)q;

  ff s = ff_add2_ff_f(d, qf * -ln2_hi);
  s = ff_add2_ff_f(s, qf * -ln2_lo);
  s = ff_normalize(s);

  u = 0.00136324646882712841033936f;
  u = fmaf(u, s.x, 0.00836596917361021041870117f);
  u = fmaf(u, s.x, 0.0416710823774337768554688f);
  u = fmaf(u, s.x, 0.166665524244308471679688f);
  u = fmaf(u, s.x, 0.499999850988388061523438f);

  ff t = ff_add_ff_ff(s, ff_mul_ff_f(ff_square(s), u));
  t = ff_add_f_ff(1.0f, t);
  u = t.x + t.y;
  u = ldexp_steps(u, q);
  if (d.x < -104.0f) u = 0.0f;
  return u;
}

FORCE_INLINE float powf_vec(float x, float y) {
  if (isnan(x) || isnan(y)) return x + y;
  if (x == 1.0f || y == 0.0f) return 1.0f;
  if (x == 0.0f || isinf(x)) return (signbit(y) != 0) != (x == 0.0f) ? 0.0f : INFINITY;
  float r = exp_ff(ff_mul_ff_f(log_ff(x), y));
  return isnan(r) ? INFINITY : r;
}

/* fmaf is a library call unless the compiler may use the FMA instruction:
 * on x86-64 a copy compiled for it runs where the CPU has it (same results,
 * twice as fast). */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__FMA__)
__attribute__((target("fma"))) static float powf_vec_fma(float x, float y) { return powf_vec(x, y); }
#define KVC_POWF_FMA_COPY 1
#endif

float kvci_torch_powf_vec(float x, float y) {
#ifdef KVC_POWF_FMA_COPY
  if (__builtin_cpu_supports("fma")) return powf_vec_fma(x, y);
#endif
  return powf_vec(x, y);
}
