/*
 * persist_test.h: what the cache file tests share: caches of every kind and
 * preset, a deterministic step that updates every layer the way its kind is
 * updated (K/V, RoPE tables for sink layers, conv and recurrent states,
 * indexer keys), and file helpers (save to memory, compare snapshots).
 */
#ifndef KVC_TESTS_PERSIST_TEST_H
#define KVC_TESTS_PERSIST_TEST_H

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "test_util.h"

enum { PS_B = 2, PS_H = 2, PS_D = 8, PS_CH = 4, PS_K = 3 };

/* Every preset, with its name: what the file tests save and load in each. */
typedef struct ps_named_preset {
  const char* name;
  kvc_preset preset;
} ps_named_preset;
static TU_UNUSED const ps_named_preset PS_PRESETS[] = {
    {"DYNAMIC", KVC_PRESET_DYNAMIC},
    {"STATIC", KVC_PRESET_STATIC},
    {"SLIDING_WINDOW", KVC_PRESET_SLIDING_WINDOW},
    {"HYBRID", KVC_PRESET_HYBRID},
    {"HYBRID_CHUNKED", KVC_PRESET_HYBRID_CHUNKED},
    {"QUANTIZED", KVC_PRESET_QUANTIZED},
    {"OFFLOADED", KVC_PRESET_OFFLOADED},
    {"OFFLOADED_STATIC", KVC_PRESET_OFFLOADED_STATIC},
    {"OFFLOADED_HYBRID", KVC_PRESET_OFFLOADED_HYBRID},
    {"SINK", KVC_PRESET_SINK},
    {"MAMBA", KVC_PRESET_MAMBA},
    {"HYBRID_MAMBA", KVC_PRESET_HYBRID_MAMBA}};
#define PS_NUM_PRESETS (sizeof PS_PRESETS / sizeof PS_PRESETS[0])

/* A cache of five layers of different kinds: dynamic, sink (1 sink token of 6), `third`, quantized (groups of 8, 2
   residual tokens) and static indexed (8): what a file must carry of each, side by side. */
static TU_UNUSED kvc_error* ps_mixed_cache(kvc_layer_kind third, kvc_cache** out) {
  static kvc_quant_options quant = KVC_QUANT_OPTIONS_INIT;
  quant.q_group_size = 8;
  quant.residual_length = 2;
  kvc_layer_options l[5] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_SINK, 6, 0), tu_layer(third, 0, 0),
                            tu_layer(KVC_LAYER_QUANTIZED, 0, 0), tu_layer(KVC_LAYER_STATIC_INDEXED, 0, 8)};
  l[1].num_sink_tokens = 1;
  l[3].quant = &quant;
  kvc_cache_options o = tu_custom_options(5, l);
  return kvc_cache_create(&o, out);
}

/* Floats from a seed: both caches of a comparison get the same inputs. */
static TU_UNUSED void ps_fill(float* x, int64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; i++) x[i] = (float)(tu_xorshift32(&s) % 2000) / 1000.0f - 1.0f;
}

static TU_UNUSED kvc_tensor ps_tensor(float* data, int32_t ndim, int64_t* shape) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = KVC_DEVICE_CPU;
  t.ndim = ndim;
  t.dtype = tu_data_type(KVC_DTYPE_FLOAT32);
  t.shape = shape;
  return t;
}

/* One step of `n` tokens on every layer (step number `step` seeds the inputs; `pos` is the first position). */
static TU_UNUSED int ps_step(kvc_cache* c, uint32_t layers, int64_t n, int64_t pos, uint64_t step) {
  int ok = 1;
  float* k = (float*)malloc(sizeof(float) * PS_B * PS_H * n * PS_D);
  float* v = (float*)malloc(sizeof(float) * PS_B * PS_H * n * PS_D);
  float* cs = (float*)malloc(sizeof(float) * 2 * (pos + n) * PS_D);
  float* x = (float*)malloc(sizeof(float) * PS_B * PS_CH * n);
  float st[PS_B * 3 * 5];
  float idx[PS_B * 64 * 4];
  for (uint32_t l = 0; l < layers; l++) {
    kvc_layer_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    kvc_layer_kind kind = KVC_LAYER_DYNAMIC;
    if (l < kvc_cache_num_layers(c)) {
      if (!CHECK_OK(kvc_cache_layer_info(c, l, &info))) return 0;
      kind = info.kind;
    }
    uint64_t seed = step * 1000 + l;
    if (snap_kind_is_linear(kind)) {
      int64_t xs[3] = {PS_B, PS_CH, n}, ss[3] = {PS_B, 3, 5};
      ps_fill(x, PS_B * PS_CH * n, seed + 7);
      ps_fill(st, PS_B * 15, seed + 8);
      kvc_tensor xt = ps_tensor(x, 3, xs), stt = ps_tensor(st, 3, ss);
      kvc_conv_update_options co = KVC_CONV_UPDATE_OPTIONS_INIT;
      ok &= CHECK_OK(kvc_cache_update_conv_state(c, l, &xt, &co, NULL));
      ok &= CHECK_OK(kvc_cache_update_recurrent_state(c, l, 0, &stt, NULL));
      if (kind == KVC_LAYER_LINEAR) continue;
    }
    if (kind == KVC_LAYER_DUMMY) continue;
    if ((kind == KVC_LAYER_DYNAMIC_INDEXED || kind == KVC_LAYER_STATIC_INDEXED) && n <= 64) {
      int64_t is[3] = {PS_B, n, 4};
      ps_fill(idx, PS_B * n * 4, seed + 9);
      kvc_tensor it = ps_tensor(idx, 3, is);
      ok &= CHECK_OK(kvc_cache_update_indexer(c, l, &it, NULL));
    }
    int64_t shape[4] = {PS_B, PS_H, n, PS_D};
    ps_fill(k, PS_B * PS_H * n * PS_D, seed + 1);
    ps_fill(v, PS_B * PS_H * n * PS_D, seed + 2);
    kvc_tensor kt = ps_tensor(k, 4, shape), vt = ps_tensor(v, 4, shape);
    kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
    int64_t rope_shape[2] = {pos + n, PS_D};
    kvc_tensor ct, sn;
    if (kind == KVC_LAYER_SINK) { /* the whole table up to the new positions, as a model passes it */
      ps_fill(cs, 2 * (pos + n) * PS_D, 77);
      ct = ps_tensor(cs, 2, rope_shape);
      sn = ps_tensor(cs + (pos + n) * PS_D, 2, rope_shape);
      o.rope_cos = &ct;
      o.rope_sin = &sn;
    }
    ok &= CHECK_OK(kvc_cache_update(c, l, &kt, &vt, &o, NULL));
  }
  free(k), free(v), free(cs), free(x);
  return ok;
}

/* A growing buffer for kvc_cache_save_to. */
typedef struct ps_buffer {
  unsigned char* data;
  size_t len, cap;
} ps_buffer;

static TU_UNUSED int ps_buffer_write(void* user, const void* data, size_t bytes) {
  ps_buffer* b = (ps_buffer*)user;
  if (b->len + bytes > b->cap) {
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + bytes) cap *= 2;
    unsigned char* p = (unsigned char*)realloc(b->data, cap);
    if (!p) return -1;
    b->data = p;
    b->cap = cap;
  }
  memcpy(b->data + b->len, data, bytes);
  b->len += bytes;
  return 0;
}

/* 1 when the snapshots of a and b are equal (bytes_reserved aside: working memory is not saved). */
static TU_UNUSED int ps_same(const kvc_cache* a, const kvc_cache* b, const char* what) {
  cache_snap x, y;
  char why[512];
  snap_take(a, &x);
  snap_take(b, &y);
  int ok = snap_equal(&x, &y, SNAP_IGNORE_RESERVED, why, sizeof why);
  tu_checks_total++;
  if (!ok) {
    tu_failures_total++;
    fprintf(TU_LOG, "FAILED in %s: %s: %s\n", tu_current_test, what, why);
  }
  snap_free(&x);
  snap_free(&y);
  return ok;
}

/* A file name under the build's temporary folder, unique per process and tag. */
static TU_UNUSED const char* ps_path(char* out, size_t n, const char* tag) {
  const char* dir = getenv("TMPDIR");
  snprintf(out, n, "%s/kvc-persist-%ld-%s.kvc", dir && *dir ? dir : "/tmp", (long)getpid(), tag);
  return out;
}

#endif /* KVC_TESTS_PERSIST_TEST_H */
