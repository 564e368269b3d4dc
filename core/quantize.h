/*
 * core/quantize.h: the group quantizers of quantized layers and their bit
 * packing (spec A.8.1, A.8.2). Pure arithmetic on host memory: the layer
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
} kvc_quantizer_spec;

/*
 * Quantizes `ngroups` groups of `group` values, x laid out [ngroups][group]
 * (float32 values exactly representable in spec->dtype). Writes one code per
 * value (unpacked, in [0, 2^nbits)) to codes [ngroups][group], and per group
 * the scale and zero point the dequantization uses, as float32 values
 * exactly representable in the dtype the quantizer keeps them in.
 * HQQ's early stop looks at the mean error over all the groups of one call,
 * as hqq does over one tensor: pass exactly the groups transformers
 * quantizes together. Returns 0, or -1 when out of memory (outputs
 * unspecified).
 */
int kvc_quantize_groups(const kvc_quantizer_spec* spec, const float* x, int64_t ngroups, int64_t group,
                        uint8_t* codes, float* scale, float* zero);

/* The dequantized values of the groups, [ngroups][group], rounded to spec->dtype. */
void kvc_dequantize_groups(const kvc_quantizer_spec* spec, const uint8_t* codes, const float* scale,
                           const float* zero, int64_t ngroups, int64_t group, float* out);

/* Bytes that n codes of nbits take packed. */
size_t kvc_packed_bytes(int64_t n, int nbits);
/* Packs n codes (each < 2^nbits) into kvc_packed_bytes(n, nbits) bytes; unpack reverses it exactly. */
void kvc_pack_codes(const uint8_t* codes, int64_t n, int nbits, uint8_t* out);
void kvc_unpack_codes(const uint8_t* in, int64_t n, int nbits, uint8_t* codes);

#endif /* KVC_CORE_QUANTIZE_H */
