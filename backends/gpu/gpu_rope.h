/*
 * backends/gpu/gpu_rope.h: the arithmetic of the sink layers' kernels
 * (rerotate_keys_4d and read_f32_4d of abi/backend/backend.h): one work item
 * of each, as the kernels run it.
 *
 * Bit-exactness with the CPU backend (backends/cpu/cpu_rope.c, and through
 * it torch) rests on three things, all here:
 *  - every product and sum rounded on its own: no fused multiply-add. On
 *    CUDA the operations are __fmul_rn/__fadd_rn, which nvcc never
 *    contracts; on HIP (whose __fmul_rn is a plain `*`) and in host C they
 *    are plain operations in functions that turn contraction off;
 *  - conversions between float32, float16 and bfloat16 in integer
 *    arithmetic, so that they give the same bits whatever the target does
 *    with subnormals in float instructions;
 *  - NaN results made the canonical quiet NaN (float32 0x7fc00000) by every
 *    rounding to the key dtype, which follows each operation: which NaN an
 *    operation returns otherwise depends on the hardware (a GPU returns its
 *    own canonical NaN) and on the compiler's order of operands (x86 returns
 *    the first NaN operand), so that no two backends would agree. The CPU
 *    backend rounds the same way (abi/backend/backend.h, rerotate_keys_4d).
 *    (The float products themselves need subnormals kept, which both
 *    vendors' defaults do: nothing here builds with flush-to-zero.)
 *
 * Plain C, so that the CPU tests run these very functions as a simulated
 * grid against the CPU backend (tests/unit/gpu_rope) and the emulated
 * device computes with them (tests/gpu/emulated_device_backend.c);
 * KVC_GPU_HD makes them device functions too.
 */
#ifndef KVC_GPU_ROPE_H
#define KVC_GPU_ROPE_H

#include <stdint.h>
#include <string.h>

#include "gpu_plan.h" /* KVC_GPU_HD, KVC_GPU_BLOCK */
#include "half.h"     /* kvci_f32_bits, kvci_f32_from_bits: host and device */

#ifdef __cplusplus
extern "C" {
#endif

/* Element types of the keys and of the cos/sin tensors: the values of kvc_dtype (abi/include/kvcache/tensor.h). */
#define KVC_GPU_ROPE_F32 1
#define KVC_GPU_ROPE_F16 2
#define KVC_GPU_ROPE_BF16 3

/* Blocks per launch at most: the kernels stride over the rest of their items. */
#define KVC_GPU_ROPE_MAX_GRID (1u << 20)

/* Contraction off for the operations written in the enclosing block (clang: host and HIP). */
#if defined(__clang__)
#define KVC_GPU_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define KVC_GPU_NO_CONTRACT /* gcc contracts nothing in ISO C mode; nvcc's device code uses __fmul_rn/__fadd_rn */
#endif

KVC_GPU_HD int kvc_gpu_is_nan(uint32_t u) { return (u & 0x7fffffffu) > 0x7f800000u; }

/* The one NaN that a rounding to the key dtype gives (float32 bits). */
#define KVC_GPU_CANONICAL_NAN 0x7fc00000u

/* a * b and a + b, each rounded to nearest even on its own (NaN results: any NaN, canonicalized by the rounding). */
KVC_GPU_HD float kvc_gpu_mul(float a, float b) {
  KVC_GPU_NO_CONTRACT
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

KVC_GPU_HD float kvc_gpu_add(float a, float b) {
  KVC_GPU_NO_CONTRACT
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

/* m * 2^-24 for 0 < m < 2^24, exactly: a float16 subnormal's value (m units of 2^-24), through the integer m. */
KVC_GPU_HD uint32_t kvc_gpu_units_2m24(uint32_t m) { return kvci_f32_bits((float)m) - (24u << 23); }

/* The float32 bits of float16 bits h: exact; NaN payloads kept, not quieted. */
KVC_GPU_HD uint32_t kvc_gpu_f16_bits_to_f32(uint32_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1fu) return sign | 0x7f800000u | (man << 13);
  if (exp == 0) return man ? sign | kvc_gpu_units_2m24(man) : sign;
  return sign | ((exp + 112u) << 23) | (man << 13);
}

/* Float32 bits a (sign cleared) below 2^-14, rounded to the nearest even multiple of 2^-24: how many. */
KVC_GPU_HD uint32_t kvc_gpu_f16_subnormal_units(uint32_t a) {
  uint32_t exp = a >> 23, man = a & 0x7fffffu;
  if (exp) man |= 0x800000u; else exp = 1; /* a float32 subnormal: man * 2^-149 */
  uint32_t shift = 126u - exp;             /* value = man * 2^-24 / 2^shift, shift >= 14 */
  if (shift > 25) return 0;                /* below a quarter unit: man < 2^24 <= half a unit */
  uint32_t q = man >> shift, rem = man & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  return q + (rem > half || (rem == half && (q & 1u)));
}

/* Float32 bits u rounded to the nearest float16 value, kept as float32 bits (NaN: the canonical NaN). */
KVC_GPU_HD uint32_t kvc_gpu_round_f16(uint32_t u) {
  uint32_t a = u & 0x7fffffffu, sign = u ^ a;
  if (a > 0x7f800000u) return KVC_GPU_CANONICAL_NAN;
  if (a < 0x38800000u) {
    uint32_t q = kvc_gpu_f16_subnormal_units(a);
    return q ? sign | kvc_gpu_units_2m24(q) : sign;
  }
  uint32_t n = (a + 0xfffu + ((a >> 13) & 1u)) & 0xffffe000u; /* 10 mantissa bits, nearest even */
  return sign | (n >= 0x47800000u ? 0x7f800000u : n);         /* 65520 and above: infinity */
}

/* Float32 bits u rounded to the nearest bfloat16 value, kept as float32 bits (NaN: the canonical NaN). */
KVC_GPU_HD uint32_t kvc_gpu_round_bf16(uint32_t u) {
  if (kvc_gpu_is_nan(u)) return KVC_GPU_CANONICAL_NAN;
  return (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
}

/* The float16 bits of a float32 that holds a float16 value (kvc_gpu_round_f16's results): exact. */
KVC_GPU_HD uint16_t kvc_gpu_f16_of_exact(uint32_t u) {
  uint32_t a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
  if (a >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x38800000u) return (uint16_t)(sign | ((a >> 13) - (112u << 10)));
  return (uint16_t)(sign | kvc_gpu_f16_subnormal_units(a));
}

/* Element i of an array of `dtype` as float32 bits (exact). */
KVC_GPU_HD uint32_t kvc_gpu_load_bits(int32_t dtype, const void* base, int64_t i) {
  if (dtype == KVC_GPU_ROPE_F32) return ((const uint32_t*)base)[i];
  uint32_t h = ((const uint16_t*)base)[i];
  return dtype == KVC_GPU_ROPE_F16 ? kvc_gpu_f16_bits_to_f32(h) : h << 16;
}

/* Stores float32 bits u that hold a value of `dtype` as element i. */
KVC_GPU_HD void kvc_gpu_store_bits(int32_t dtype, void* base, int64_t i, uint32_t u) {
  if (dtype == KVC_GPU_ROPE_F32)
    ((uint32_t*)base)[i] = u;
  else
    ((uint16_t*)base)[i] = dtype == KVC_GPU_ROPE_F16 ? kvc_gpu_f16_of_exact(u) : (uint16_t)(u >> 16);
}

/* f rounded to `dtype` (float32: itself), a NaN made the canonical NaN. */
KVC_GPU_HD float kvc_gpu_round_to(int32_t dtype, float f) {
  uint32_t u = kvci_f32_bits(f);
  if (dtype == KVC_GPU_ROPE_F16) return kvci_f32_from_bits(kvc_gpu_round_f16(u));
  if (dtype == KVC_GPU_ROPE_BF16) return kvci_f32_from_bits(kvc_gpu_round_bf16(u));
  return kvc_gpu_is_nan(u) ? kvci_f32_from_bits(KVC_GPU_CANONICAL_NAN) : f;
}

/*
 * One key channel: round(round(x * c) + round(partner * s)), partner being
 * rotate_half's element, already negated where rotate_half negates it.
 */
KVC_GPU_HD uint32_t kvc_gpu_rotated(int32_t dtype, float x, float partner, float c, float s) {
  float a = kvc_gpu_round_to(dtype, kvc_gpu_mul(x, c));
  float r = kvc_gpu_round_to(dtype, kvc_gpu_mul(partner, s));
  return kvci_f32_bits(kvc_gpu_round_to(dtype, kvc_gpu_add(a, r)));
}

KVC_GPU_HD float kvc_gpu_negated(float f) { return kvci_f32_from_bits(kvci_f32_bits(f) ^ 0x80000000u); }

/*
 * rerotate_keys_4d's work: keys [n[0], n[1], n[2], dim] (the first `dim`
 * channels of each row; element strides, channels contiguous) rotated in
 * place by the tables rcos/rsin [n[2]][dim] that the kernel is given.
 */
typedef struct kvc_gpu_rope {
  char* keys; /* element (0, 0, 0, 0) */
  int64_t stride[3];
  int32_t n[3];
  int32_t dim;
  int32_t dtype; /* KVC_GPU_ROPE_* */
} kvc_gpu_rope;

/* Whether the entries have work: 1 when every extent is in [1, 2^31), 0 when one is 0 or less (nothing to do), -1
   when one is 2^31 or more (the kernels index in 32 bits). */
KVC_GPU_HD int kvc_gpu_rope_extents(const int64_t shape[4]) {
  for (int i = 0; i < 4; i++)
    if (shape[i] <= 0) return 0;
  for (int i = 0; i < 4; i++)
    if (shape[i] > INT32_MAX) return -1;
  return 1;
}

/* The work of rerotate_keys_4d(dtype, keys, strides, shape) (extents in [1, 2^31), strides[3] == 1). */
KVC_GPU_HD kvc_gpu_rope kvc_gpu_rope_of(int32_t dtype, void* keys, const int64_t strides[4], const int64_t shape[4]) {
  kvc_gpu_rope r;
  r.keys = (char*)keys;
  for (int i = 0; i < 3; i++) {
    r.stride[i] = strides[i];
    r.n[i] = (int32_t)shape[i];
  }
  r.dim = (int32_t)shape[3];
  r.dtype = dtype;
  return r;
}

/* Seq rows [j0, j0 + rows) of every (b, h) plane of r, as work of its own whose tables start at row j0. */
KVC_GPU_HD kvc_gpu_rope kvc_gpu_rope_rows(const kvc_gpu_rope* r, int32_t j0, int32_t rows) {
  kvc_gpu_rope part = *r;
  part.keys = r->keys + (int64_t)j0 * r->stride[2] * (r->dtype == KVC_GPU_ROPE_F32 ? 4 : 2);
  part.n[2] = rows;
  return part;
}

/*
 * Work items: with an even dim, one per pair of channels (d, d + dim/2),
 * which read each other, so that each item loads both before it stores
 * either; with an odd dim, channel d reads channel (d + dim/2) mod dim, one
 * cycle through the whole row, so an item is a whole row.
 */
KVC_GPU_HD int64_t kvc_gpu_rope_items(const kvc_gpu_rope* p) {
  int64_t rows = (int64_t)p->n[0] * p->n[1] * p->n[2];
  return p->dim % 2 ? rows : rows * (p->dim / 2);
}

/* Blocks of KVC_GPU_BLOCK threads for `items` work items, one each, up to the grid cap (then they stride). */
KVC_GPU_HD uint32_t kvc_gpu_rope_grid(int64_t items) {
  int64_t blocks = (items + KVC_GPU_BLOCK - 1) / KVC_GPU_BLOCK;
  return blocks < (int64_t)KVC_GPU_ROPE_MAX_GRID ? (uint32_t)blocks : KVC_GPU_ROPE_MAX_GRID;
}

/* Row `row` of [n[0] * n[1] * n[2]]: its first channel, and its seq index j. */
KVC_GPU_HD char* kvc_gpu_rope_row(const kvc_gpu_rope* p, int64_t row, int32_t* j, int64_t elem) {
  int64_t rest = row / p->n[2];
  *j = (int32_t)(row - rest * p->n[2]);
  int64_t b = rest / p->n[1], h = rest - b * p->n[1];
  return p->keys + (b * p->stride[0] + h * p->stride[1] + (int64_t)*j * p->stride[2]) * elem;
}

/*
 * Work item `item` of rerotate_keys_4d, for the dtype `dtype` (the caller
 * passes a constant, so that a kernel is compiled per dtype):
 *   k'[d] = k[d] * rcos[j][d] + rotate_half(k)[d] * rsin[j][d],
 * rotate_half(k)[d] = -k[h + d] for d < dim - h, k[d - (dim - h)] after (h = dim / 2).
 */
KVC_GPU_HD void kvc_gpu_rerotate_item(const kvc_gpu_rope* p, int32_t dtype, const float* rcos, const float* rsin,
                                      int64_t item) {
  const int64_t elem = dtype == KVC_GPU_ROPE_F32 ? 4 : 2;
  const int32_t dim = p->dim, half = dim / 2, upper = dim - half;
  int32_t j;
  if (half == upper) {
    int64_t row = item / half;
    int32_t d = (int32_t)(item - row * half);
    char* k = kvc_gpu_rope_row(p, row, &j, elem);
    const float* c = rcos + (int64_t)j * dim;
    const float* s = rsin + (int64_t)j * dim;
    float lo = kvci_f32_from_bits(kvc_gpu_load_bits(dtype, k, d));
    float hi = kvci_f32_from_bits(kvc_gpu_load_bits(dtype, k, half + d));
    kvc_gpu_store_bits(dtype, k, d, kvc_gpu_rotated(dtype, lo, kvc_gpu_negated(hi), c[d], s[d]));
    kvc_gpu_store_bits(dtype, k, half + d, kvc_gpu_rotated(dtype, hi, lo, c[half + d], s[half + d]));
    return;
  }
  /* Odd dim: walk the cycle d -> d + half (mod dim), writing each channel after the one that reads it. */
  char* k = kvc_gpu_rope_row(p, item, &j, elem);
  const float* c = rcos + (int64_t)j * dim;
  const float* s = rsin + (int64_t)j * dim;
  float first = kvci_f32_from_bits(kvc_gpu_load_bits(dtype, k, 0)), x = first;
  int32_t d = 0;
  for (int32_t step = 0; step < dim; step++) {
    int32_t next = d + half < dim ? d + half : d + half - dim;
    float partner = step == dim - 1 ? first : kvci_f32_from_bits(kvc_gpu_load_bits(dtype, k, next));
    kvc_gpu_store_bits(dtype, k, d, kvc_gpu_rotated(dtype, x, d < upper ? kvc_gpu_negated(partner) : partner, c[d], s[d]));
    x = partner;
    d = next;
  }
}

/* read_f32_4d's work: dst[i] for i in [0, n0*n1*n2*n3) = src[b, h, s, d] (element strides, any sign) as float32. */
typedef struct kvc_gpu_read {
  const char* src; /* element (0, 0, 0, 0) */
  int64_t stride[4];
  int32_t n[4];
  int32_t dtype; /* KVC_GPU_ROPE_* */
} kvc_gpu_read;

/* The work of read_f32_4d(src, dtype, strides, shape) (extents in [1, 2^31)). */
KVC_GPU_HD kvc_gpu_read kvc_gpu_read_of(int32_t dtype, const void* src, const int64_t strides[4],
                                        const int64_t shape[4]) {
  kvc_gpu_read p;
  p.src = (const char*)src;
  for (int i = 0; i < 4; i++) {
    p.stride[i] = strides[i];
    p.n[i] = (int32_t)shape[i];
  }
  p.dtype = dtype;
  return p;
}

KVC_GPU_HD int64_t kvc_gpu_read_items(const kvc_gpu_read* p) {
  return (int64_t)p->n[0] * p->n[1] * p->n[2] * p->n[3];
}

/* Work item `item` of read_f32_4d: one value, dst[item] (float32 bits). */
KVC_GPU_HD void kvc_gpu_read_item(const kvc_gpu_read* p, int32_t dtype, uint32_t* dst, int64_t item) {
  int64_t rest = item / p->n[3];
  int64_t d = item - rest * p->n[3];
  int64_t s = rest % p->n[2];
  rest /= p->n[2];
  int64_t h = rest % p->n[1], b = rest / p->n[1];
  int64_t at = b * p->stride[0] + h * p->stride[1] + s * p->stride[2] + d * p->stride[3];
  dst[item] = kvc_gpu_load_bits(dtype, p->src, at);
}

#ifdef __cplusplus
}
#endif

#endif /* KVC_GPU_ROPE_H */
