/*
 * backends/cpu/cpu_rope.c: SinkCache's key re-rotation on host memory, and
 * the read of RoPE cos/sin tensors as float32 (see cpu_rope.h).
 *
 * Bit-exactness with torch depends on rounding every product and sum on its
 * own: no fused multiply-add may be formed here. The roundings below are
 * written without branches (selects only) so that the loops vectorize; they
 * give the same bits as half.h's (whose bit casts they use), except for NaN:
 * every rounding (for float32: the store) makes a NaN the canonical quiet
 * NaN 0x7fc00000, because
 * which NaN an operation returns depends on the compiler's order of operands
 * (x86 returns the first NaN operand) and on the hardware (a GPU returns its
 * own), so that the GPU kernels (backends/gpu/gpu_rope.h), which round the
 * same way, give these very bits (abi/backend/backend.h, rerotate_keys_4d).
 */
#include "cpu_rope.h"

#include <string.h>

#include "half.h"

/* gcc never contracts in ISO C mode (-std=c11, as this project builds); clang needs telling. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static inline uint32_t select_u32(int cond, uint32_t a, uint32_t b) {
  uint32_t m = 0u - (uint32_t)(cond != 0);
  return (a & m) | (b & ~m);
}

#define CANONICAL_NAN 0x7fc00000u

/* Rounding to the key dtype, kept in float32: the rotation rounds three times per key channel. */
static inline float round_bf16(float f) {
  uint32_t u = kvci_f32_bits(f);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
  return kvci_f32_from_bits(select_u32((u & 0x7fffffffu) > 0x7f800000u, CANONICAL_NAN, r));
}

static inline float round_f16(float f) {
  uint32_t u = kvci_f32_bits(f), a = u & 0x7fffffffu, sign = u ^ a;
  uint32_t n = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u; /* nearest even at 10 mantissa bits */
  n = select_u32(n >= 0x47800000u, 0x7f800000u, n);            /* 65520 and above: infinity */
  /* below 2^-14 float16 is subnormal: a multiple of 2^-24, the float32 ulp of 0.5 */
  float t = kvci_f32_from_bits(a) + 0.5f;
  t -= 0.5f;
  uint32_t r = select_u32(a < 0x38800000u, kvci_f32_bits(t), n) | sign;
  return kvci_f32_from_bits(select_u32(a > 0x7f800000u, CANONICAL_NAN, r));
}

static inline float round_f32(float f) { return f; }

static inline float load_f32(const void* p, int64_t i) { return ((const float*)p)[i]; }
static inline float load_bf16(const void* p, int64_t i) {
  return kvci_f32_from_bits((uint32_t)((const uint16_t*)p)[i] << 16);
}
static inline float load_f16(const void* p, int64_t i) {
  uint32_t h = ((const uint16_t*)p)[i], em = h & 0x7fffu;
  /* the exponent rebias as a product by 2^112, which also normalizes subnormals; then infinity and NaN */
  uint32_t u = kvci_f32_bits(kvci_f32_from_bits(em << 13) * kvci_f32_from_bits(0x77800000u));
  u = select_u32(em >= 0x7c00u, u | 0x7f800000u, u);
  return kvci_f32_from_bits(u | ((h & 0x8000u) << 16));
}
/*
 * Stores of values already rounded to the dtype: the conversions are exact.
 * float32's rounding is the identity, so its store makes a NaN canonical
 * (a NaN product makes the sum NaN: once, at the end, is enough).
 */
static inline void store_f32(void* p, int64_t i, float f) {
  ((float*)p)[i] = f != f ? kvci_f32_from_bits(CANONICAL_NAN) : f;
}
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
 * One key channel: round(round(x * c) + round(partner * s)), partner being
 * rotate_half's element (already negated where rotate_half negates).
 * Separate statements keep every product and sum rounded on its own.
 */
#define KVC_ROTATED(ROUND, x, partner, c, s, out) \
  do {                                            \
    float a_ = (x) * (c);                         \
    float r_ = (partner) * (s);                   \
    a_ = ROUND(a_);                               \
    r_ = ROUND(r_);                               \
    float sum_ = a_ + r_;                         \
    (out) = ROUND(sum_);                          \
  } while (0)

/* Channels rotated per block of an even row: two stack arrays of this many floats, no heap. */
#define KVC_ROPE_BLOCK 64

/*
 * One dtype's loop: k' = k * c + rotate_half(k) * s, with
 * rotate_half(x)[d] = -x[half + d] for d < upper, x[d - upper] after
 * (half = dim / 2, upper = dim - half). Channel d reads channel
 * (d + half) mod dim, so the row is rewritten in place without scratch:
 *  - even dim: channels d and d + half read each other; each block of pairs
 *    is loaded before it is stored (this is the loop that vectorizes);
 *  - odd dim: (d + half) mod dim walks one cycle through every channel
 *    (half and dim are coprime), each channel written right after the one
 *    that reads it, the first one's value kept for the last.
 * The order changes no bits: every channel's arithmetic is the same.
 */
#define KVC_REROTATE_LOOP(NAME, LOAD, STORE, ROUND, ELEM)                                                      \
  static void NAME(char* keys, const int64_t strides[4], const int64_t shape[4], const float* rcos,            \
                   const float* rsin) {                                                                         \
    const int64_t dim = shape[3], half = dim / 2, upper = dim - half;                                           \
    for (int64_t b = 0; b < shape[0]; b++)                                                                      \
      for (int64_t h = 0; h < shape[1]; h++)                                                                    \
        for (int64_t j = 0; j < shape[2]; j++) {                                                                \
          char* restrict p = keys + (size_t)(b * strides[0] + h * strides[1] + j * strides[2]) * (ELEM);        \
          const float* restrict c = rcos + j * dim;                                                             \
          const float* restrict s = rsin + j * dim;                                                             \
          if (half == upper) {                                                                                  \
            for (int64_t d0 = 0; d0 < half; d0 += KVC_ROPE_BLOCK) {                                            \
              float lo[KVC_ROPE_BLOCK], hi[KVC_ROPE_BLOCK];                                                     \
              int64_t n = half - d0 < KVC_ROPE_BLOCK ? half - d0 : KVC_ROPE_BLOCK;                              \
              for (int64_t i = 0; i < n; i++) {                                                                 \
                lo[i] = LOAD(p, d0 + i);                                                                        \
                hi[i] = LOAD(p, half + d0 + i);                                                                 \
              }                                                                                                 \
              for (int64_t i = 0; i < n; i++) {                                                                 \
                float out;                                                                                      \
                KVC_ROTATED(ROUND, lo[i], -hi[i], c[d0 + i], s[d0 + i], out);                                   \
                STORE(p, d0 + i, out);                                                                          \
              }                                                                                                 \
              for (int64_t i = 0; i < n; i++) {                                                                 \
                float out;                                                                                      \
                KVC_ROTATED(ROUND, hi[i], lo[i], c[half + d0 + i], s[half + d0 + i], out);                      \
                STORE(p, half + d0 + i, out);                                                                   \
              }                                                                                                 \
            }                                                                                                   \
          } else {                                                                                              \
            float first = LOAD(p, 0), x = first;                                                                \
            int64_t d = 0;                                                                                      \
            for (int64_t k = 0; k < dim; k++) {                                                                 \
              int64_t next = d + half < dim ? d + half : d + half - dim;                                        \
              float partner = k == dim - 1 ? first : LOAD(p, next);                                             \
              float out;                                                                                        \
              KVC_ROTATED(ROUND, x, d < upper ? -partner : partner, c[d], s[d], out);                           \
              STORE(p, d, out);                                                                                 \
              x = partner;                                                                                      \
              d = next;                                                                                         \
            }                                                                                                   \
          }                                                                                                     \
        }                                                                                                       \
  }

KVC_REROTATE_LOOP(rerotate_f32, load_f32, store_f32, round_f32, 4)
KVC_REROTATE_LOOP(rerotate_f16, load_f16, store_f16, round_f16, 2)
KVC_REROTATE_LOOP(rerotate_bf16, load_bf16, store_bf16, round_bf16, 2)

int kvci_cpu_rerotate_keys_4d(void* ctx, const kvc_exec* exec, kvc_dtype dtype, void* keys, const int64_t strides[4],
                              const int64_t shape[4], const float* rcos, const float* rsin) {
  (void)ctx;
  (void)exec;
  if (shape[0] <= 0 || shape[1] <= 0 || shape[2] <= 0 || shape[3] <= 0) return 0;
  if (dtype == KVC_DTYPE_FLOAT16)
    rerotate_f16((char*)keys, strides, shape, rcos, rsin);
  else if (dtype == KVC_DTYPE_BFLOAT16)
    rerotate_bf16((char*)keys, strides, shape, rcos, rsin);
  else if (dtype == KVC_DTYPE_FLOAT32)
    rerotate_f32((char*)keys, strides, shape, rcos, rsin);
  else
    return -1;
  return 0;
}

int kvci_cpu_read_f32_4d(void* ctx, const kvc_exec* exec, float* dst, const void* src, kvc_dtype dtype,
                         const int64_t ss[4], const int64_t shape[4]) {
  (void)ctx;
  (void)exec;
  if (dtype != KVC_DTYPE_FLOAT32 && dtype != KVC_DTYPE_FLOAT16 && dtype != KVC_DTYPE_BFLOAT16) return -1;
  if (shape[0] <= 0 || shape[1] <= 0 || shape[2] <= 0 || shape[3] <= 0) return 0;
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t s = 0; s < shape[2]; s++) {
        int64_t row = b * ss[0] + h * ss[1] + s * ss[2];
        for (int64_t d = 0; d < shape[3]; d++) {
          int64_t i = row + d * ss[3];
          *dst++ = dtype == KVC_DTYPE_FLOAT16 ? load_f16(src, i) : dtype == KVC_DTYPE_BFLOAT16 ? load_bf16(src, i)
                                                                                              : load_f32(src, i);
        }
      }
  return 0;
}
