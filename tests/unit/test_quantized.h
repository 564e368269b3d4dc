/*
 * test_quantized.h: what the tests of QUANTIZED layers share: making a
 * quantized cache, seeded random-normal inputs in any dtype, and a
 * full-precision reference of what a layer returned, to which the same batch
 * operations and crops are applied as to the cache.
 */
#ifndef KVCACHE_TEST_QUANTIZED_H
#define KVCACHE_TEST_QUANTIZED_H

#include <math.h>

#include "test_util.h"

/* A quantizer setting; tq_options turns it into kvc_quant_options. */
typedef struct tq_setting {
  kvc_quantizer quantizer;
  kvc_quant_mode mode;
  int32_t nbits, axis_key, axis_value;
  int64_t group, residual;
} tq_setting;

static TU_UNUSED kvc_quant_options tq_options(const tq_setting* s) {
  kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
  q.quantizer = s->quantizer;
  q.mode = s->mode;
  q.nbits = s->nbits;
  q.axis_key = s->axis_key;
  q.axis_value = s->axis_value;
  q.q_group_size = s->group;
  q.residual_length = s->residual;
  return q;
}

/* kvc_cache_create of KVC_PRESET_QUANTIZED with `layers` layers and the quantizer options q. */
static TU_UNUSED kvc_error* tq_create(const kvc_quant_options* q, uint32_t layers, kvc_cache** out) {
  kvc_model_config cfg;
  kvc_model_config_init(&cfg);
  cfg.num_hidden_layers = layers;
  kvc_cache_options o;
  kvc_cache_options_init(&o);
  o.preset = KVC_PRESET_QUANTIZED;
  o.config = &cfg;
  o.quant = q;
  return kvc_cache_create(&o, out);
}

/* KVC_PRESET_QUANTIZED with `layers` layers, or NULL (the error is counted). */
static TU_UNUSED kvc_cache* tq_cache(const tq_setting* s, uint32_t layers) {
  kvc_quant_options q = tq_options(s);
  kvc_cache* c = NULL;
  if (!CHECK_OK(tq_create(&q, layers, &c))) return NULL;
  return c;
}

/* Bytes of quantized data an incremental layer holds (layer_quantized.h's records), from the shapes:
 * per-token groups (D / G per token and head) or per-channel groups (D per block of G tokens). */
static TU_UNUSED uint64_t tq_incremental_bytes(const tq_setting* s, int64_t b, int64_t h, int64_t dk, int64_t dv,
                                               int64_t q, size_t elem) {
  uint64_t total = 0;
  for (int w = 0; w < 2; w++) {
    int axis = w ? s->axis_value : s->axis_key;
    int channel = s->quantizer == KVC_QUANTIZER_QUANTO ? axis == -1 : axis == 0;
    int64_t d = w ? dv : dk, groups = channel ? (q / s->group) * d : q * (d / s->group);
    uint64_t packed = (uint64_t)(s->group * s->nbits + 7) / 8;
    total += (uint64_t)(b * h * groups) * (2 * elem + packed);
  }
  return total;
}

/* Deterministic standard normal numbers (xorshift64* and Box-Muller). */
typedef struct tq_rng {
  uint64_t s;
} tq_rng;

static TU_UNUSED double tq_uniform(tq_rng* r) {
  r->s ^= r->s >> 12;
  r->s ^= r->s << 25;
  r->s ^= r->s >> 27;
  return (double)((r->s * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

static TU_UNUSED float tq_normal(tq_rng* r) {
  double u = tq_uniform(r), v = tq_uniform(r);
  if (u < 1e-300) u = 1e-300;
  return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* Rounds f to the nearest value of dtype (the tensor holds exactly this). */
static TU_UNUSED float tq_round(kvc_dtype dt, float f) {
  if (dt == KVC_DTYPE_FLOAT16) return tu_f16_to_f32(tu_f32_to_f16(f));
  if (dt == KVC_DTYPE_BFLOAT16) return tu_bf16_to_f32(tu_f32_to_bf16(f));
  return f;
}

/* A [b, h, s, d] tensor of normal values (times `scale`), and the exact values it holds in `vals` (may be NULL). */
static TU_UNUSED void tq_normal_tensor(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s, int64_t d,
                                       tq_rng* r, float scale, float* vals) {
  size_t n = (size_t)(b * h * s * d);
  float* f = (float*)malloc((n ? n : 1) * sizeof(float));
  if (!f) abort();
  for (size_t i = 0; i < n; i++) f[i] = tq_round(dt, scale * tq_normal(r));
  tu_tensor_make(x, dt, b, h, s, d, f);
  if (vals) memcpy(vals, f, n * sizeof(float));
  free(f);
}

/*
 * A full-precision reference of one layer: keys and values [b, h, s, d] as
 * floats (exact for every dtype), grown, cut and gathered along the batch
 * like the cache.
 */
typedef struct tq_ref {
  int64_t b, h, s, dk, dv;
  float* k;
  float* v;
} tq_ref;

static TU_UNUSED void tq_ref_free(tq_ref* r) {
  free(r->k);
  free(r->v);
  memset(r, 0, sizeof *r);
}

/* The reference becomes a copy of the view (a layer view or an update's return). */
static TU_UNUSED void tq_ref_from_kv(tq_ref* r, const kvc_kv* kv) {
  tq_ref_free(r);
  r->b = kv->key.shape[0];
  r->h = kv->key.shape[1];
  r->s = kv->key.shape[2];
  r->dk = kv->key.shape[3];
  r->dv = kv->value.shape[3];
  r->k = (float*)malloc(sizeof(float) * (size_t)(r->b * r->h * r->s * r->dk + 1));
  r->v = (float*)malloc(sizeof(float) * (size_t)(r->b * r->h * r->s * r->dv + 1));
  if (!r->k || !r->v) abort();
  tu_read_view(&kv->key, r->k);
  tu_read_view(&kv->value, r->v);
}

/* A new reference holding a copy of the view (tq_ref_from_kv on an empty one). */
static TU_UNUSED tq_ref tq_ref_of_kv(const kvc_kv* kv) {
  tq_ref r;
  memset(&r, 0, sizeof r);
  tq_ref_from_kv(&r, kv);
  return r;
}

/* Rows rows[0..count) of the reference, in that order (reorder, select, repeat-interleave). */
static TU_UNUSED void tq_ref_rows(tq_ref* r, const int64_t* rows, int64_t count) {
  for (int w = 0; w < 2; w++) {
    int64_t d = w ? r->dv : r->dk, row = r->h * r->s * d;
    float* src = w ? r->v : r->k;
    float* dst = (float*)malloc(sizeof(float) * (size_t)(count * row + 1));
    if (!dst) abort();
    for (int64_t i = 0; i < count; i++) memcpy(dst + i * row, src + rows[i] * row, sizeof(float) * (size_t)row);
    free(src);
    if (w)
      r->v = dst;
    else
      r->k = dst;
  }
  r->b = count;
}

/*
 * The same, but only for tokens [from, s) of each row: tokens before `from`
 * keep their row (what reordering the residual alone, as transformers up to
 * 5.22 does, would give).
 */
static TU_UNUSED void tq_ref_rows_from(tq_ref* r, const int64_t* rows, int64_t from) {
  for (int w = 0; w < 2; w++) {
    int64_t d = w ? r->dv : r->dk;
    float* x = w ? r->v : r->k;
    float* copy = (float*)malloc(sizeof(float) * (size_t)(r->b * r->h * r->s * d + 1));
    if (!copy) abort();
    memcpy(copy, x, sizeof(float) * (size_t)(r->b * r->h * r->s * d));
    for (int64_t b = 0; b < r->b; b++)
      for (int64_t h = 0; h < r->h; h++)
        for (int64_t t = from; t < r->s; t++)
          memcpy(x + ((b * r->h + h) * r->s + t) * d, copy + ((rows[b] * r->h + h) * r->s + t) * d,
                 sizeof(float) * (size_t)d);
    free(copy);
  }
}

/* Keeps the first `keep` tokens. */
static TU_UNUSED void tq_ref_crop(tq_ref* r, int64_t keep) {
  for (int w = 0; w < 2; w++) {
    int64_t d = w ? r->dv : r->dk;
    float* x = w ? r->v : r->k;
    for (int64_t b = 0; b < r->b; b++)
      for (int64_t h = 0; h < r->h; h++)
        memmove(x + ((b * r->h + h) * keep) * d, x + ((b * r->h + h) * r->s) * d, sizeof(float) * (size_t)(keep * d));
  }
  r->s = keep;
}

/* Appends new tokens (float arrays [b, h, n, d]). */
static TU_UNUSED void tq_ref_append(tq_ref* r, const float* k, const float* v, int64_t n) {
  for (int w = 0; w < 2; w++) {
    int64_t d = w ? r->dv : r->dk;
    const float* add = w ? v : k;
    float* x = w ? r->v : r->k;
    float* y = (float*)malloc(sizeof(float) * (size_t)(r->b * r->h * (r->s + n) * d + 1));
    if (!y) abort();
    for (int64_t b = 0; b < r->b; b++)
      for (int64_t h = 0; h < r->h; h++) {
        memcpy(y + ((b * r->h + h) * (r->s + n)) * d, x + ((b * r->h + h) * r->s) * d,
               sizeof(float) * (size_t)(r->s * d));
        memcpy(y + ((b * r->h + h) * (r->s + n) + r->s) * d, add + ((b * r->h + h) * n) * d,
               sizeof(float) * (size_t)(n * d));
      }
    free(x);
    if (w)
      r->v = y;
    else
      r->k = y;
  }
  r->s += n;
}

/*
 * Whether the view holds exactly the reference's values (same shape, every
 * element equal); on a difference prints the first one and returns 0 (not a
 * counted check: wrap in CHECK).
 */
static TU_UNUSED int tq_equal(const kvc_kv* kv, const tq_ref* r, int quiet) {
  for (int w = 0; w < 2; w++) {
    const kvc_tensor* t = w ? &kv->value : &kv->key;
    int64_t d = w ? r->dv : r->dk;
    if (t->shape[0] != r->b || t->shape[1] != r->h || t->shape[2] != r->s || t->shape[3] != d) {
      if (!quiet)
        fprintf(TU_LOG, "  %s shape [%lld,%lld,%lld,%lld], reference [%lld,%lld,%lld,%lld]\n", w ? "value" : "key",
                (long long)t->shape[0], (long long)t->shape[1], (long long)t->shape[2], (long long)t->shape[3],
                (long long)r->b, (long long)r->h, (long long)r->s, (long long)d);
      return 0;
    }
    const float* x = w ? r->v : r->k;
    for (int64_t b = 0; b < r->b; b++)
      for (int64_t h = 0; h < r->h; h++)
        for (int64_t s = 0; s < r->s; s++)
          for (int64_t e = 0; e < d; e++) {
            float got = tu_get(t, b, h, s, e), want = x[((b * r->h + h) * r->s + s) * d + e];
            if (tu_f32_bits(got) != tu_f32_bits(want)) {
              if (!quiet)
                fprintf(TU_LOG, "  %s[%lld,%lld,%lld,%lld] is %.9g, reference %.9g\n", w ? "value" : "key",
                        (long long)b, (long long)h, (long long)s, (long long)e, got, want);
              return 0;
            }
          }
  }
  return 1;
}

/* Updates layer `layer` with n random tokens; their values go to k_vals/v_vals (may be NULL). */
static TU_UNUSED kvc_error* tq_update(kvc_cache* c, uint32_t layer, kvc_dtype dt, int64_t b, int64_t h, int64_t n,
                                      int64_t dk, int64_t dv, tq_rng* r, float* k_vals, float* v_vals,
                                      kvc_kv* out) {
  tu_tensor k, v;
  tq_normal_tensor(&k, dt, b, h, n, dk, r, 1.0f, k_vals);
  tq_normal_tensor(&v, dt, b, h, n, dv, r, 1.0f, v_vals);
  kvc_error* e = kvc_cache_update(c, layer, &k.t, &v.t, NULL, out);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return e;
}

/* tq_cache(s, layers) whose layer 0 already holds n random float32 tokens, [b, h, n, dk] and [b, h, n, dv] drawn
 * from r: where most quantized tests start. NULL on error (counted). */
static TU_UNUSED kvc_cache* tq_cache_holding(const tq_setting* s, uint32_t layers, tq_rng* r, int64_t b, int64_t h,
                                             int64_t n, int64_t dk, int64_t dv) {
  kvc_cache* c = tq_cache(s, layers);
  if (!c) return NULL;
  return tu_kept(c, CHECK_OK(tq_update(c, 0, KVC_DTYPE_FLOAT32, b, h, n, dk, dv, r, NULL, NULL, NULL)));
}

static TU_UNUSED int64_t tq_quantized(const kvc_cache* c, uint32_t layer) { return tu_info(c, layer).quantized_length; }

#endif /* KVCACHE_TEST_QUANTIZED_H */
