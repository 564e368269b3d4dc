/*
 * test_offload_util.h: what the offloading tests share: caches built from a
 * layer-type string and an offload mode, the tier of every layer as a string,
 * inputs of random finite bits, and the exact store sizes of the kinds.
 */
#ifndef KVCACHE_TEST_OFFLOAD_UTIL_H
#define KVCACHE_TEST_OFFLOAD_UTIL_H

#include "test_util.h"

/*
 * A cache from a preset, a layer-type string ('f' full, 's' sliding, 'c'
 * chunked, 'l' linear attention; "" = no config) and an offload mode. NULL
 * (counted as a failure) when creation fails.
 */
static TU_UNUSED kvc_cache* ot_cache(kvc_preset preset, const char* types, int64_t window, int64_t chunk,
                                     int64_t max_cache_len, kvc_offload offload) {
  kvc_layer_type lt[64];
  uint32_t n = (uint32_t)strlen(types);
  for (uint32_t i = 0; i < n && i < 64; i++)
    lt[i] = types[i] == 's'   ? KVC_LAYER_TYPE_SLIDING_ATTENTION
            : types[i] == 'c' ? KVC_LAYER_TYPE_CHUNKED_ATTENTION
            : types[i] == 'l' ? KVC_LAYER_TYPE_LINEAR_ATTENTION
                              : KVC_LAYER_TYPE_FULL_ATTENTION;
  kvc_model_config cfg = tu_config(n, lt, window, chunk);
  return tu_preset_cache(preset, n ? &cfg : NULL, max_cache_len, offload);
}

/* is_offloaded of every layer, '1' or '0', as a string. */
static TU_UNUSED void ot_tiers(const kvc_cache* c, char* out) {
  uint32_t n = kvc_cache_num_layers(c);
  for (uint32_t i = 0; i < n; i++) out[i] = tu_info(c, i).is_offloaded ? '1' : '0';
  out[n] = '\0';
}

static TU_UNUSED int ot_check_tiers_impl(const char* file, int line, const kvc_cache* c, const char* want,
                                         const char* when) {
  char got[128];
  ot_tiers(c, got);
  tu_checks_total++;
  if (strcmp(got, want) == 0) return 1;
  tu_failures_total++;
  fprintf(TU_LOG, "%s:%d: FAILED in %s: tiers after %s are %s, expected %s\n", file, line, tu_current_test, when, got,
          want);
  return 0;
}
/* CHECK_TIERS(c, "0110", "step 2 layer 1"): which layers are offloaded, one character per layer. */
#define CHECK_TIERS(c, want, when) ot_check_tiers_impl(__FILE__, __LINE__, (c), (want), (when))

/* splitmix64's mix, for inputs the tests can regenerate from a seed. */
static TU_UNUSED uint64_t ot_mix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xBF58476D1CE4E5B9ull;
  z ^= z >> 27;
  z *= 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* A compact [b, h, s, d] tensor of finite non-zero values with random bits (no two alike in practice). */
static TU_UNUSED void ot_random(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s, int64_t d,
                                uint64_t seed) {
  size_t n = (size_t)(b * h * s * d);
  uint32_t* bits32 = (uint32_t*)malloc((n ? n : 1) * 4);
  uint16_t* bits16 = (uint16_t*)malloc((n ? n : 1) * 2);
  if (!bits32 || !bits16) abort();
  for (size_t i = 0; i < n; i++) {
    uint64_t z = ot_mix(seed + (i + 1) * 0x9E3779B97F4A7C15ull);
    uint32_t sign = (uint32_t)(z >> 63), e = (uint32_t)((z >> 32) % 15);
    bits32[i] = sign << 31 | (120 + e) << 23 | (uint32_t)(z & 0x7FFFFF);
    bits16[i] = dt == KVC_DTYPE_FLOAT16 ? (uint16_t)(sign << 15 | (8 + e) << 10 | (z & 0x3FF))
                                        : (uint16_t)(sign << 15 | (120 + e) << 7 | (z & 0x7F));
  }
  tu_tensor_make_bits(x, dt, b, h, s, d, dt == KVC_DTYPE_FLOAT32 ? (const void*)bits32 : (const void*)bits16);
  free(bits32);
  free(bits16);
}

/* Random keys [b,h,s,dk] and values [b,h,s,dv] for n layers (layer i: keys from seed + i, values from seed + i +
 * value_offset) and their descriptors, as update_all and create_from_tensors take them. */
#define OT_MAX_LAYERS 8
typedef struct ot_layers {
  int n;
  tu_tensor k[OT_MAX_LAYERS], v[OT_MAX_LAYERS];
  kvc_tensor kt[OT_MAX_LAYERS], vt[OT_MAX_LAYERS];
} ot_layers;

static TU_UNUSED void ot_layers_make(ot_layers* x, int n, kvc_dtype dt, int64_t b, int64_t h, int64_t s, int64_t dk,
                                     int64_t dv, uint64_t seed, uint64_t value_offset) {
  if (n > OT_MAX_LAYERS) abort();
  x->n = n;
  for (int i = 0; i < n; i++) {
    ot_random(&x->k[i], dt, b, h, s, dk, seed + (uint64_t)i);
    ot_random(&x->v[i], dt, b, h, s, dv, seed + (uint64_t)i + value_offset);
    x->kt[i] = x->k[i].t;
    x->vt[i] = x->v[i].t;
  }
}

static TU_UNUSED void ot_layers_free(ot_layers* x) { tu_tensors_free(x->k, x->v, (size_t)x->n); }

/* update(layer) with random keys [b,h,s,dk] and values [b,h,s,dv] from `seed`. */
static TU_UNUSED kvc_error* ot_update(kvc_cache* c, uint32_t layer, kvc_dtype dt, int64_t b, int64_t h, int64_t s,
                                      int64_t dk, int64_t dv, uint64_t seed, kvc_kv* out) {
  tu_tensor k, v;
  ot_random(&k, dt, b, h, s, dk, seed);
  ot_random(&v, dt, b, h, s, dv, seed ^ 0x5555);
  kvc_error* e = kvc_cache_update(c, layer, &k.t, &v.t, NULL, out);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return e;
}

/* ot_cache(preset, types, window, 0, max_cache_len, offload) after one step: every layer i updated in order with
 * random float32 keys and values [1, h, s, d] of seed i, after which the tiers must read `tiers`. The set-up of the
 * tests that start from a running offloaded cache; NULL (the failing step counted) when a step fails. */
static TU_UNUSED kvc_cache* ot_stepped_cache(kvc_preset preset, const char* types, int64_t window,
                                             int64_t max_cache_len, kvc_offload offload, int64_t h, int64_t s,
                                             int64_t d, const char* tiers) {
  kvc_cache* c = ot_cache(preset, types, window, 0, max_cache_len, offload);
  if (!c) return NULL;
  int ok = 1;
  for (uint32_t i = 0; ok && i < kvc_cache_num_layers(c); i++)
    ok = CHECK_OK(ot_update(c, i, KVC_DTYPE_FLOAT32, 1, h, s, d, d, i, NULL));
  if (ok) CHECK_TIERS(c, tiers, "one update of every layer");
  return tu_kept(c, ok);
}

/* Bytes of a store of `cap` slots: what kvc_cache_memory counts for a layer's K/V. */
static TU_UNUSED uint64_t ot_store_bytes(int64_t b, int64_t h, int64_t cap, int64_t dk, int64_t dv, size_t elem) {
  return (uint64_t)(b * h * cap * (dk + dv)) * elem;
}

/* Both views (up to 8-D) hold the same bytes in the same shapes and dtype (read through their strides). */
static TU_UNUSED int ot_same_tensor(const kvc_tensor* a, const kvc_tensor* b) {
  if (a->ndim != b->ndim || a->ndim > 8) return 0;
  if (a->ndim == 0) return 1;
  if (a->dtype.code != b->dtype.code || a->dtype.bits != b->dtype.bits) return 0;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return 0;
  size_t na = 0, nb = 0;
  unsigned char* x = tu_view_bytes_alloc(a, &na);
  unsigned char* y = tu_view_bytes_alloc(b, &nb);
  int same = na == nb && (na == 0 || memcmp(x, y, na) == 0);
  free(x);
  free(y);
  return same;
}
#define CHECK_SAME_KV(a, b) \
  tu_report(ot_same_tensor(&(a).key, &(b).key) && ot_same_tensor(&(a).value, &(b).value), __FILE__, __LINE__, \
            "same bytes: " #a " and " #b)

#endif /* KVCACHE_TEST_OFFLOAD_UTIL_H */
