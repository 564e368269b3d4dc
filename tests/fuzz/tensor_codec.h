/*
 * tensor_codec.h: token ids <-> tensor bytes, for the differential fuzzer.
 *
 * Every element of a key or value names its token: element d of token t holds
 * a bit pattern computed from (t, d, key-or-value, dtype). Patterns are
 * normal finite numbers of the dtype (never zero, NaN, infinite or subnormal),
 * so they are exact values in float32, float16 and bfloat16 alike and any
 * correct copy keeps them bit for bit. Token id 0 is the zero slot (all bits
 * zero), which is what unwritten static slots hold.
 */
#ifndef KVC_FUZZ_TENSOR_CODEC_H
#define KVC_FUZZ_TENSOR_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "reference_model.h"

/* Memory layouts of input tensors: the library must honour any strides. */
enum {
  LAYOUT_COMPACT,       /* strides NULL */
  LAYOUT_EXPLICIT,      /* the compact strides, spelled out */
  LAYOUT_SEQ_MAJOR,     /* [B, S, H, D] in memory, as a model's projection leaves it */
  LAYOUT_PADDED,        /* gaps between rows, heads and batches, and a byte_offset */
  LAYOUT_INNER_STRIDE,  /* head_dim elements two apart */
  LAYOUT_BCAST_BATCH,   /* batch stride 0: every row is row 0 */
  LAYOUT_BCAST_HEADS,   /* head stride 0: every head is head 0 */
  LAYOUT_COUNT
};

size_t codec_dtype_size(kvc_dtype dtype);
kvc_data_type codec_data_type(kvc_dtype dtype);
const char* codec_dtype_name(kvc_dtype dtype);
/* The bits of element d of token `tok` (0 for tok == 0). */
uint32_t codec_bits(uint32_t tok, int64_t d, int is_value, kvc_dtype dtype);
/*
 * The same with `narrow` set: magnitudes in [2^-6, 2^4) only, so that
 * arithmetic on the values (quantizers, RoPE re-rotation) stays finite; any
 * dtype holds them exactly too. narrow 0 is codec_bits.
 */
uint32_t codec_bits_ranged(uint32_t tok, int64_t d, int is_value, kvc_dtype dtype, int narrow);
/* The bits of the element of `es` (2 or 4) bytes at p. */
uint32_t codec_get_bits(const unsigned char* p, size_t es);

/* An input tensor the fuzzer owns. */
typedef struct codec_tensor {
  kvc_tensor t;
  int64_t shape[4];
  int64_t strides[4];
  unsigned char* mem;
} codec_tensor;

/*
 * Builds the tensor `desc` describes, filled from the token grid `tok`
 * ([B][H][S] of the key's shape; positions outside it get an arbitrary
 * non-zero token). Broadcast layouts need a grid that already repeats row 0
 * (or head 0): codec_broadcast_tokens does that.
 */
void codec_build(codec_tensor* out, const ref_tensor* desc, const ref_grid* tok, int is_value, int layout);
/* codec_build with the values of codec_bits_ranged(..., narrow). */
void codec_build_ranged(codec_tensor* out, const ref_tensor* desc, const ref_grid* tok, int is_value, int layout,
                        int narrow);
void codec_free(codec_tensor* t);
void codec_broadcast_tokens(ref_grid* tok, int layout);

/*
 * One layer's K/V pair, after the fuzzer has picked its shapes ks and vs
 * (a fault may make them disagree) and set the rest of the descriptors k and
 * v: their shapes set (a 3-D key drops the last dim), a grid `tok` of
 * ks[0] x ks[1] x L fresh token ids counted on from *next_tok and broadcast
 * as the layouts lk and lv read it, then both tensors (codec_build_ranged).
 * A pair with a fault (`faulty`) is built compact, so that the fault is the
 * one thing wrong with it.
 */
void codec_build_kv(codec_tensor* kt, codec_tensor* vt, ref_tensor* k, ref_tensor* v, const int64_t ks[4],
                    const int64_t vs[4], ref_grid* tok, int64_t L, uint32_t* next_tok, int faulty, int lk, int lv,
                    int narrow);

/*
 * An indexer input [B, n, D] (desc: ndim 3, shape[0..2]; another ndim keeps the 4-D [B, 1, n, D] it is built
 * as) filled from the token grid `tok` ([B][1][n]) in `layout`, as codec_build lays out a one-head key.
 */
void codec_build_indexer(codec_tensor* out, const ref_tensor* desc, const ref_grid* tok, int layout);
/* codec_check_view for an indexer view [B, L, D] against the grid `want` ([B][1][L]). */
int codec_check_indexer_view(const kvc_tensor* view, const ref_grid* want, int64_t D, kvc_dtype dtype, char* why,
                             size_t why_size);

/*
 * Compares a view returned by the library with the expected token grid:
 * device, ndim, dtype, shape [B, H, L, D], stride rules and every element's
 * bits. Returns 1 when equal, else 0 with a description in `why`.
 */
int codec_check_view(const kvc_tensor* view, const ref_grid* want, int64_t D, kvc_dtype dtype, int is_value,
                     char* why, size_t why_size);

#endif /* KVC_FUZZ_TENSOR_CODEC_H */
