/* backends/cpu/quantize.c: the quantizer entry points of quantize.h, dispatching to quant_quanto.c and quant_hqq.c. */
#include <string.h>

#include "half.h"
#include "quantize.h"

int kvci_quantize_groups_in(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                           uint8_t* codes, float* scale, float* zero, float* work) {
  if (spec->quantizer == KVC_QUANTIZER_HQQ) return kvci_hqq_quantize(spec, x, ngroups, group, codes, scale, zero, work);
  kvci_quanto_quantize(spec, x, ngroups, group, codes, scale, zero);
  return 0;
}

int kvci_quantize_groups(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                        uint8_t* codes, float* scale, float* zero) {
  return kvci_quantize_groups_in(spec, x, ngroups, group, codes, scale, zero, NULL);
}

void kvci_dequantize_groups(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out) {
  if (spec->quantizer == KVC_QUANTIZER_HQQ)
    kvci_hqq_dequantize(spec, codes, scale, zero, ngroups, group, out);
  else
    kvci_quanto_dequantize(spec, codes, scale, zero, ngroups, group, out);
}

/* Codes per step of kvci_dequantize_packed: a multiple of 8, so that every chunk starts on a byte of any nbits. */
enum { DEQUANT_CHUNK = 256 };
/* Groups whose scales and zero points are read at a time, and the entries of their value tables. */
enum { DEQUANT_BATCH = 256, DEQUANT_TABLE = 1024 };

/* n float32 values (each exact in dt) to dt's storage at base[at], base[at + stride], ...; one loop per dtype and
 * stride 1 apart, so that the common case compiles to vector code. A bfloat16 value's storage is its top half:
 * kvci_f32_to_bf16 of it rounds nothing away (and a NaN from kvci_round_to already has its quiet bit). */
static void store_values(kvc_dtype dt, const float* v, int64_t n, void* base, int64_t at, int64_t stride) {
  if (dt == KVC_DTYPE_BFLOAT16) {
    uint16_t* o = (uint16_t*)base + at;
    if (stride == 1)
      for (int64_t i = 0; i < n; i++) o[i] = (uint16_t)(kvci_f32_bits(v[i]) >> 16);
    else
      for (int64_t i = 0; i < n; i++) o[i * stride] = (uint16_t)(kvci_f32_bits(v[i]) >> 16);
  } else if (dt == KVC_DTYPE_FLOAT16) {
    uint16_t* o = (uint16_t*)base + at;
    for (int64_t i = 0; i < n; i++) o[i * stride] = kvci_f32_to_f16(v[i]);
  } else {
    float* o = (float*)base + at;
    if (stride == 1)
      for (int64_t i = 0; i < n; i++) o[i] = v[i];
    else
      for (int64_t i = 0; i < n; i++) o[i * stride] = v[i];
  }
}

/*
 * n codes looked up in `table` (entries of `elem` bytes) to out + i *
 * stride bytes. For nbits 1, 2, 4 and 8 straight from the packed bytes `in`
 * (the first code starts a byte), else unpacked into `codes` first. Called
 * with a constant elem, so that each copy compiles to plain loads and stores.
 */
static inline void look_up(const unsigned char* table, size_t elem, const uint8_t* in, int nbits, int64_t n,
                           uint8_t* codes, unsigned char* out, int64_t stride) {
  /* no divisions: this runs once per group */
  const int per_byte = nbits == 8 ? 1 : nbits == 4 ? 2 : nbits == 2 ? 4 : nbits == 1 ? 8 : 0;
  const int64_t whole = per_byte ? n * nbits / 8 : 0;
  const unsigned mask = (1u << nbits) - 1u;
  int64_t i = 0;
  if (per_byte == 1) {
    for (; i < n; i++) memcpy(out + i * stride, table + in[i] * elem, elem);
  } else if (per_byte == 2 && stride == (int64_t)elem) { /* adjacent values: the stores merge */
    int64_t j = 0;
    for (; j + 4 <= whole; j += 4, i += 8) {
      unsigned char eight[8 * 4];
      for (int m = 0; m < 4; m++) {
        const unsigned v = in[j + m];
        memcpy(eight + 2 * m * elem, table + (v & 15u) * elem, elem);
        memcpy(eight + (2 * m + 1) * elem, table + (v >> 4) * elem, elem);
      }
      memcpy(out + i * stride, eight, 8 * elem);
    }
    for (; j < whole; j++, i += 2) {
      const unsigned v = in[j];
      unsigned char pair[8];
      memcpy(pair, table + (v & 15u) * elem, elem);
      memcpy(pair + elem, table + (v >> 4) * elem, elem);
      memcpy(out + i * stride, pair, 2 * elem);
    }
  } else if (per_byte == 2) {
    for (int64_t j = 0; j < whole; j++, i += 2) {
      const unsigned v = in[j];
      memcpy(out + i * stride, table + (v & 15u) * elem, elem);
      memcpy(out + (i + 1) * stride, table + (v >> 4) * elem, elem);
    }
  } else if (per_byte) {
    for (int64_t j = 0; j < whole; j++) {
      const unsigned v = in[j];
      for (int k = 0; k < per_byte; k++, i++) memcpy(out + i * stride, table + ((v >> (k * nbits)) & mask) * elem, elem);
    }
  }
  if (i < n) { /* 3 bits, or the codes after the last whole byte */
    kvci_unpack_codes(in, n, nbits, codes);
    for (; i < n; i++) memcpy(out + i * stride, table + codes[i] * elem, elem);
  }
}

void kvci_dequantize_packed(const kvc_quantizer_spec* spec, const kvc_packed_groups* src, int64_t lo, int64_t hi,
                           const kvc_dequant_dst* dst) {
  uint8_t codes[DEQUANT_CHUNK], every_code[DEQUANT_TABLE];
  float values[DEQUANT_TABLE], scale[DEQUANT_BATCH], zero[DEQUANT_BATCH];
  union {
    uint16_t half[DEQUANT_TABLE];
    float f32[DEQUANT_TABLE];
  } tables;
  const kvc_dtype dt = spec->dtype;
  const size_t elem = dt == KVC_DTYPE_FLOAT32 ? 4 : 2;
  const int nbits = spec->nbits;
  const int64_t first = lo - lo % 8; /* the byte holding code lo starts at this code */
  const int64_t ncodes = (int64_t)1 << nbits;
  /* A value depends on its code and its group's scale and zero point alone: when a group has at least twice as
   * many values to write as there are codes, its every code is dequantized once (by the same arithmetic, for a
   * batch of groups in one call) and the values are looked up. */
  const int by_table = hi - lo >= 2 * ncodes;
  int64_t batch = by_table ? DEQUANT_TABLE / ncodes : DEQUANT_BATCH;
  if (batch > DEQUANT_BATCH) batch = DEQUANT_BATCH;
  if (by_table) /* the codes of kvci_dequantize_groups' call: every code, once per group of a batch */
    for (int64_t b = 0; b < (src->ngroups < batch ? src->ngroups : batch); b++)
      for (int c = 0; c < (int)ncodes; c++) every_code[b * ncodes + c] = (uint8_t)c;
  int64_t row = 0, col = 0; /* group k's place in *dst */
  for (int64_t k0 = 0; k0 < src->ngroups; k0 += batch) {
    const int64_t nb = src->ngroups - k0 < batch ? src->ngroups - k0 : batch;
    for (int64_t b = 0; b < nb; b++) {
      scale[b] = kvci_load_f32_unaligned(dt, src->scale + (k0 + b) * src->stride);
      zero[b] = kvci_load_f32_unaligned(dt, src->zero + (k0 + b) * src->stride);
    }
    if (by_table) {
      kvci_dequantize_groups(spec, every_code, scale, zero, nb, ncodes, values);
      store_values(dt, values, nb * ncodes, &tables, 0, 1);
    }
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t* p = src->codes + (k0 + b) * src->stride;
      const int64_t base = row * dst->row_stride + col * dst->group_stride;
      if (++col == dst->row_groups) {
        col = 0;
        row++;
      }
      for (int64_t c = first; c < hi; c += DEQUANT_CHUNK) {
        const int64_t n = hi - c < DEQUANT_CHUNK ? hi - c : DEQUANT_CHUNK, skip = c < lo ? lo - c : 0;
        const int64_t at = base + (c + skip - lo) * dst->value_stride;
        if (by_table && !skip) {
          unsigned char* out = (unsigned char*)dst->base + at * (int64_t)elem;
          if (elem == 2)
            look_up((const unsigned char*)tables.half + b * ncodes * 2, 2, p + c / 8 * nbits, nbits, n, codes, out,
                    dst->value_stride * 2);
          else
            look_up((const unsigned char*)tables.f32 + b * ncodes * 4, 4, p + c / 8 * nbits, nbits, n, codes, out,
                    dst->value_stride * 4);
        } else if (by_table) { /* a chunk that starts before lo: its codes unpacked, one a byte, as 8-bit codes */
          kvci_unpack_codes(p + c / 8 * nbits, n, nbits, codes);
          look_up((const unsigned char*)&tables + b * ncodes * elem, elem, codes + skip, 8, n - skip, codes,
                  (unsigned char*)dst->base + at * (int64_t)elem, dst->value_stride * (int64_t)elem);
        } else {
          kvci_unpack_codes(p + c / 8 * nbits, n, nbits, codes);
          /* The chunk as one group of n values, under the group's scale and zero point. */
          kvci_dequantize_groups(spec, codes, scale + b, zero + b, 1, n, values);
          store_values(dt, values + skip, n - skip, dst->base, at, dst->value_stride);
        }
      }
    }
  }
}
