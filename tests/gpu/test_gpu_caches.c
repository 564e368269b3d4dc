/*
 * tests/gpu/test_gpu_caches.c: every cache kind that works on a device, on
 * the device and on the CPU with the same inputs, compared byte for byte
 * after every step (gpu_twin.h).
 *
 * Kinds: dynamic (lazy and from a config), dynamic sliding and chunked,
 * static, static sliding and chunked, the hybrid presets, encoder-decoder,
 * linear (Mamba) states with the conv roll, the linear hybrids, offloaded
 * caches with their prefetches and offloads, sink layers without RoPE and,
 * where the backend re-rotates sink keys (the emulated device does), with.
 * Operations: update, update_all, crop, reorder, select, repeat-interleave,
 * split and stack, clone, reset, reserve, early initialization, creation from
 * tensors, past recording, explicit offload and prefetch. Inputs come in
 * every layout (strided, broadcast, offset, padded) and dtype.
 * Quantized layers (quanto and HQQ in every mode, and FP8) run on every
 * backend (the emulated device, CUDA and HIP all have the quantizer entries)
 * and are compared like every other kind, a NaN of any payload equal to any
 * other NaN (tw_nan_equal). Sink layers with RoPE run on a device whose
 * backend has the version-4 entries (the emulated device has them) and are
 * compared likewise; on a backend without them such an update must give a
 * clear UNSUPPORTED error and change nothing.
 *
 * Built once per device runtime (emulated, CUDA, HIP); device caches are
 * bound to a stream of the test unless a case says otherwise.
 */
#include "gpu_twin.h"

static const kvc_dtype dtypes[3] = {KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT32};
static int device_under_test; /* 0, or 1 for the second-device pass */

static tw_geom geom(int64_t b, int64_t h, int64_t n, int64_t dk, int64_t dv, kvc_dtype dt, int layout) {
  tw_geom g = {b, h, n, dk, dv, dt, layout};
  return g;
}

static kvc_cache_options options(kvc_preset preset, const kvc_model_config* config) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = preset;
  o.config = config;
  return o;
}

/* A model config of n layers of `types` (NULL: the preset's), sliding window,
 * chunk size and conv kernel (0: none): each test names only the sizes that
 * reach its branches. */
static kvc_model_config config(uint32_t n, const kvc_layer_type* types, int64_t window, int64_t chunk,
                               int64_t conv_kernel) {
  kvc_model_config cfg = tu_config(n, types, window, chunk);
  cfg.conv_kernel = conv_kernel;
  return cfg;
}

/* Creates the twin t of a `preset` cache over cfg (NULL: none) with
 * max_cache_len (0: none) on the device under test; 0 when that fails
 * (counted by tw_create). */
static int twin_preset(twin* t, kvc_preset preset, const kvc_model_config* cfg, int64_t max_cache_len) {
  kvc_cache_options o = options(preset, cfg);
  o.max_cache_len = max_cache_len;
  return tw_create(t, &o, device_under_test);
}

/* The same over a config built in the call (config()): one line per test. */
static int twin_config(twin* t, kvc_preset preset, kvc_model_config cfg, int64_t max_cache_len) {
  return twin_preset(t, preset, &cfg, max_cache_len);
}

/* Options of a SinkCache over cfg: `window` tokens kept, the first `sinks` of them for good. */
static kvc_cache_options sink_options(const kvc_model_config* cfg, int64_t window, int64_t sinks) {
  kvc_cache_options o = options(KVC_PRESET_SINK, cfg);
  o.window_length = window;
  o.num_sink_tokens = sinks;
  return o;
}

/* ------------------------------------------------------------- dynamic */

static void test_dynamic_lazy(void) {
  twin t;
  REQUIRE(twin_preset(&t, KVC_PRESET_DYNAMIC, NULL, 0));
  int64_t B = 3;
  /* Prefill of each layer, one layout each, then decode steps through several growths. */
  for (uint32_t l = 0; l < 3; l++) {
    tw_geom g = geom(B, 2, 5, 16, 8, KVC_DTYPE_FLOAT16, (int)l + 1);
    TW_OK(TW_UPDATE(&t, l, &g, NULL));
  }
  for (int step = 0; step < 20; step++) {
    tw_geom g = geom(B, 2, 1, 16, 8, KVC_DTYPE_FLOAT16, step % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&t, 3, &g));
  }
  tw_geom none = geom(B, 2, 0, 16, 8, KVC_DTYPE_FLOAT16, TW_COMPACT);
  TW_OK(TW_UPDATE(&t, 1, &none, NULL));
  tw_geom wrong = geom(B, 4, 1, 16, 8, KVC_DTYPE_FLOAT16, TW_COMPACT);
  TW_REFUSED(TW_UPDATE(&t, 1, &wrong, NULL)); /* heads differ: refused on both, nothing changed */
  tw_update_from_view(&t, 2, 0);
  tw_update_from_view(&t, 1, 1);
  TW_OK(tw_crop(&t, -3));
  TW_OK(tw_crop(&t, 40));
  TW_OK(tw_crop(&t, 0));
  const int64_t beams[3] = {1, 0, 1};
  TW_OK(tw_reorder(&t, beams, 3));
  const int64_t swap[3] = {2, 1, 0};
  TW_OK(tw_reorder(&t, swap, 3));
  const int64_t keep[2] = {2, 0};
  TW_OK(tw_select(&t, keep, 2));
  TW_OK(tw_repeat(&t, 2));
  B = 4;
  TW_OK(tw_reserve(&t, 100));
  for (int step = 0; step < 5; step++) {
    tw_geom g = geom(B, 2, 1 + step % 2, 16, 8, KVC_DTYPE_FLOAT16, step % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&t, 3, &g));
  }
  twin copy;
  if (CHECK(tw_clone(&t, &copy))) {
    /* The clone and the original go separate ways. */
    tw_geom g = geom(B, 2, 2, 16, 8, KVC_DTYPE_FLOAT16, TW_STRIDED);
    TW_OK(TW_UPDATE(&copy, 0, &g, NULL));
    TW_OK(TW_UPDATE(&t, 2, &g, NULL));
    tw_check(&t, "the original after its clone moved on");
    tw_destroy(&copy);
  }
  tw_split_and_stack(&t, B, 1);
  tw_split_and_stack(&t, B, 3);
  TW_OK(tw_reset(&t));
  tw_geom g = geom(B, 2, 3, 16, 8, KVC_DTYPE_FLOAT16, TW_PADDED);
  TW_OK(TW_UPDATE_ALL(&t, 3, &g));
  tw_destroy(&t);
}

/* Every dtype with every input layout, and layers of different heads and dims in one update_all. */
static void test_dtypes_and_layouts(void) {
  for (int d = 0; d < 3; d++) {
    twin t;
    REQUIRE(twin_preset(&t, KVC_PRESET_DYNAMIC, NULL, 0));
    for (int layout = 0; layout < TW_LAYOUTS; layout++) {
      tw_geom g = geom(2, 3, 1 + layout, 8, 8, dtypes[d], layout);
      TW_OK(TW_UPDATE(&t, 0, &g, NULL));
    }
    tw_geom per_layer[3] = {geom(2, 3, 2, 8, 8, dtypes[d], TW_COMPACT), geom(2, 1, 2, 64, 32, dtypes[d], TW_STRIDED),
                            geom(2, 4, 2, 4, 12, dtypes[d], TW_BROADCAST)};
    for (int step = 0; step < 4; step++) TW_OK(TW_UPDATE_ALL_EACH(&t, 3, per_layer));
    tw_destroy(&t);
  }
}

/* DynamicCache(config) with full, sliding and chunked layers: windows, compaction, past recording. */
static void test_dynamic_sliding_and_chunked(void) {
  const kvc_layer_type types[4] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION,
                                   KVC_LAYER_TYPE_CHUNKED_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION};
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_DYNAMIC, config(4, types, 4, 3, 0), 0));
  tw_geom prefill = geom(2, 2, 6, 8, 8, KVC_DTYPE_BFLOAT16, TW_STRIDED); /* longer than the window */
  TW_OK(TW_UPDATE_ALL(&t, 4, &prefill));
  for (int step = 0; step < 25; step++) { /* through several compactions of the sliding stores */
    tw_geom g = geom(2, 2, step % 7 == 6 ? 3 : 1, 8, 8, KVC_DTYPE_BFLOAT16, step % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&t, 4, &g));
  }
  const int64_t beams[2] = {1, 1};
  TW_OK(tw_reorder(&t, beams, 2));
  TW_REFUSED(tw_crop(&t, -1)); /* a sliding layer past its window cannot crop without past recording */
  TW_OK(tw_record_past(&t));
  for (int step = 0; step < 6; step++) {
    tw_geom g = geom(2, 2, 1 + step % 2, 8, 8, KVC_DTYPE_BFLOAT16, (step + 2) % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&t, 4, &g));
  }
  TW_OK(tw_crop(&t, -2));
  TW_OK(tw_crop(&t, 0));
  const int64_t one[1] = {1};
  TW_OK(tw_select(&t, one, 1));
  TW_OK(tw_repeat(&t, 3));
  tw_split_and_stack(&t, 3, 2);
  twin copy;
  if (CHECK(tw_clone(&t, &copy))) tw_destroy(&copy);
  TW_OK(tw_reset(&t));
  tw_geom g = geom(3, 2, 9, 8, 8, KVC_DTYPE_BFLOAT16, TW_OFFSET);
  TW_OK(TW_UPDATE_ALL(&t, 4, &g));
  tw_destroy(&t);
}

/* ---------------------------------------------------------------- static */

static void test_static(void) {
  const kvc_layer_type types[3] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION,
                                   KVC_LAYER_TYPE_CHUNKED_ATTENTION};
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_STATIC, config(3, types, 4, 3, 0), 12));
  kvc_init_options init = tu_init_options(2, 2, 8, 16, KVC_DTYPE_FLOAT32);
  TW_OK(tw_early_init(&t, &init));
  tw_geom prefill = geom(2, 2, 5, 8, 16, KVC_DTYPE_FLOAT32, TW_STRIDED);
  TW_OK(TW_UPDATE_ALL(&t, 3, &prefill));
  for (int step = 0; step < 7; step++) {
    tw_geom g = geom(2, 2, 1, 8, 16, KVC_DTYPE_FLOAT32, step % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&t, 3, &g));
  }
  tw_geom over = geom(2, 2, 1, 8, 16, KVC_DTYPE_FLOAT32, TW_COMPACT);
  TW_REFUSED(TW_UPDATE_ALL(&t, 3, &over)); /* the full layer is full: refused on both, nothing changed */
  TW_REFUSED(tw_crop(&t, -1));
  const int64_t beams[2] = {1, 0};
  TW_OK(tw_reorder(&t, beams, 2));
  const int64_t one[1] = {0};
  TW_REFUSED(tw_select(&t, one, 1)); /* static kinds: unsupported on both */
  tw_split_and_stack(&t, 2, 1);
  twin copy;
  if (CHECK(tw_clone(&t, &copy))) tw_destroy(&copy);
  TW_OK(tw_reset(&t));
  TW_OK(TW_UPDATE_ALL(&t, 3, &prefill));
  tw_destroy(&t);
}

/* StaticCache with explicit cache_position writes (transformers 4.57's protocol), repeated positions included. */
static void test_static_cache_position(void) {
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_STATIC, config(2, NULL, 0, 0, 0), 10));
  kvc_update_options u = KVC_UPDATE_OPTIONS_INIT;
  TU_POSITIONS(u, 0, 1, 2, 3);
  tw_geom g4 = geom(1, 2, 4, 8, 8, KVC_DTYPE_FLOAT16, TW_STRIDED);
  TW_OK(TW_UPDATE(&t, 0, &g4, &u));
  TW_OK(TW_UPDATE(&t, 1, &g4, &u));
  TU_POSITIONS(u, 7, 5, 6); /* scattered */
  tw_geom g3 = geom(1, 2, 3, 8, 8, KVC_DTYPE_FLOAT16, TW_PADDED);
  TW_OK(TW_UPDATE(&t, 0, &g3, &u));
  TU_POSITIONS(u, 4, 4, 2); /* repeated: the last token written to a slot wins */
  TW_OK(TW_UPDATE(&t, 1, &g3, &u));
  TU_POSITIONS(u, 10); /* beyond max_cache_len */
  tw_geom g1 = geom(1, 2, 1, 8, 8, KVC_DTYPE_FLOAT16, TW_COMPACT);
  TW_REFUSED(TW_UPDATE(&t, 0, &g1, &u)); /* out of range on both */
  tw_destroy(&t);
}

/* SlidingWindowCache, HybridCache and HybridChunkedCache: static sliding layers filling, overflowing, shifting. */
static void test_static_sliding_presets(void) {
  static const kvc_preset presets[3] = {KVC_PRESET_SLIDING_WINDOW, KVC_PRESET_HYBRID, KVC_PRESET_HYBRID_CHUNKED};
  for (int p = 0; p < 3; p++) {
    kvc_model_config cfg = config(4, NULL, 4, presets[p] == KVC_PRESET_HYBRID_CHUNKED ? 3 : 0, 0);
    cfg.sliding_window_pattern = 2;
    twin t;
    REQUIRE(twin_preset(&t, presets[p], &cfg, 16));
    tw_geom prefill = geom(2, 1, 3, 8, 8, dtypes[p], TW_STRIDED);
    TW_OK(TW_UPDATE_ALL(&t, 4, &prefill));
    for (int step = 0; step < 9; step++) { /* the windows fill, then shift one slot per token */
      tw_geom g = geom(2, 1, step == 4 ? 2 : 1, 8, 8, dtypes[p], step % TW_LAYOUTS);
      TW_OK(TW_UPDATE_ALL(&t, 4, &g));
    }
    for (uint32_t l = 0; l < 4; l++) {
      tw_geom g = geom(2, 1, 1, 8, 8, dtypes[p], TW_OFFSET);
      TW_OK(TW_UPDATE(&t, l, &g, NULL));
    }
    if (presets[p] != KVC_PRESET_SLIDING_WINDOW) { /* 14 tokens stored: 3 more overflow the full layers */
      tw_geom over = geom(2, 1, 3, 8, 8, dtypes[p], TW_COMPACT);
      TW_REFUSED(TW_UPDATE_ALL(&t, 4, &over));
    }
    const int64_t beams[2] = {1, 1};
    TW_OK(tw_reorder(&t, beams, 2));
    tw_split_and_stack(&t, 2, 1);
    twin copy;
    if (CHECK(tw_clone(&t, &copy))) tw_destroy(&copy);
    TW_OK(tw_reset(&t));
    tw_geom big = geom(2, 1, 6, 8, 8, dtypes[p], TW_PADDED); /* a prefill longer than the window */
    TW_OK(TW_UPDATE_ALL(&t, 4, &big));
    tw_destroy(&t);
  }
}

/* ------------------------------------------------------- encoder-decoder */

typedef struct ed_twin {
  kvc_encoder_decoder_cache* e[2];
  int device;
} ed_twin;

static twin ed_part(const ed_twin* t, int cross) {
  twin p;
  for (int s = 0; s < 2; s++)
    p.c[s] = cross ? kvc_encoder_decoder_cache_cross_attention(t->e[s])
                   : kvc_encoder_decoder_cache_self_attention(t->e[s]);
  p.device = t->device;
  return p;
}

static void ed_check(const ed_twin* t, const char* where) {
  twin self = ed_part(t, 0), cross = ed_part(t, 1);
  tw_check(&self, where);
  tw_check(&cross, where);
  for (uint32_t l = 0; l < 3; l++) {
    int32_t a = -1, b = -2;
    if (TW_SAME(kvc_encoder_decoder_cache_is_updated(t->e[TW_CPU], l, &a),
                kvc_encoder_decoder_cache_is_updated(t->e[TW_DEV], l, &b), where))
      CHECK_EQ_I64(a, b);
  }
}

static void ed_cross(ed_twin* t, uint32_t layer, int64_t batch) {
  tw_input k, v;
  tw_geom g = geom(batch, 2, 7, 8, 8, KVC_DTYPE_FLOAT16, TW_STRIDED);
  if (tw_kv_make(&k, &v, &g, t->device)) {
    kvc_kv o0, o1;
    if (TW_SAME(kvc_encoder_decoder_cache_update_cross(t->e[TW_CPU], layer, &k.t[TW_CPU], &v.t[TW_CPU], &o0),
                kvc_encoder_decoder_cache_update_cross(t->e[TW_DEV], layer, &k.t[TW_DEV], &v.t[TW_DEV], &o1),
                "update_cross"))
      tw_same_kv(&o0, &o1, t->device, "update_cross");
  }
  tw_input_free(&k);
  tw_input_free(&v);
  ed_check(t, "update_cross");
}

static void ed_decode(ed_twin* t, int64_t batch, int steps) {
  twin self = ed_part(t, 0);
  for (int s = 0; s < steps; s++) {
    tw_geom g = geom(batch, 2, 1, 8, 8, KVC_DTYPE_FLOAT16, s % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&self, 3, &g));
    for (uint32_t l = 0; l < 3; l++) ed_cross(t, l, batch);
  }
}

static void ed_destroy(ed_twin* t) {
  kvc_encoder_decoder_cache_destroy(t->e[TW_CPU]);
  kvc_encoder_decoder_cache_destroy(t->e[TW_DEV]);
}

static void test_encoder_decoder(void) {
  twin self, cross;
  REQUIRE(twin_preset(&self, KVC_PRESET_DYNAMIC, NULL, 0));
  REQUIRE(twin_preset(&cross, KVC_PRESET_DYNAMIC, NULL, 0));
  ed_twin t;
  t.device = device_under_test;
  for (int s = 0; s < 2; s++) REQUIRE_OK(kvc_encoder_decoder_cache_create(self.c[s], cross.c[s], &t.e[s]));
  ed_decode(&t, 2, 4);
  const int64_t beams[2] = {1, 0};
  TW_OK(TW_SAME(kvc_encoder_decoder_cache_reorder(t.e[TW_CPU], beams, 2),
                kvc_encoder_decoder_cache_reorder(t.e[TW_DEV], beams, 2), "encoder-decoder reorder"));
  ed_check(&t, "encoder-decoder reorder");
  TW_OK(TW_SAME(kvc_encoder_decoder_cache_crop(t.e[TW_CPU], -1), kvc_encoder_decoder_cache_crop(t.e[TW_DEV], -1),
                "encoder-decoder crop"));
  ed_check(&t, "encoder-decoder crop");
  TW_OK(TW_SAME(kvc_encoder_decoder_cache_batch_repeat_interleave(t.e[TW_CPU], 2),
                kvc_encoder_decoder_cache_batch_repeat_interleave(t.e[TW_DEV], 2), "encoder-decoder repeat"));
  ed_check(&t, "encoder-decoder repeat");
  const int64_t keep[3] = {3, 0, 1};
  TW_OK(TW_SAME(kvc_encoder_decoder_cache_batch_select_indices(t.e[TW_CPU], keep, 3),
                kvc_encoder_decoder_cache_batch_select_indices(t.e[TW_DEV], keep, 3), "encoder-decoder select"));
  ed_check(&t, "encoder-decoder select");
  ed_decode(&t, 3, 2);
  /* split in batches of one and stack them again */
  kvc_encoder_decoder_cache* parts[2][3];
  size_t n[2] = {0, 0};
  if (TW_SAME(kvc_encoder_decoder_cache_batch_split(t.e[TW_CPU], 3, 1, parts[TW_CPU], 3, &n[TW_CPU]),
              kvc_encoder_decoder_cache_batch_split(t.e[TW_DEV], 3, 1, parts[TW_DEV], 3, &n[TW_DEV]),
              "encoder-decoder split") &&
      CHECK_EQ_I64(n[0], 3) && CHECK_EQ_I64(n[1], 3)) {
    for (int i = 0; i < 3; i++) {
      ed_twin part = {{parts[TW_CPU][i], parts[TW_DEV][i]}, t.device};
      ed_check(&part, "an encoder-decoder split");
    }
    ed_twin whole = {{NULL, NULL}, t.device};
    if (TW_SAME(kvc_encoder_decoder_cache_from_batch_splits((const kvc_encoder_decoder_cache* const*)parts[TW_CPU], 3,
                                                             &whole.e[TW_CPU]),
                kvc_encoder_decoder_cache_from_batch_splits((const kvc_encoder_decoder_cache* const*)parts[TW_DEV], 3,
                                                             &whole.e[TW_DEV]),
                "encoder-decoder stack")) {
      ed_check(&whole, "encoder-decoder stacked");
      ed_destroy(&whole);
    }
    for (int i = 0; i < 3; i++) {
      kvc_encoder_decoder_cache_destroy(parts[TW_CPU][i]);
      kvc_encoder_decoder_cache_destroy(parts[TW_DEV][i]);
    }
  }
  ed_twin copy = {{NULL, NULL}, t.device};
  if (TW_SAME(kvc_encoder_decoder_cache_clone(t.e[TW_CPU], &copy.e[TW_CPU]),
              kvc_encoder_decoder_cache_clone(t.e[TW_DEV], &copy.e[TW_DEV]), "encoder-decoder clone")) {
    ed_decode(&copy, 3, 1);
    ed_destroy(&copy);
  }
  TW_OK(TW_SAME(kvc_encoder_decoder_cache_reset(t.e[TW_CPU]), kvc_encoder_decoder_cache_reset(t.e[TW_DEV]),
                "encoder-decoder reset"));
  ed_check(&t, "encoder-decoder reset");
  ed_decode(&t, 3, 1);
  ed_destroy(&t);
}

/* ------------------------------------------------------ recurrent states */

static void linear_batch_ops(twin* t, int64_t batch) {
  int64_t beams[4];
  for (int64_t i = 0; i < batch; i++) beams[i] = (i + 1) % batch;
  TW_OK(tw_reorder(t, beams, (size_t)batch));
  const int64_t keep[2] = {1, 0};
  TW_OK(tw_select(t, keep, 2));
  TW_OK(tw_repeat(t, 2));
  tw_split_and_stack(t, 4, 2);
  twin copy;
  if (CHECK(tw_clone(t, &copy))) tw_destroy(&copy);
}

/* MambaCache: two state pairs per layer, conv states through their rolls and compactions, SSM states of 3 to 6 dims. */
static void test_mamba(void) {
  kvc_model_config cfg = config(2, NULL, 0, 0, 4);
  cfg.number_of_conv_states = 2;
  twin t;
  REQUIRE(twin_preset(&t, KVC_PRESET_MAMBA, &cfg, 0));
  const int64_t B = 2, C = 12;
  kvc_conv_update_options second = KVC_CONV_UPDATE_OPTIONS_INIT;
  second.state_index = 1;
  /* First calls shorter than K (left-padded) and longer than K, then many decode columns. */
  TW_OK(TW_CONV(&t, 0, B, C, 2, KVC_DTYPE_BFLOAT16, TW_COMPACT, NULL));
  TW_OK(TW_CONV(&t, 1, B, C, 6, KVC_DTYPE_BFLOAT16, TW_STRIDED, NULL));
  TW_OK(TW_CONV(&t, 0, B, C, 5, KVC_DTYPE_BFLOAT16, TW_PADDED, &second));
  const int64_t ssm3[3] = {B, 6, 3}, ssm6[6] = {B, 2, 3, 2, 2, 3};
  TW_OK(TW_RECURRENT(&t, 0, 0, 3, ssm3, KVC_DTYPE_BFLOAT16, TW_COMPACT));
  TW_OK(TW_RECURRENT(&t, 0, 1, 6, ssm6, KVC_DTYPE_BFLOAT16, TW_STRIDED));
  TW_OK(TW_RECURRENT(&t, 1, 0, 3, ssm3, KVC_DTYPE_BFLOAT16, TW_OFFSET));
  for (int step = 0; step < 24; step++) {
    TW_OK(TW_CONV(&t, 0, B, C, 1, KVC_DTYPE_BFLOAT16, step % TW_LAYOUTS, NULL));
    TW_OK(TW_CONV(&t, 1, B, C, step % 5 == 4 ? 3 : 1, KVC_DTYPE_BFLOAT16, (step + 1) % TW_LAYOUTS, NULL));
    if (step % 3 == 0) TW_OK(TW_CONV(&t, 0, B, C, 1, KVC_DTYPE_BFLOAT16, TW_COMPACT, &second));
    TW_OK(TW_RECURRENT(&t, 0, 0, 3, ssm3, KVC_DTYPE_BFLOAT16, step % TW_LAYOUTS));
  }
  tw_geom kv = geom(B, 1, 1, 8, 8, KVC_DTYPE_BFLOAT16, TW_COMPACT);
  TW_REFUSED(TW_UPDATE(&t, 0, &kv, NULL)); /* LINEAR layers have no K/V: unsupported on both */
  linear_batch_ops(&t, B);
  TW_OK(tw_reset(&t));
  TW_OK(TW_CONV(&t, 0, 4, C, 3, KVC_DTYPE_BFLOAT16, TW_COMPACT, NULL));
  tw_destroy(&t);
}

/* The legacy MambaCache protocol: cache_position rolls the state and writes at clamped positions. */
static void test_mamba_legacy_roll(void) {
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_MAMBA, config(1, NULL, 0, 0, 4), 0));
  kvc_conv_update_options legacy = KVC_CONV_UPDATE_OPTIONS_INIT;
  TU_POSITIONS(legacy, 0, 1, 2, 3);
  TW_OK(TW_CONV(&t, 0, 3, 10, 4, KVC_DTYPE_FLOAT16, TW_STRIDED, &legacy));
  TU_POSITIONS(legacy, 3); /* the last slot: every decode step rolls */
  for (int step = 0; step < 20; step++) TW_OK(TW_CONV(&t, 0, 3, 10, 1, KVC_DTYPE_FLOAT16, step % TW_LAYOUTS, &legacy));
  TU_POSITIONS(legacy, 9, -2); /* positions beyond [0, K) clamp */
  TW_OK(TW_CONV(&t, 0, 3, 10, 2, KVC_DTYPE_FLOAT16, TW_COMPACT, &legacy));
  const int64_t beams[3] = {2, 2, 0};
  TW_OK(tw_reorder(&t, beams, 3));
  tw_destroy(&t);
}

/* Linear hybrids: HybridMambaAttentionDynamicCache and every LINEAR_* kind with its attention part. */
static void test_linear_hybrids(void) {
  const kvc_layer_type types[4] = {KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION,
                                   KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION};
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_HYBRID_MAMBA, config(4, types, 0, 0, 3), 0));
  TW_OK(tw_record_past(&t)); /* conv states keep every column (their buffers double) until a crop */
  const int64_t ssm[3] = {2, 5, 4};
  for (int step = 0; step < 12; step++) {
    int64_t n = step == 0 ? 5 : 1;
    for (uint32_t l = 0; l < 4; l++) {
      if (l % 2 == 0) {
        TW_OK(TW_CONV(&t, l, 2, 6, n, KVC_DTYPE_FLOAT16, step % TW_LAYOUTS, NULL));
        TW_OK(TW_RECURRENT(&t, l, 0, 3, ssm, KVC_DTYPE_FLOAT16, TW_COMPACT));
      } else {
        tw_geom g = geom(2, 2, n, 8, 8, KVC_DTYPE_FLOAT16, step % TW_LAYOUTS);
        TW_OK(TW_UPDATE(&t, l, &g, NULL));
      }
    }
  }
  TW_OK(tw_crop(&t, -2));
  linear_batch_ops(&t, 2);
  TW_OK(tw_reset(&t));
  tw_destroy(&t);

  /* One layer of each hybrid kind, states and K/V in the same layer. */
  kvc_layer_options layers[4];
  static const kvc_layer_kind kinds[4] = {KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_LINEAR_DYNAMIC_SLIDING,
                                          KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR_STATIC_SLIDING};
  for (int i = 0; i < 4; i++) {
    kvc_layer_options_init(&layers[i]);
    layers[i].kind = kinds[i];
    layers[i].window = 3;
    layers[i].max_cache_len = 16;
    layers[i].conv_kernel_size = 3;
  }
  const kvc_cache_options c = tu_custom_options(4, layers);
  REQUIRE(tw_create(&t, &c, device_under_test));
  for (int step = 0; step < 7; step++) {
    int64_t n = step == 0 ? 4 : 1;
    for (uint32_t l = 0; l < 4; l++) {
      TW_OK(TW_CONV(&t, l, 2, 4, n, KVC_DTYPE_FLOAT32, (step + (int)l) % TW_LAYOUTS, NULL));
      tw_geom g = geom(2, 1, n, 4, 4, KVC_DTYPE_FLOAT32, step % TW_LAYOUTS);
      TW_OK(TW_UPDATE(&t, l, &g, NULL));
    }
  }
  const int64_t beams[2] = {1, 0};
  TW_OK(tw_reorder(&t, beams, 2));
  tw_split_and_stack(&t, 2, 1);
  twin copy;
  if (CHECK(tw_clone(&t, &copy))) tw_destroy(&copy);
  TW_OK(tw_reset(&t));
  tw_destroy(&t);
}

/* ------------------------------------------------------------ offloading */

/* A model's forward pass: layer 0, 1, ... updated in turn (prefetch of the next layer, offload of this one). */
static void forward_steps(twin* t, uint32_t layers, int steps, int64_t batch, int64_t first_n, kvc_dtype dt) {
  for (int s = 0; s < steps; s++)
    for (uint32_t l = 0; l < layers; l++) {
      tw_geom g = geom(batch, 2, s == 0 ? first_n : 1, 8, 8, dt, (s + (int)l) % TW_LAYOUTS);
      TW_OK(TW_UPDATE(t, l, &g, NULL));
    }
}

static void offloaded_ops(twin* t, uint32_t layers, int64_t batch, int dynamic) {
  TW_OK(tw_offload(t, 1));
  TW_OK(tw_offload(t, 1)); /* already there */
  TW_OK(tw_prefetch(t, 0));
  TW_OK(tw_prefetch(t, layers - 1));
  if (dynamic) TW_OK(tw_crop(t, -1));
  const int64_t beams[2] = {1, 1};
  TW_OK(tw_reorder(t, beams, (size_t)batch));
  if (dynamic) {
    TW_OK(tw_repeat(t, 2));
    const int64_t keep[2] = {3, 0};
    TW_OK(tw_select(t, keep, 2));
    TW_OK(tw_reserve(t, 64));
  }
  tw_split_and_stack(t, batch, 1);
  twin copy;
  if (CHECK(tw_clone(t, &copy))) {
    forward_steps(&copy, layers, 2, batch, 1, KVC_DTYPE_FLOAT16);
    tw_destroy(&copy);
  }
  forward_steps(t, layers, 2, batch, 1, KVC_DTYPE_FLOAT16);
  tw_geom all = geom(batch, 2, 1, 8, 8, KVC_DTYPE_FLOAT16, TW_STRIDED);
  TW_OK(TW_UPDATE_ALL(t, layers, &all));
  TW_OK(tw_reset(t));
  forward_steps(t, layers, 2, batch, 3, KVC_DTYPE_FLOAT16);
}

static void test_offloaded(void) {
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_OFFLOADED, config(4, NULL, 0, 0, 0), 0));
  forward_steps(&t, 4, 6, 2, 5, KVC_DTYPE_FLOAT16);
  offloaded_ops(&t, 4, 2, 1);
  tw_destroy(&t);

  /* OffloadedCache without a config: lazy layers that offload as they appear. */
  REQUIRE(twin_preset(&t, KVC_PRESET_OFFLOADED, NULL, 0));
  forward_steps(&t, 3, 4, 2, 4, KVC_DTYPE_FLOAT16);
  tw_destroy(&t);
}

/*
 * A forward pass with nothing read back in between: every input is uploaded
 * first, then the layers are updated in turn, so the prefetch an update
 * leaves running meets the next update with no host synchronisation between
 * them (on the emulated device, a missing tier_wait is reported at once).
 * Everything is compared at the end.
 */
static void test_offloaded_forward_unsynchronized(void) {
  enum { LAYERS = 4, STEPS = 5 };
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_OFFLOADED, config(LAYERS, NULL, 0, 0, 0), 0));
  tw_input k[STEPS][LAYERS], v[STEPS][LAYERS];
  int ok = 1;
  for (int s = 0; s < STEPS; s++)
    for (int l = 0; l < LAYERS; l++) {
      tw_geom g = geom(2, 2, s == 0 ? 6 : 1, 16, 16, KVC_DTYPE_BFLOAT16, (s + l) % TW_LAYOUTS);
      ok &= tw_kv_make(&k[s][l], &v[s][l], &g, device_under_test);
    }
  for (int s = 0; ok && s < STEPS; s++)
    for (uint32_t l = 0; l < LAYERS; l++)
      TW_OK(TW_SAME(kvc_cache_update(t.c[TW_CPU], l, &k[s][l].t[TW_CPU], &v[s][l].t[TW_CPU], NULL, NULL),
                    kvc_cache_update(t.c[TW_DEV], l, &k[s][l].t[TW_DEV], &v[s][l].t[TW_DEV], NULL, NULL),
                    "update in a forward pass"));
  tw_check(&t, "after an unsynchronized forward pass");
  for (int s = 0; s < STEPS; s++)
    for (int l = 0; l < LAYERS; l++) {
      tw_input_free(&k[s][l]);
      tw_input_free(&v[s][l]);
    }
  tw_destroy(&t);
}

static void test_offloaded_static_and_hybrid(void) {
  twin t;
  REQUIRE(twin_config(&t, KVC_PRESET_OFFLOADED_STATIC, config(3, NULL, 0, 0, 0), 16));
  forward_steps(&t, 3, 5, 2, 4, KVC_DTYPE_FLOAT16);
  offloaded_ops(&t, 3, 2, 0);
  tw_destroy(&t);

  const kvc_layer_type types[4] = {KVC_LAYER_TYPE_CHUNKED_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION,
                                   KVC_LAYER_TYPE_CHUNKED_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION};
  REQUIRE(twin_config(&t, KVC_PRESET_OFFLOADED_HYBRID, config(4, types, 0, 3, 0), 16));
  forward_steps(&t, 4, 6, 2, 2, KVC_DTYPE_FLOAT16);
  offloaded_ops(&t, 4, 2, 0);
  tw_destroy(&t);

  /* Every layer offloaded, sliding ones too, on a dynamic config with sliding layers. */
  const kvc_layer_type mixed[2] = {KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_FULL_ATTENTION};
  const kvc_model_config mc = config(2, mixed, 3, 0, 0);
  kvc_cache_options o = options(KVC_PRESET_DYNAMIC, &mc);
  o.offload = KVC_OFFLOAD_ALL;
  REQUIRE(tw_create(&t, &o, device_under_test));
  forward_steps(&t, 2, 9, 2, 4, KVC_DTYPE_FLOAT16);
  tw_destroy(&t);

  /* Static sliding layers offloaded while their windows roll: an offload's host store comes unzeroed from
     the backend (version 5's host_alloc), so whatever the core shows of them must not depend on that. */
  const kvc_layer_type sliding[2] = {KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION};
  const kvc_model_config sc = config(2, sliding, 4, 0, 0);
  o = options(KVC_PRESET_SLIDING_WINDOW, &sc);
  o.max_cache_len = 16;
  o.offload = KVC_OFFLOAD_ALL;
  REQUIRE(tw_create(&t, &o, device_under_test));
  forward_steps(&t, 2, 9, 1, 2, KVC_DTYPE_FLOAT16);
  tw_destroy(&t);
}

/* ------------------------------------------------------ from tensors */

static void test_create_from_tensors(void) {
  for (int preset = 0; preset < 2; preset++) {
    const kvc_model_config cfg = config(3, NULL, 0, 0, 0);
    kvc_cache_options o = options(KVC_PRESET_DYNAMIC, preset ? &cfg : NULL);
    tw_input k[3], v[3];
    kvc_tensor kt[2][3], vt[2][3];
    int ok = 1;
    for (int i = 0; i < 3; i++) {
      tw_geom g = geom(2, 1 + i, 3 + i, 8, 4, KVC_DTYPE_BFLOAT16, i + 1);
      ok &= tw_kv_make(&k[i], &v[i], &g, device_under_test);
      for (int s = 0; s < 2; s++) {
        kt[s][i] = k[i].t[s];
        vt[s][i] = v[i].t[s];
      }
    }
    twin t;
    memset(&t, 0, sizeof t);
    t.device = device_under_test;
    if (CHECK(ok)) {
      kvc_cache_options oc = o, od = o;
      od.device.device_type = drt_device_type();
      od.device.device_id = device_under_test;
      if (TW_SAME(kvc_cache_create_from_tensors(&oc, 3, kt[TW_CPU], vt[TW_CPU], &t.c[TW_CPU]),
                  kvc_cache_create_from_tensors(&od, 3, kt[TW_DEV], vt[TW_DEV], &t.c[TW_DEV]),
                  "create_from_tensors")) {
        tw_check(&t, "created from tensors");
        tw_bind(&t);
        for (int s = 0; s < 3; s++) {
          tw_geom per[3] = {geom(2, 1, 1, 8, 4, KVC_DTYPE_BFLOAT16, s), geom(2, 2, 1, 8, 4, KVC_DTYPE_BFLOAT16, s),
                            geom(2, 3, 1, 8, 4, KVC_DTYPE_BFLOAT16, s)};
          TW_OK(TW_UPDATE_ALL_EACH(&t, 3, per));
        }
      }
    }
    for (int i = 0; i < 3; i++) {
      tw_input_free(&k[i]);
      tw_input_free(&v[i]);
    }
    tw_destroy(&t);
  }
}

/* ----------------------------------------------- sink and the CPU-only parts */

/* SinkCache without RoPE is copies only, so it runs on the device like any other kind. */
static void test_sink_without_rope(void) {
  const kvc_model_config cfg = config(2, NULL, 0, 0, 0);
  const kvc_cache_options o = sink_options(&cfg, 6, 2);
  twin t;
  REQUIRE(tw_create(&t, &o, device_under_test));
  tw_geom prefill = geom(2, 2, 4, 8, 8, KVC_DTYPE_FLOAT16, TW_STRIDED);
  TW_OK(TW_UPDATE_ALL(&t, 2, &prefill));
  for (int step = 0; step < 14; step++) {
    tw_geom g = geom(2, 2, step == 7 ? 3 : 1, 8, 8, KVC_DTYPE_FLOAT16, step % TW_LAYOUTS);
    TW_OK(TW_UPDATE_ALL(&t, 2, &g));
  }
  const int64_t beams[2] = {1, 0};
  TW_OK(tw_reorder(&t, beams, 2));
  twin copy;
  if (CHECK(tw_clone(&t, &copy))) tw_destroy(&copy);
  tw_destroy(&t);
}

/* ------------------------------------------------------ sink with RoPE */

/* RoPE cos/sin for one update, the same random bytes on both sides, and the options of each side holding them. */
typedef struct tw_rope {
  tw_input cos, sin;
  kvc_update_options o[2];
} tw_rope;

/* cos/sin of [seq, dim] (ndim 2: the whole table) or [batch, seq, dim] (ndim 3: rows appended to it). */
static int rope_make(tw_rope* r, kvc_dtype dt, int ndim, int64_t batch, int64_t seq, int64_t dim, int layout,
                     int64_t partial) {
  int64_t shape[3] = {batch, seq, dim};
  const int64_t* sh = ndim == 3 ? shape : shape + 1;
  int ok = tw_input_make(&r->cos, dt, ndim, sh, layout, device_under_test);
  ok &= tw_input_make(&r->sin, dt, ndim, sh, (layout + 1) % TW_LAYOUTS, device_under_test);
  for (int side = 0; side < 2; side++) {
    kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
    o.rope_cos = &r->cos.t[side];
    o.rope_sin = &r->sin.t[side];
    o.partial_rotation_size = partial;
    r->o[side] = o;
  }
  return ok;
}

static void rope_free(tw_rope* r) {
  tw_input_free(&r->cos);
  tw_input_free(&r->sin);
}

/* update_all of `layers` layers with RoPE tables of `cos_dt`: both caches alike (1 when both succeeded). */
static int rope_step(twin* t, uint32_t layers, const tw_geom* g, kvc_dtype cos_dt, int ndim, int64_t table_rows,
                     int64_t partial) {
  tw_rope r;
  int both = 0;
  if (rope_make(&r, cos_dt, ndim, g->b, table_rows, partial ? partial : g->dk, g->layout, partial))
    both = TW_UPDATE_ALL_SIDES(t, layers, g, r.o);
  rope_free(&r);
  return both;
}

/*
 * A first sink update with RoPE on a device cache: every device backend
 * re-rotates sink keys (backends/gpu/gpu_rope.cpp; the emulated device with
 * the same kernels' arithmetic), so the update must go through. 0 (after a
 * failed check) when it does not, so that the long run is not attempted.
 */
static int device_rerotates_sink_keys(void) {
  const kvc_model_config cfg = config(1, NULL, 0, 0, 0);
  kvc_cache_options o = sink_options(&cfg, 4, 1);
  o.device.device_type = drt_device_type();
  o.device.device_id = device_under_test;
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return 0;
  tw_input k, v;
  tw_rope r;
  tw_geom g = geom(1, 2, 3, 8, 8, KVC_DTYPE_FLOAT16, TW_COMPACT);
  int has = 0;
  if (CHECK(tw_kv_make(&k, &v, &g, device_under_test) & rope_make(&r, KVC_DTYPE_FLOAT16, 2, 1, 8, 8, TW_COMPACT, 0)))
    has = CHECK_OK(kvc_cache_update(c, 0, &k.t[TW_DEV], &v.t[TW_DEV], &r.o[TW_DEV], NULL));
  rope_free(&r);
  tw_input_free(&k);
  tw_input_free(&v);
  kvc_cache_destroy(c);
  return has;
}

/*
 * SinkCache with RoPE on the device: the cos/sin table recorded from layer
 * 0's updates (3-D rows appended up to the window, then a whole 2-D table),
 * kept keys re-rotated at every shift, re-rotations of several sizes,
 * partial rotation, refusals that change nothing, reorder, clone, split and
 * stack and reset, which forgets the table. Key dtype and cos/sin dtype vary
 * independently; every input is random bytes, so NaNs and infinities go
 * through the arithmetic too.
 */
static void sink_rope_run(kvc_dtype key_dt, kvc_dtype cos_dt, int64_t partial) {
  const kvc_model_config cfg = config(3, NULL, 0, 0, 0);
  const kvc_cache_options o = sink_options(&cfg, 7, 2);
  twin t;
  REQUIRE(tw_create(&t, &o, device_under_test));
  const int64_t B = 2, dk = partial ? 12 : 8;
  int64_t pos = 0;
  tw_geom prefill = geom(B, 2, 4, dk, 8, key_dt, TW_STRIDED);
  TW_OK(rope_step(&t, 3, &prefill, cos_dt, 3, 4, partial));
  pos += 4;
  /* Decode: the table reaches the window at the first shift; then shifts of one, two and three tokens. */
  static const int64_t news[12] = {1, 1, 1, 2, 1, 3, 1, 1, 2, 2, 1, 3};
  for (int step = 0; step < 12; step++) {
    tw_geom g = geom(B, 2, news[step], dk, 8, key_dt, step % TW_LAYOUTS);
    TW_OK(rope_step(&t, 3, &g, cos_dt, 3, news[step], partial));
    pos += news[step];
  }
  /* Too many new tokens for a shift with RoPE (window - sinks - n < 1): refused on both, nothing changed. */
  tw_geom big = geom(B, 2, 5, dk, 8, key_dt, TW_COMPACT);
  TW_REFUSED(rope_step(&t, 3, &big, cos_dt, 3, 5, partial));
  /* A whole 2-D table replaces the recorded one; one layer at a time, the record layer first. */
  for (uint32_t l = 0; l < 3; l++) {
    tw_rope r;
    tw_geom g = geom(B, 2, 1, dk, 8, key_dt, (int)l);
    if (rope_make(&r, cos_dt, 2, 1, 16, partial ? partial : dk, TW_PADDED, partial))
      TW_OK(TW_UPDATE_SIDES(&t, l, &g, r.o));
    rope_free(&r);
  }
  const int64_t beams[2] = {1, 0};
  TW_OK(tw_reorder(&t, beams, 2));
  twin copy;
  if (CHECK(tw_clone(&t, &copy))) {
    /* The clone carries the table and the re-rotations: both go on separately. */
    tw_geom g = geom(B, 2, 2, dk, 8, key_dt, TW_REVERSED);
    TW_OK(rope_step(&copy, 3, &g, cos_dt, 3, 2, partial));
    TW_OK(rope_step(&t, 3, &g, cos_dt, 3, 2, partial));
    tw_destroy(&copy);
  }
  tw_split_and_stack(&t, B, 1);
  tw_geom g = geom(B, 2, 1, dk, 8, key_dt, TW_OFFSET);
  TW_OK(rope_step(&t, 3, &g, cos_dt, 3, 1, partial));
  /* After a reset the table is gone: a shift before it is recorded again is refused on both. */
  TW_OK(tw_reset(&t));
  tw_geom fill = geom(B, 2, 6, dk, 8, key_dt, TW_COMPACT);
  TW_OK(TW_UPDATE_ALL(&t, 3, &fill));
  TW_REFUSED(rope_step(&t, 3, &g, cos_dt, 3, 1, partial));
  tw_destroy(&t);
}

static void test_sink_with_rope(void) {
  if (!device_rerotates_sink_keys()) return; /* failed: a sink update with RoPE did not run on the device */
  sink_rope_run(KVC_DTYPE_FLOAT16, KVC_DTYPE_FLOAT32, 0);
  sink_rope_run(KVC_DTYPE_BFLOAT16, KVC_DTYPE_BFLOAT16, 0);
  sink_rope_run(KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, 0);
  sink_rope_run(KVC_DTYPE_FLOAT16, KVC_DTYPE_FLOAT16, 6); /* partial rotation: 6 of 12 key channels */
}

/* ------------------------------------------------------------ quantized */

static int device_quantizes(kvc_layer_kind kind);

/* Batch operations, clone, split and stack, crop and reset on a twin of `layers` layers holding a batch of 2. */
static void quantized_ops(twin* t, uint32_t layers, kvc_dtype dt) {
  const int64_t beams[2] = {1, 0};
  TW_OK(tw_reorder(t, beams, 2));
  const int64_t keep[2] = {1, 1};
  TW_OK(tw_select(t, keep, 2));
  TW_OK(tw_repeat(t, 2)); /* batch 4 */
  tw_geom step = geom(4, 2, 1, 16, 16, dt, TW_STRIDED);
  for (int i = 0; i < 5; i++) TW_OK(TW_UPDATE_ALL(t, layers, &step));
  twin copy;
  if (CHECK(tw_clone(t, &copy))) {
    TW_OK(TW_UPDATE_ALL(&copy, layers, &step));
    tw_check(t, "the original after its clone moved on");
    tw_destroy(&copy);
  }
  tw_split_and_stack(t, 4, 1);
  tw_split_and_stack(t, 4, 2);
  TW_OK(tw_crop(t, -5)); /* into the quantized history of the incremental and compact modes */
  for (int i = 0; i < 3; i++) TW_OK(TW_UPDATE_ALL(t, layers, &step));
  TW_OK(tw_crop(t, -1));
  TW_OK(tw_reset(t));
  tw_geom again = geom(4, 2, 6, 16, 16, dt, TW_PADDED);
  TW_OK(TW_UPDATE_ALL(t, layers, &again));
  TW_OK(TW_UPDATE_ALL(t, layers, &step));
}

/*
 * Every mode with both quantizers (keys and values on their two axes, so
 * that per-token and per-channel groups both run) and an FP8 layer in one
 * cache (tw_quantized_layers): prefill, decode through several
 * quantizations, then every operation.
 */
static void test_quantized(void) {
  if (!device_quantizes(KVC_LAYER_QUANTIZED) || !device_quantizes(KVC_LAYER_QUANTIZED_FP8)) return; /* failed */
  tw_nan_equal = 1; /* the inputs are random bytes: NaNs abound */
  const kvc_quant_mode modes[3] = {KVC_QUANT_MODE_INCREMENTAL, KVC_QUANT_MODE_TRANSFORMERS, KVC_QUANT_MODE_COMPACT};
  for (int m = 0; m < 3; m++) {
    kvc_quant_options q[2];
    kvc_layer_options layers[3];
    tw_quantized_layers(modes[m], 3, q, layers);
    const kvc_cache_options o = tu_custom_options(3, layers);
    const kvc_dtype dt = dtypes[m];
    printf("  mode %d, %s\n", (int)modes[m], dt == KVC_DTYPE_FLOAT32 ? "float32" : dt == KVC_DTYPE_FLOAT16 ? "float16" : "bfloat16");
    twin t;
    REQUIRE(tw_create(&t, &o, device_under_test));
    tw_geom prefill = geom(2, 2, 6, 16, 16, dt, TW_STRIDED);
    TW_OK(TW_UPDATE_ALL(&t, 3, &prefill));
    for (int step = 0; step < 12; step++) {
      tw_geom g = geom(2, 2, step == 5 ? 3 : 1, 16, 16, dt, step % TW_LAYOUTS);
      TW_OK(TW_UPDATE_ALL(&t, 3, &g));
    }
    tw_geom one = geom(2, 2, 2, 16, 16, dt, TW_REVERSED);
    TW_OK(TW_UPDATE(&t, 1, &one, NULL)); /* a per-layer update */
    TW_OK(TW_UPDATE(&t, 0, &one, NULL));
    TW_OK(TW_UPDATE(&t, 2, &one, NULL));
    quantized_ops(&t, 3, dt);
    tw_destroy(&t);
  }
  tw_nan_equal = 0;
}

/* An error that says what is wrong: UNSUPPORTED, naming the CPU as where it runs. */
static void check_cpu_only_error(kvc_error* e, const char* what) {
  char label[160];
  snprintf(label, sizeof label, "%s on a device: a clear UNSUPPORTED error", what);
  int ok = e && kvc_error_code(e) == KVC_ERROR_UNSUPPORTED && strstr(kvc_error_message(e), "CPU");
  if (!tu_report(ok, __FILE__, __LINE__, label))
    fprintf(TU_LOG, "  got %s: %s\n", e ? kvc_code_name(kvc_error_code(e)) : "success", e ? kvc_error_message(e) : "");
  else
    printf("  %s on a device: %s\n", what, kvc_error_message(e));
  kvc_error_destroy(e);
}

static kvc_cache* device_cache(kvc_cache_options* o) {
  o->device.device_type = drt_device_type();
  o->device.device_id = device_under_test;
  kvc_cache* c = NULL;
  kvc_error* e = kvc_cache_create(o, &c);
  if (e) {
    check_cpu_only_error(e, "creating the cache"); /* refusing at creation is as clear */
    return NULL;
  }
  return c;
}

/*
 * Whether the device's backend quantizes layers of `kind`: an update of a
 * one-layer cache succeeds, or is refused with a clear UNSUPPORTED error and
 * changes nothing. Every backend must quantize: the emulated device and the
 * CUDA and HIP plugins all have the quantizer entries (a refusal still
 * shows its message before failing the test).
 */
static int device_quantizes(kvc_layer_kind kind) {
  tw_input k, v;
  tw_geom g = geom(1, 2, 3, 64, 64, KVC_DTYPE_FLOAT16, TW_COMPACT);
  if (!tw_kv_make(&k, &v, &g, device_under_test)) return 0;
  kvc_layer_options layer = KVC_LAYER_OPTIONS_INIT;
  layer.kind = kind;
  kvc_cache_options o = tu_custom_options(1, &layer);
  int works = 0;
  kvc_cache* c = device_cache(&o);
  if (c) {
    kvc_error* e = kvc_cache_update(c, 0, &k.t[TW_DEV], &v.t[TW_DEV], NULL, NULL);
    works = e == NULL;
    int64_t len = -1;
    if (!works) {
      check_cpu_only_error(e, kind == KVC_LAYER_QUANTIZED_FP8 ? "an fp8 quantized update" : "a quantized update");
      CHECK_OK(kvc_cache_seq_length(c, 0, &len));
      CHECK_EQ_I64(len, 0); /* the refused update changed nothing */
    }
  }
  kvc_cache_destroy(c);
  tw_input_free(&k);
  tw_input_free(&v);
  CHECK(works); /* every backend's table has the quantizer entries */
  return works;
}

/* ------------------------------------------------------------ the runs */

static void run_all(void) {
  TU_RUN(test_dynamic_lazy);
  TU_RUN(test_dtypes_and_layouts);
  TU_RUN(test_dynamic_sliding_and_chunked);
  TU_RUN(test_static);
  TU_RUN(test_static_cache_position);
  TU_RUN(test_static_sliding_presets);
  TU_RUN(test_encoder_decoder);
  TU_RUN(test_mamba);
  TU_RUN(test_mamba_legacy_roll);
  TU_RUN(test_linear_hybrids);
  TU_RUN(test_offloaded);
  TU_RUN(test_offloaded_forward_unsynchronized);
  TU_RUN(test_offloaded_static_and_hybrid);
  TU_RUN(test_create_from_tensors);
  TU_RUN(test_sink_without_rope);
  TU_RUN(test_sink_with_rope);
  TU_RUN(test_quantized);
}

int main(void) {
  void* stream = tw_start_on_a_stream("test_gpu_caches");
  printf("-- device 0, caches bound to a stream of the test\n");
  run_all();
  printf("-- device 0, caches on the default stream\n");
  tw_stream = NULL;
  TU_RUN(test_dynamic_lazy);
  TU_RUN(test_offloaded);
  drt_stream_destroy(0, stream);
  if (drt_device_count() >= 2) {
    /* KVC_GPU_TESTS_QUICK: CTest sets it where simulated grids run under a sanitizer (the fake runtime in
       `make sanitize`), where device 1 repeats two runs, not all: device 0 has run every path already. */
    const char* quick = getenv("KVC_GPU_TESTS_QUICK");
    device_under_test = 1;
    tw_stream = drt_stream_create(1);
    if (!CHECK(tw_stream != NULL)) return tu_finish();
    if (quick && *quick && strcmp(quick, "0") != 0) {
      printf("-- device 1, caches bound to a stream of that device: dynamic and offloaded caches only "
             "(KVC_GPU_TESTS_QUICK=%s)\n", quick);
      TU_RUN(test_dynamic_lazy);
      TU_RUN(test_offloaded);
    } else {
      printf("-- device 1, caches bound to a stream of that device\n");
      run_all();
    }
    drt_stream_destroy(1, tw_stream);
  } else {
    printf("-- a second device: SKIPPED: this machine has one device\n");
  }
  return tu_finish();
}
