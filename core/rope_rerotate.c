/*
 * core/rope_rerotate.c: SinkCache's key re-rotation arithmetic (see the
 * header). Bit-exactness with torch depends on rounding every product and sum
 * on its own: no fused multiply-add may be formed here.
 */
#include "rope_rerotate.h"

#include "half.h"

/* gcc never contracts in ISO C mode (-std=c11, as this project builds); clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

void kvci_rerotation_tables(const float* cos, const float* sin, int64_t dim, int64_t num_sink, int64_t shift,
                           int64_t rows, float* rcos, float* rsin) {
  for (int64_t j = 0; j < rows; j++) {
    const float* oc = cos + (num_sink + shift + j) * dim; /* the slot a kept key leaves */
    const float* os = sin + (num_sink + shift + j) * dim;
    const float* sc = cos + (num_sink + j) * dim; /* the slot it moves to */
    const float* ss = sin + (num_sink + j) * dim;
    for (int64_t d = 0; d < dim; d++) {
      /* Separate statements so that each product is rounded to float32, as torch's tensor ops are. */
      float cc = oc[d] * sc[d];
      float sn = os[d] * ss[d];
      float ns = -os[d] * sc[d];
      float cs = oc[d] * ss[d];
      rcos[j * dim + d] = cc + sn;
      rsin[j * dim + d] = ns + cs;
    }
  }
}

void kvci_round_to_dtype(kvc_dtype dtype, const float* in, int64_t count, float* out) {
  for (int64_t i = 0; i < count; i++) out[i] = kvci_round_to(dtype, in[i]);
}

/*
 * Conversions and rounding to the key dtype, kept in float32: the same
 * results as half.h's, written without branches (selects only) so that the
 * loops below vectorize; the rotation rounds three times per key channel.
 */
static inline uint32_t select_u32(int cond, uint32_t a, uint32_t b) {
  uint32_t m = 0u - (uint32_t)(cond != 0);
  return (a & m) | (b & ~m);
}

static inline float round_bf16(float f) {
  uint32_t u = kvci_f32_bits(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return kvci_f32_from_bits(select_u32((u & 0x7fffffffu) > 0x7f800000u, (u | 0x00400000u) & 0xffff0000u, r));
}

static inline float round_f16(float f) {
  uint32_t u = kvci_f32_bits(f), a = u & 0x7fffffffu, sign = u ^ a;
  uint32_t n = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u; /* nearest even at 10 mantissa bits */
  n = select_u32(n >= 0x47800000u, 0x7f800000u, n);            /* 65520 and above: infinity */
  /* below 2^-14 float16 is subnormal: a multiple of 2^-24, the float32 ulp of 0.5 */
  float t = kvci_f32_from_bits(a) + 0.5f;
  t -= 0.5f;
  uint32_t r = select_u32(a < 0x38800000u, kvci_f32_bits(t), n);
  return kvci_f32_from_bits(select_u32(a > 0x7f800000u, 0x7fc00000u, r) | sign);
}

static inline float round_f32(float f) { return f; }

static inline float load_f32(const void* p, int64_t i) { return ((const float*)p)[i]; }
static inline float load_bf16(const void* p, int64_t i) { return kvci_f32_from_bits((uint32_t)((const uint16_t*)p)[i] << 16); }
static inline float load_f16(const void* p, int64_t i) {
  uint32_t h = ((const uint16_t*)p)[i], em = h & 0x7fffu;
  /* the exponent rebias as a product by 2^112, which also normalizes subnormals; then infinity and NaN */
  uint32_t u = kvci_f32_bits(kvci_f32_from_bits(em << 13) * kvci_f32_from_bits(0x77800000u));
  u = select_u32(em >= 0x7c00u, u | 0x7f800000u, u);
  return kvci_f32_from_bits(u | ((h & 0x8000u) << 16));
}
/* Stores of values already rounded to the dtype: the conversions are exact. */
static inline void store_f32(void* p, int64_t i, float f) { ((float*)p)[i] = f; }
static inline void store_bf16(void* p, int64_t i, float f) { ((uint16_t*)p)[i] = (uint16_t)(kvci_f32_bits(f) >> 16); }
static inline void store_f16(void* p, int64_t i, float f) {
  uint32_t u = kvci_f32_bits(f), a = u & 0x7fffffffu;
  uint32_t normal = (a >> 13) - (112u << 10);
  /* below 2^-14 a multiple of 2^-24 (larger values are zeroed first: their conversion to int would overflow) */
  uint32_t sub = (uint32_t)(int32_t)(kvci_f32_from_bits(select_u32(a < 0x38800000u, a, 0u)) * 16777216.0f);
  uint32_t special = 0x7c00u | ((a >> 13) & 0x3ffu);              /* infinity, NaN */
  uint32_t h = select_u32(a >= 0x7f800000u, special, select_u32(a < 0x38800000u, sub, normal));
  ((uint16_t*)p)[i] = (uint16_t)(h | ((u >> 16) & 0x8000u));
}

/*
 * One dtype's loop: k' = round(round(k * c) + round(rotate_half(k) * s)),
 * rotate_half(x)[d] being -x[half + d] for d < upper, then x[d - upper].
 * Separate statements keep every product and sum rounded on its own.
 */
#define KVC_REROTATE_LOOP(NAME, LOAD, STORE, ROUND, ELEM)                                                     \
  static void NAME(char* keys, const int64_t strides[4], const int64_t shape[4], const float* rcos,           \
                   const float* rsin, float* restrict row) {                                                   \
    const int64_t dim = shape[3], half = dim / 2, upper = dim - half;                                          \
    for (int64_t b = 0; b < shape[0]; b++)                                                                     \
      for (int64_t h = 0; h < shape[1]; h++)                                                                   \
        for (int64_t j = 0; j < shape[2]; j++) {                                                               \
          char* restrict p = keys + (size_t)(b * strides[0] + h * strides[1] + j * strides[2]) * (ELEM);       \
          const float* restrict c = rcos + j * dim;                                                            \
          const float* restrict s = rsin + j * dim;                                                            \
          for (int64_t d = 0; d < dim; d++) row[d] = LOAD(p, d);                                               \
          for (int64_t d = 0; d < upper; d++) {                                                                \
            float a = row[d] * c[d];                                                                           \
            float r = -row[half + d] * s[d];                                                                   \
            a = ROUND(a);                                                                                      \
            r = ROUND(r);                                                                                      \
            float sum = a + r;                                                                                 \
            STORE(p, d, ROUND(sum));                                                                           \
          }                                                                                                    \
          for (int64_t d = upper; d < dim; d++) {                                                              \
            float a = row[d] * c[d];                                                                           \
            float r = row[d - upper] * s[d];                                                                   \
            a = ROUND(a);                                                                                      \
            r = ROUND(r);                                                                                      \
            float sum = a + r;                                                                                 \
            STORE(p, d, ROUND(sum));                                                                           \
          }                                                                                                    \
        }                                                                                                      \
  }

KVC_REROTATE_LOOP(rerotate_f32, load_f32, store_f32, round_f32, 4)
KVC_REROTATE_LOOP(rerotate_f16, load_f16, store_f16, round_f16, 2)
KVC_REROTATE_LOOP(rerotate_bf16, load_bf16, store_bf16, round_bf16, 2)

void kvci_rerotate_keys(kvc_dtype dtype, void* keys, const int64_t strides[4], const int64_t shape[4],
                       const float* rcos, const float* rsin, float* row) {
  if (dtype == KVC_DTYPE_FLOAT16)
    rerotate_f16((char*)keys, strides, shape, rcos, rsin, row);
  else if (dtype == KVC_DTYPE_BFLOAT16)
    rerotate_bf16((char*)keys, strides, shape, rcos, rsin, row);
  else
    rerotate_f32((char*)keys, strides, shape, rcos, rsin, row);
}
