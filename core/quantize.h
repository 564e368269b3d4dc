/*
 * core/quantize.h: the group quantizers of quantized layers and their bit
 * packing (docs/semantics.md, 'quanto quantizer' and 'HQQ quantizer'). Pure arithmetic on host memory: the layer
 * (layer_quantized.c) decides which values form a group, gathers them here
 * as float32 (exact for float16/bfloat16) and scatters the results back.
 */
#ifndef KVC_CORE_QUANTIZE_H
#define KVC_CORE_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

typedef struct kvc_quantizer_spec {
  kvc_quantizer quantizer; /* KVC_QUANTIZER_QUANTO or KVC_QUANTIZER_HQQ */
  int nbits;               /* validated by the caller */
  kvc_dtype dtype;         /* the cache's dtype: quanto computes in it, HQQ dequantizes to it */
  int axis;                /* HQQ: the axis the groups were formed along (kvci_quant_layout_init):
                              hqq works on the tensor in its own memory order, which decides
                              how its float sums round; ignored by quanto */
} kvc_quantizer_spec;

/*
 * Quantizes `ngroups` groups of `group` values, x laid out [ngroups][group]
 * (float32 values exactly representable in spec->dtype). Writes one code per
 * value (unpacked, in [0, 2^nbits)) to codes [ngroups][group], and per group
 * the scale and zero point the dequantization uses, as float32 values
 * exactly representable in the dtype the quantizer keeps them in (both keep
 * them in spec->dtype): quanto dequantizes scale * code - zero (its zero is
 * its "shift", minus the group's minimum), HQQ (code - zero) * scale.
 * A group whose values are all equal gets scale 0 from quanto (codes 0) and
 * still dequantizes exactly, as in optimum-quanto.
 * HQQ's early stop looks at the mean error over all the groups of one call,
 * as hqq does over one tensor: pass exactly the groups transformers
 * quantizes together. Returns 0, or -1 when out of memory (outputs
 * unspecified).
 */
int kvci_quantize_groups(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                        uint8_t* codes, float* scale, float* zero);

/* The dequantized values of the groups, [ngroups][group], rounded to spec->dtype. */
void kvci_dequantize_groups(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out);

/*
 * Packed groups as a layer keeps them: group k's `group` codes packed
 * (kvci_pack_codes) at codes + k * stride, its scale and zero point (as
 * kvci_dequantize_groups takes them) stored in spec->dtype at scale + k *
 * stride and zero + k * stride; any alignment.
 */
typedef struct kvc_packed_groups {
  const uint8_t* codes;
  const uint8_t* scale;
  const uint8_t* zero;
  int64_t stride; /* bytes from one group to the next */
  int64_t ngroups, group;
} kvc_packed_groups;

/*
 * Where kvci_dequantize_packed writes, in elements of spec->dtype's storage
 * (float32, or the float16/bfloat16 bit patterns): groups come in rows of
 * row_groups; value i of group k = r * row_groups + j goes to
 * base[r * row_stride + j * group_stride + (i - lo) * value_stride].
 */
typedef struct kvc_dequant_dst {
  void* base;
  int64_t row_groups, row_stride, group_stride, value_stride;
} kvc_dequant_dst;

/*
 * Bulk dequantization of packed groups straight into a tensor of the cache's
 * dtype (a compact layer materializes its whole history with it on every
 * step): values lo..hi-1 (0 <= lo <= hi <= group) of every group of *src
 * are written to *dst. Bit for bit kvci_dequantize_groups stored with
 * kvci_store_f32: it unpacks codes in chunks and either calls
 * kvci_dequantize_groups on them (whose loops are specialized per dtype so
 * that they vectorize) or, when a group has many values per possible code,
 * looks them up in a table of the group's 2^nbits values that
 * kvci_dequantize_groups computed.
 */
void kvci_dequantize_packed(const kvc_quantizer_spec* spec, const kvc_packed_groups* src, int64_t lo, int64_t hi,
                           const kvc_dequant_dst* dst);

/* Bytes that n codes of nbits take packed. */
size_t kvci_packed_bytes(int64_t n, int nbits);
/* Packs n codes (each < 2^nbits) into kvci_packed_bytes(n, nbits) bytes; unpack reverses it exactly. */
void kvci_pack_codes(const uint8_t* codes, int64_t n, int nbits, uint8_t* out);
void kvci_unpack_codes(const uint8_t* in, int64_t n, int nbits, uint8_t* codes);

/*
 * How transformers splits a contiguous [B, H, S, D] tensor into the groups
 * of one quantizer call (docs/semantics.md, 'quanto quantizer' and 'HQQ quantizer'):
 *  - quanto axis 0: G consecutive elements of the row-major flattening
 *    (optimum-quanto's group(): G must divide H*S*D and not exceed it). When
 *    the whole tensor is one group (B == 1, H*S*D == G), quanto's optimizer
 *    falls back to one scale per element: group 1, G groups (lossless).
 *  - quanto axis -1: channel d over G consecutive positions of the flattened
 *    (b, h, s) order (G must divide B*H*S and not exceed it); group
 *    d * (B*H*S/G) + j holds positions j*G .. j*G + G-1.
 *  - HQQ axis 1: reshape(-1, G), G consecutive elements (G must divide the
 *    element count).
 *  - HQQ axis 0: reshape(G, -1), group j = elements j + k * (numel/G),
 *    k < G (G must divide the element count).
 */
typedef struct kvc_quant_layout {
  kvc_quantizer quantizer;
  int axis;
  int64_t shape[4];   /* B, H, S, D */
  int64_t ngroups;    /* groups of one call */
  int64_t group;      /* values per group */
  int64_t axis_numel; /* the N of transformers' error: quanto "Group size (G) must be a divisor of
                         (N)" (numel / shape[axis]); HQQ's element count */
} kvc_quant_layout;

/*
 * Fills *layout for quantizer `q` along `axis` (quanto 0 or -1, HQQ 1 or 0)
 * with group size `group` >= 1. Returns 0, or -1 when transformers refuses
 * the group size for this shape (or the tensor is empty); then only
 * layout->axis_numel is meaningful, for the caller's error message.
 */
int kvci_quant_layout_init(kvc_quant_layout* layout, kvc_quantizer q, int axis, int64_t group, const int64_t shape[4]);
/* Copies the contiguous tensor x into groups [ngroups][group], and back. */
void kvci_quant_gather(const kvc_quant_layout* layout, const float* x, float* groups);
void kvci_quant_scatter(const kvc_quant_layout* layout, const float* groups, float* x);

/* The two quantizers behind kvci_quantize_groups / kvci_dequantize_groups (quant_quanto.c, quant_hqq.c). */
void kvci_quanto_quantize(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                         uint8_t* codes, float* scale, float* zero);
void kvci_quanto_dequantize(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out);
int kvci_hqq_quantize(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group, uint8_t* codes,
                     float* scale, float* zero);
void kvci_hqq_dequantize(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale, const float* zero,
                        int64_t ngroups, int64_t group, float* out);

/* The largest code of nbits, and the code torch's clamp-and-convert gives a rounded value (NaN: 0). */
static inline float kvci_quant_max_code(int nbits) { return (float)((1 << nbits) - 1); }
static inline uint8_t kvci_quant_code(float rounded, float max_code) {
  if (!(rounded > 0.0f)) return 0;
  return rounded < max_code ? (uint8_t)rounded : (uint8_t)max_code;
}

/* Round half to even, as torch.round (exact for |v| < 2^23; larger values are already integers). */
static inline float kvci_round_half_even(float v) {
  float a = v < 0.0f ? -v : v;
  if (!(a < 8388608.0f)) return v;
  a = (a + 8388608.0f) - 8388608.0f;
  return v < 0.0f ? -a : a;
}

/*
 * Calls FN(dtype, ...) with the value's dtype as a constant in each branch,
 * so that each branch inlines to its own vector loop (the quantizers'
 * dequantization runs over a compact layer's whole history every step).
 */
#define KVC_WITH_CONST_DTYPE(dt, FN, ...)      \
  do {                                         \
    if ((dt) == KVC_DTYPE_BFLOAT16)            \
      FN(KVC_DTYPE_BFLOAT16, __VA_ARGS__);     \
    else if ((dt) == KVC_DTYPE_FLOAT16)        \
      FN(KVC_DTYPE_FLOAT16, __VA_ARGS__);      \
    else                                       \
      FN(KVC_DTYPE_FLOAT32, __VA_ARGS__);      \
  } while (0)

#endif /* KVC_CORE_QUANTIZE_H */
