/*
 * core/kinds/layer_quantized_fp8.c: Fp8QuantizedLayer (transformers >= 5.21,
 * QuantizedCache(backend="fp8")), the QUANTIZED_FP8 kind.
 *
 * transformers calibrates one float32 scale per tensor (keys, values) on the
 * layer's first update, amax / 448, and never changes it: later tokens are
 * quantized to e4m3fn with that scale and appended, and every later update
 * returns the whole history dequantized. The first update returns its inputs
 * as they are. Since the scale is fixed, a token's dequantized value never
 * changes once written; so the store keeps the dequantized history
 * (quantize-dequantize happens once per token, in the room phase), and
 * every operation of the dynamic layer (crop, reorder, select, repeat,
 * split, stack, clone) applies to it unchanged and bit-exact. The price is
 * memory: the store holds `dtype` elements, not one-byte codes
 * (docs/differences-from-transformers.md).
 *
 * The first update's return is a copy of its inputs, kept in the extension
 * until the next update. The arithmetic (calibration, the e4m3fn round trip)
 * runs behind the backend table (fp8_calibrate, fp8_round_trip), so the kind
 * runs on every backend that has those entries.
 */
#include <stdlib.h>
#include <string.h>

#include "kinds/base/base_kinds.h"
#include "layer_quantized.h"
#include "persist/record.h"

typedef struct fp8_ext {
  float scale[2];     /* keys, values: fixed by the first update */
  int calibrated;     /* scale[] is set */
  float pending[2];   /* the scales the update in progress calibrated (room phase) */
  void* first[2];     /* the first update's inputs, returned by it (layer dtype, [B, H, n, D]) */
  size_t first_bytes[2];
  void* next_first[2]; /* the same for the update in progress (room phase); adopted by apply */
  size_t next_bytes[2];
  int64_t first_len;  /* tokens in first[]; 0 when the last update returned the store */
  int64_t first_shape[2][4], first_strides[2][4];
} fp8_ext;

static fp8_ext* ext_of(const kvc_layer* l) { return (fp8_ext*)l->ext; }

static void free_buffers(const kvc_cache* c, void* p[2], size_t bytes[2]) {
  for (int w = 0; w < 2; w++) {
    if (p[w]) c->backend->free(c->backend->ctx, &c->exec, p[w]);
    p[w] = NULL;
    bytes[w] = 0;
  }
}

static void free_first(const kvc_cache* c, fp8_ext* x) {
  free_buffers(c, x->first, x->first_bytes);
  free_buffers(c, x->next_first, x->next_bytes);
  x->first_len = 0;
}

/* Writes dequantize(quantize(input)) into store slots [slot, slot + n) of keys (w 0) or values (w 1). */
static int write_round_trip(const kvc_cache* c, kvc_layer* l, int w, const kvc_tensor* t, float scale, int64_t slot) {
  int64_t ss[4], ds[4];
  kvci_tensor_strides(t, ss);
  kvci_store_strides(l, w, ds);
  char* dst = (char*)(w ? l->v : l->k) + (size_t)(slot * ds[2]) * l->elem;
  const kvc_backend* be = c->backend;
  return be->fp8_round_trip(be->ctx, &c->exec, dst, ds, kvci_tensor_base(t), ss, t->shape, (int32_t)l->dtype, scale);
}

/*
 * Room phase, the store having room for the n new tokens: calibrates (first
 * update), copies the inputs the first update returns, and writes the
 * round-tripped tokens past the stored region, where no view shows them.
 */
static kvc_error* prepare_tokens(const char* fn, const kvc_cache* c, kvc_layer* l, const kvc_tensor* key,
                                 const kvc_tensor* value, const kvc_update_options* o) {
  (void)o;
  const kvc_backend* be = c->backend;
  if (!be->fp8_calibrate || !be->fp8_round_trip)
    return kvci_quant_unsupported(fn, c, "fp8 quantized", be->fp8_calibrate ? "fp8_round_trip" : "fp8_calibrate", 0);
  if (!l->ext && !(l->ext = calloc(1, sizeof(fp8_ext)))) return kvci_err_oom();
  fp8_ext* x = ext_of(l);
  const kvc_tensor* in[2] = {key, value};
  free_buffers(c, x->next_first, x->next_bytes); /* a failed call's */
  if (!x->calibrated) {
    for (int w = 0; w < 2; w++) {
      size_t bytes = (size_t)(in[w]->shape[0] * in[w]->shape[1] * in[w]->shape[2] * in[w]->shape[3]) * l->elem;
      int64_t st[4];
      kvci_tensor_strides(in[w], st);
      int rc = be->fp8_calibrate(be->ctx, &c->exec, kvci_tensor_base(in[w]), st, in[w]->shape, (int32_t)l->dtype,
                                 &x->pending[w]);
      if (rc) {
        free_buffers(c, x->next_first, x->next_bytes);
        return kvci_quant_unsupported(fn, c, "fp8 quantized", "fp8_calibrate", rc);
      }
      if (bytes && !(x->next_first[w] = c->backend->alloc_zeroed(c->backend->ctx, &c->exec, bytes))) {
        free_buffers(c, x->next_first, x->next_bytes);
        return kvci_err_oom();
      }
      x->next_bytes[w] = bytes;
    }
  }
  for (int w = 0; w < 2; w++) {
    /* Past the stored region: a failure here leaves nothing a view shows. */
    int rc = write_round_trip(c, l, w, in[w], x->calibrated ? x->scale[w] : x->pending[w], l->end);
    if (rc) {
      free_buffers(c, x->next_first, x->next_bytes);
      return kvci_quant_unsupported(fn, c, "fp8 quantized", "fp8_round_trip", rc);
    }
  }
  return NULL;
}

static kvc_region apply_update(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v, int64_t n,
                               const kvc_update_options* o) {
  (void)o;
  fp8_ext* x = ext_of(l);
  free_buffers(c, x->first, x->first_bytes); /* the previous update's return: its views end with this call */
  x->first_len = 0;
  if (!x->calibrated) { /* the first update returns its inputs as they are */
    const kvc_tensor* in[2] = {k, v};
    for (int w = 0; w < 2; w++) {
      int64_t* shape = x->first_shape[w];
      int64_t* st = x->first_strides[w];
      int64_t ss[4];
      memcpy(shape, in[w]->shape, sizeof x->first_shape[w]);
      st[3] = 1, st[2] = shape[3], st[1] = shape[2] * shape[3], st[0] = shape[1] * st[1];
      kvci_tensor_strides(in[w], ss);
      x->first[w] = x->next_first[w], x->first_bytes[w] = x->next_bytes[w];
      x->next_first[w] = NULL, x->next_bytes[w] = 0;
      if (x->first[w])
        KVCI_BE(c, copy_4d, x->first[w], st, kvci_tensor_base(in[w]), ss, shape, l->elem);
      x->scale[w] = x->pending[w];
    }
    x->calibrated = 1;
    x->first_len = n;
  }
  l->end += n;
  return (kvc_region){l->start, l->end};
}

static void set_return(kvc_layer* l, kvc_region r) {
  const fp8_ext* x = ext_of(l);
  kvci_layer_set_return(l, r);
  if (!x->first_len) return;
  for (int w = 0; w < 2; w++) { /* the same view, pointed at the copy of the first update's inputs */
    kvc_tensor* t = w ? &l->views[1].value : &l->views[1].key;
    memcpy(l->shape[1][w], x->first_shape[w], sizeof l->shape[1][w]);
    memcpy(l->strides[1][w], x->first_strides[w], sizeof l->strides[1][w]);
    t->data = x->first[w];
    t->byte_offset = 0;
  }
}

/* Drops the scales too: the next update calibrates afresh (BaseQuantizedLayer.reset). */
static void reset(const kvc_cache* c, kvc_layer* l) {
  kvci_dynamic_reset(c, l);
  fp8_ext* x = ext_of(l);
  if (!x) return;
  free_first(c, x);
  x->calibrated = 0;
}

/* A clone keeps the scales; the first update's return belongs to the original's views. */
static int ext_shell(const kvc_layer* src, kvc_layer* dst) {
  fp8_ext* x = (fp8_ext*)calloc(1, sizeof *x);
  if (!x) return -1;
  const fp8_ext* s = ext_of(src);
  memcpy(x->scale, s->scale, sizeof x->scale);
  x->calibrated = s->calibrated;
  dst->ext = x;
  return 0;
}

/* Files: the scales (the first update's return is working memory). */
static void ext_save(const kvc_layer* l, kvci_record* r) {
  kvci_rec_f32s(r, ext_of(l)->scale, 2);
  kvci_rec_i64(r, ext_of(l)->calibrated);
}

static kvc_error* ext_load(const char* fn, kvc_layer* l, kvci_record_reader* in) {
  float scale[2];
  int64_t calibrated;
  if (kvci_rec_get_f32s(in, scale, 2) || kvci_rec_get_range(in, 0, 1, &calibrated))
    return kvci_err(KVC_ERROR_IO, "%s: the fp8 quantized layer's record is malformed", fn);
  fp8_ext* x = (fp8_ext*)calloc(1, sizeof *x);
  if (!x) return kvci_err_oom();
  memcpy(x->scale, scale, sizeof scale);
  x->calibrated = (int)calibrated;
  l->ext = x;
  return NULL;
}

static void ext_free(const kvc_cache* c, kvc_layer* l) {
  free_first(c, ext_of(l));
  free(l->ext);
  l->ext = NULL;
}

static void memory(const kvc_layer* l, uint64_t* extra_reserved, uint64_t* quantized) {
  const fp8_ext* x = ext_of(l);
  *extra_reserved = x ? (uint64_t)(x->first_bytes[0] + x->first_bytes[1]) : 0;
  *quantized = 0; /* the store holds dequantized values, counted as K/V */
}

/* Splits of one cache share the scales; stacking splits calibrated differently would mix two quantizations. */
static kvc_error* check_stack(const char* fn, const kvc_layer* first, const kvc_layer* other, uint32_t index,
                              size_t which) {
  const fp8_ext *a = ext_of(first), *b = ext_of(other);
  int ca = a && a->calibrated, cb = b && b->calibrated;
  if (ca == cb && (!ca || !memcmp(a->scale, b->scale, sizeof a->scale))) return NULL;
  return kvci_err(KVC_ERROR_INVALID_STATE,
                 "%s: layer %u of splits[%zu] has fp8 scales (%.9g, %.9g) but splits[0] has (%.9g, %.9g); splits "
                 "must share their calibration to be stacked",
                 fn, index, which, cb ? b->scale[0] : 0.0, cb ? b->scale[1] : 0.0, ca ? a->scale[0] : 0.0,
                 ca ? a->scale[1] : 0.0);
}

/* The dynamic layer's queries and crop apply to the dequantized store as they are. */
static const kvc_layer_ops fp8_ops = {
    KVC_DYNAMIC_STORE_OPS,
    .apply_update = apply_update,
    .reset = reset,
    KVC_OWN_STATE_OPS,
    .prepare_tokens = prepare_tokens,
    .set_return = set_return,
    .memory = memory,
};

const kvc_kind kvc_quantized_fp8_kind = {
    .id = KVC_LAYER_QUANTIZED_FP8,
    .name = "fp8 quantized",
    .traits = KVC_TRAIT_HAS_KV, /* no offloaded class in transformers */
    .ops = &fp8_ops,
    .is_croppable = kvci_quant_is_croppable,
    .check_loaded = kvci_loaded_store_only, /* its store grows as the dynamic one; its scales index nothing */
};
