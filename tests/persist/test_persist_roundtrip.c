/*
 * test_persist_roundtrip.c: every cache kind and preset saved and loaded
 * (through a file and through a buffer) and restored into a fresh cache of
 * the same options: the copies report exactly what the original reports
 * (cache_snapshot.h, bytes_reserved aside), and keep doing so while the
 * original and the copies take the same further updates.
 */
#include <unistd.h>

#include "persist_test.h"

/* The quantized modes' options (static: the layer options point at them). */
static kvc_quant_options quant_modes[3];

typedef struct spec {
  const char* name;
  kvc_cache_options options;
  kvc_layer_options layers[4];
  uint32_t num_layers;
  kvc_model_config config;
} spec;

static kvc_error* make(const spec* s, kvc_cache** out) {
  kvc_cache_options o = s->options;
  if (o.preset == KVC_PRESET_CUSTOM) {
    o.layers = s->layers;
    o.num_layers = s->num_layers;
  } else {
    o.config = &s->config;
  }
  return kvc_cache_create(&o, out);
}

/* Saves `c`, loads it (path and buffer) and restores it into a fresh cache; checks all three, then steps all four. */
static void round_trip(const spec* s, kvc_cache* c, uint32_t layers, int64_t pos) {
  char path[256];
  ps_path(path, sizeof path, "roundtrip");
  kvc_cache *from_path = NULL, *from_buffer = NULL, *restored = NULL;
  ps_buffer buf = {0};
  if (!CHECK_OK(kvc_cache_save(c, path, NULL)) || !CHECK_OK(kvc_cache_save_to(c, ps_buffer_write, &buf, NULL)))
    goto done;
  if (!CHECK_OK(kvc_cache_load(path, NULL, &from_path)) ||
      !CHECK_OK(kvc_cache_load_buffer(buf.data, buf.len, NULL, &from_buffer)) || !CHECK_OK(make(s, &restored)) ||
      !CHECK_OK(kvc_cache_restore(restored, path)))
    goto done;
  char what[128];
  kvc_cache* copies[3] = {from_path, from_buffer, restored};
  const char* names[3] = {"loaded from the path", "loaded from the buffer", "restored"};
  for (int i = 0; i < 3; i++) {
    snprintf(what, sizeof what, "%s: %s", s->name, names[i]);
    ps_same(c, copies[i], what);
  }
  /* The same further steps: prefill-like and decode-like. */
  for (int step = 0; step < 3; step++) {
    int64_t n = step == 0 ? 5 : 1;
    ps_step(c, layers, n, pos, 100 + step);
    for (int i = 0; i < 3; i++) {
      ps_step(copies[i], layers, n, pos, 100 + step);
      snprintf(what, sizeof what, "%s: %s, after step %d", s->name, names[i], step);
      ps_same(c, copies[i], what);
    }
    pos += n;
  }
done:
  kvc_cache_destroy(from_path);
  kvc_cache_destroy(from_buffer);
  kvc_cache_destroy(restored);
  free(buf.data);
  unlink(path);
}

static spec custom(const char* name, kvc_layer_kind kind, int64_t window, int64_t max_len) {
  spec s;
  memset(&s, 0, sizeof s);
  s.name = name;
  s.options = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
  s.options.preset = KVC_PRESET_CUSTOM;
  s.num_layers = 2;
  for (uint32_t i = 0; i < 2; i++) s.layers[i] = tu_layer(kind, window, max_len);
  return s;
}

/* Every kind alone (two layers), at several fill levels: empty, after a prefill, after decoding past windows. */
static void test_every_kind(void) {
  spec specs[32];
  int n = 0;
  /* The kinds that need nothing but a window or a length: name, kind, window, max_cache_len. */
  static const struct {
    const char* name;
    kvc_layer_kind kind;
    int64_t window, max_len;
  } plain[] = {
      {"dynamic", KVC_LAYER_DYNAMIC, 0, 0},
      {"dynamic sliding", KVC_LAYER_DYNAMIC_SLIDING, 6, 0},
      {"dynamic chunked", KVC_LAYER_DYNAMIC_CHUNKED, 6, 0},
      {"static", KVC_LAYER_STATIC, 0, 40},
      {"static sliding", KVC_LAYER_STATIC_SLIDING, 6, 40},
      {"static chunked", KVC_LAYER_STATIC_CHUNKED, 6, 40},
      {"linear", KVC_LAYER_LINEAR, 0, 0},
      {"linear + dynamic", KVC_LAYER_LINEAR_DYNAMIC, 0, 0},
      {"linear + dynamic sliding", KVC_LAYER_LINEAR_DYNAMIC_SLIDING, 6, 0},
      {"linear + static", KVC_LAYER_LINEAR_STATIC, 0, 40},
      {"linear + static sliding", KVC_LAYER_LINEAR_STATIC_SLIDING, 6, 40},
      {"fp8 quantized", KVC_LAYER_QUANTIZED_FP8, 0, 0},
      {"dummy", KVC_LAYER_DUMMY, 0, 0},
      {"dynamic indexed", KVC_LAYER_DYNAMIC_INDEXED, 0, 0},
      {"static indexed", KVC_LAYER_STATIC_INDEXED, 0, 40},
  };
  for (size_t k = 0; k < sizeof plain / sizeof plain[0]; k++)
    specs[n++] = custom(plain[k].name, plain[k].kind, plain[k].window, plain[k].max_len);
  for (int m = 0; m < 3; m++) {
    static const char* names[3] = {"quantized incremental", "quantized transformers", "quantized compact"};
    static const kvc_quant_mode modes[3] = {KVC_QUANT_MODE_INCREMENTAL, KVC_QUANT_MODE_TRANSFORMERS,
                                            KVC_QUANT_MODE_COMPACT};
    quant_modes[m] = (kvc_quant_options)KVC_QUANT_OPTIONS_INIT;
    quant_modes[m].mode = modes[m];
    quant_modes[m].q_group_size = 8;
    quant_modes[m].residual_length = 4;
    specs[n] = custom(names[m], KVC_LAYER_QUANTIZED, 0, 0);
    specs[n].layers[0].quant = specs[n].layers[1].quant = &quant_modes[m];
    n++;
  }
  specs[n] = custom("sink", KVC_LAYER_SINK, 8, 0);
  specs[n].layers[0].num_sink_tokens = specs[n].layers[1].num_sink_tokens = 2;
  n++;
  /* Mixed, offloaded: which layers sit in the host tier is part of the state. */
  specs[n] = custom("offloaded mix", KVC_LAYER_DYNAMIC, 0, 0);
  specs[n].num_layers = 4;
  specs[n].layers[1] = tu_layer(KVC_LAYER_STATIC, 0, 40);
  specs[n].layers[2] = tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 6, 0);
  specs[n].layers[3] = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  specs[n].options.offload = KVC_OFFLOAD_ALL;
  n++;
  for (int i = 0; i < n; i++) {
    static const int64_t fills[3][3] = {{0, 0, 0}, {7, 0, 0}, {7, 1, 6}}; /* prefill, decode steps */
    for (int f = 0; f < 3; f++) {
      kvc_cache* c = NULL;
      if (!CHECK_OK(make(&specs[i], &c))) continue;
      int64_t pos = 0;
      if (fills[f][0]) ps_step(c, specs[i].num_layers, fills[f][0], pos, 1), pos += fills[f][0];
      for (int64_t t = 0; t < fills[f][1] + fills[f][2]; t++, pos++) ps_step(c, specs[i].num_layers, 1, pos, 2 + t);
      round_trip(&specs[i], c, specs[i].num_layers, pos);
      kvc_cache_destroy(c);
    }
  }
}

static spec preset(const char* name, kvc_preset p, kvc_offload offload) {
  spec s;
  memset(&s, 0, sizeof s);
  s.name = name;
  s.options = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
  s.options.preset = p;
  s.options.offload = offload;
  s.options.max_cache_len = 32;
  s.options.window_length = 8;
  s.options.num_sink_tokens = 2;
  s.config = (kvc_model_config)KVC_MODEL_CONFIG_INIT;
  s.config.num_hidden_layers = 3;
  s.config.sliding_window = 6;
  s.config.attention_chunk_size = 6;
  return s;
}

/* Every preset, after a prefill and some decoding. */
static void test_every_preset(void) {
  for (size_t i = 0; i < PS_NUM_PRESETS; i++) {
    spec s = preset(PS_PRESETS[i].name, PS_PRESETS[i].preset, KVC_OFFLOAD_DEFAULT);
    static const kvc_layer_type mamba_types[3] = {KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION,
                                                  KVC_LAYER_TYPE_LINEAR_ATTENTION};
    static kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
    q.q_group_size = 8;
    q.residual_length = 3;
    if (PS_PRESETS[i].preset == KVC_PRESET_QUANTIZED) {
      s.config.sliding_window = s.config.attention_chunk_size = 0;
      s.options.quant = &q;
    }
    if (PS_PRESETS[i].preset == KVC_PRESET_HYBRID_MAMBA) s.config.layer_types = mamba_types;
    kvc_cache* c = NULL;
    if (!CHECK_OK(make(&s, &c))) continue;
    int64_t pos = 0;
    ps_step(c, 3, 6, pos, 1), pos += 6;
    for (int t = 0; t < 4; t++, pos++) ps_step(c, 3, 1, pos, 2 + t);
    round_trip(&s, c, 3, pos);
    kvc_cache_destroy(c);
  }
}

/* A lazy DynamicCache (layers appear as updated) restores into a fresh lazy cache with no layers yet. */
static void test_lazy(void) {
  spec s;
  memset(&s, 0, sizeof s);
  s.name = "lazy dynamic";
  s.options = (kvc_cache_options)KVC_CACHE_OPTIONS_INIT;
  s.config = (kvc_model_config)KVC_MODEL_CONFIG_INIT;
  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_create(NULL, &c));
  ps_step(c, 3, 4, 0, 1);
  char path[256];
  ps_path(path, sizeof path, "lazy");
  kvc_cache* fresh = NULL;
  if (CHECK_OK(kvc_cache_save(c, path, NULL)) && CHECK_OK(kvc_cache_create(NULL, &fresh)) &&
      CHECK_OK(kvc_cache_restore(fresh, path))) {
    ps_same(c, fresh, "lazy restored");
    ps_step(c, 4, 1, 4, 2);
    ps_step(fresh, 4, 1, 4, 2);
    ps_same(c, fresh, "lazy restored, after a step that adds a layer");
  }
  kvc_cache_destroy(fresh);
  kvc_cache_destroy(c);
  unlink(path);
}

/* An encoder-decoder cache: both halves and the is_updated flags. */
static void test_encoder_decoder(void) {
  kvc_cache *self = NULL, *cross = NULL;
  REQUIRE_OK(kvc_cache_create(NULL, &self));
  REQUIRE_OK(kvc_cache_create(NULL, &cross));
  kvc_encoder_decoder_cache* ed = NULL;
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &ed));
  kvc_cache* s = kvc_encoder_decoder_cache_self_attention(ed);
  kvc_cache* x = kvc_encoder_decoder_cache_cross_attention(ed);
  ps_step(s, 2, 3, 0, 1);
  /* Layer 1's cross-attention through the model's protocol (marks it updated); layer 0 stays not updated. */
  float k[PS_B * PS_H * 5 * PS_D];
  int64_t shape[4] = {PS_B, PS_H, 5, PS_D};
  ps_fill(k, PS_B * PS_H * 5 * PS_D, 3);
  kvc_tensor kt = ps_tensor(k, 4, shape);
  REQUIRE_OK(kvc_encoder_decoder_cache_update_cross(ed, 1, &kt, &kt, NULL));
  char path[256];
  ps_path(path, sizeof path, "encdec");
  kvc_encoder_decoder_cache* back = NULL;
  if (CHECK_OK(kvc_encoder_decoder_cache_save(ed, path, NULL)) &&
      CHECK_OK(kvc_encoder_decoder_cache_load(path, NULL, &back))) {
    kvc_cache* bs = kvc_encoder_decoder_cache_self_attention(back);
    kvc_cache* bx = kvc_encoder_decoder_cache_cross_attention(back);
    ps_same(s, bs, "self-attention half");
    ps_same(x, bx, "cross-attention half");
    for (uint32_t l = 0; l < 2; l++) {
      int32_t a = -1, b = -1;
      CHECK_OK(kvc_encoder_decoder_cache_is_updated(ed, l, &a));
      CHECK_OK(kvc_encoder_decoder_cache_is_updated(back, l, &b));
      CHECK_EQ_I64(a, b);
    }
  }
  kvc_encoder_decoder_cache_destroy(back);
  kvc_encoder_decoder_cache_destroy(ed);
  unlink(path);
}

int main(void) {
  TU_RUN(test_every_kind);
  TU_RUN(test_every_preset);
  TU_RUN(test_lazy);
  TU_RUN(test_encoder_decoder);
  return tu_finish();
}
