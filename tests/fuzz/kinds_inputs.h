/*
 * kinds_inputs.h: what fuzz_kinds.c passes to the library: cache options
 * (every preset and layer kind, the quantizer and sink and linear fields,
 * offload modes, now and then a bad one), planned shapes, K/V inputs in
 * the layouts of tensor_codec.h with one fault at a time, N-D state and
 * RoPE tensors, and update options.
 */
#ifndef KVC_FUZZ_KINDS_INPUTS_H
#define KVC_FUZZ_KINDS_INPUTS_H

#include "kinds_state.h"
#include "reference_model.h"
#include "tensor_codec.h"

/* An N-D input tensor (states, RoPE tables) the fuzzer owns. */
typedef struct nd_tensor {
  kvc_tensor t;
  int64_t shape[8], strides[8];
  unsigned char* mem;
} nd_tensor;

enum { ND_COMPACT, ND_TRANSPOSED, ND_PADDED, ND_LAYOUTS };

/* Faults of a K/V pair, one at a time. */
enum {
  F_NONE,
  F_BATCH,
  F_HEADS,
  F_KDIM,
  F_VDIM,
  F_DTYPE,
  F_VDTYPE,
  F_NDIM,
  F_NULLK,
  F_NULLV,
  F_DEVICE,
  F_VSEQ,
  F_BADTYPE,
  F_NODATA,
  F_COUNT
};

/* One layer's keys and values. */
typedef struct kv_input {
  ref_tensor kd, vd;
  ref_grid tok;
  codec_tensor k, v;
} kv_input;

/* Update options: cache_position for static layers, RoPE tables for sink layers, or bad ones. */
typedef struct upd_opts {
  kvc_update_options o;
  int use; /* 0: options NULL */
  int64_t pos[16];
  nd_tensor cos, sin;
  int has_rope;
} upd_opts;

/*
 * A tensor of `ndim` dims whose elements are fresh values (narrow codec
 * bits, dtype UNSET: int32): compact, with the last two dims swapped in
 * memory (explicit strides), or padded (every stride doubled, an offset).
 */
void nd_make(ctx* c, nd_tensor* x, kvc_dtype dt, int ndim, const int64_t* shape, int layout);
void nd_free(nd_tensor* x);
const char* fault_name(int f);
void kv_make(ctx* c, const group* g, geom x, int64_t n, int fault, int lk, int lv, kv_input* in);
/* The key and value to pass: NULL where the fault says so. */
const kvc_tensor* kv_key(kv_input* in);
const kvc_tensor* kv_value(kv_input* in);
void kv_free(kv_input* in);
void opts_free(upd_opts* u);
/*
 * Options of an update of n tokens at `layer` (its geometry x): none,
 * defaults, cache_position on static kinds, RoPE on sink layers; with
 * `faulty` now and then a bad one.
 */
void gen_update_options(ctx* c, group* g, uint32_t layer, geom x, int64_t n, int faulty, upd_opts* u);
void gen_options(ctx* c, opt_store* s);
void describe_options(const opt_store* s);
/* Shapes for layers that have none yet, fitted to the kinds the cache got. */
void gen_plan(ctx* c, group* g);

#endif /* KVC_FUZZ_KINDS_INPUTS_H */
