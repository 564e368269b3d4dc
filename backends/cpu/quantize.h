/*
 * backends/cpu/quantize.h: the group quantizers of quantized layers and
 * their bit packing (docs/semantics.md, 'quanto quantizer' and 'HQQ
 * quantizer'). Pure arithmetic on host memory, private to the CPU backend
 * (and the emulated device, which compiles it): the core plans which values
 * form a group and reaches this code only through the backend table's
 * quantize_groups / dequantize_groups (cpu_quant_ops.c gathers the values
 * as float32, exact for float16/bfloat16, and scatters the results back).
 */
#ifndef KVC_CPU_QUANTIZE_H
#define KVC_CPU_QUANTIZE_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "quant_math/quant_math.h" /* the per-value arithmetic, shared with the GPU kernels */

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
/* The same with HQQ's working memory given (kvci_hqq_quantize's `work`): cannot fail. */
int kvci_quantize_groups_in(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                           uint8_t* codes, float* scale, float* zero, float* work);

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

/* The two quantizers behind kvci_quantize_groups / kvci_dequantize_groups (quant_quanto.c, quant_hqq.c). */
void kvci_quanto_quantize(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                         uint8_t* codes, float* scale, float* zero);
void kvci_quanto_dequantize(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out);
/* work: (axis 0 ? 3 : 2) * ngroups * group + 3 * ngroups floats, or NULL to allocate them (-1: out of memory). */
int kvci_hqq_quantize(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group, uint8_t* codes,
                     float* scale, float* zero, float* work);
void kvci_hqq_dequantize(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale, const float* zero,
                        int64_t ngroups, int64_t group, float* out);

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

#endif /* KVC_CPU_QUANTIZE_H */
