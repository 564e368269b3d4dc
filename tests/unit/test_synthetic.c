/*
 * transformers' SyntheticCacheTest (one layer, one head, head_dim 1, window
 * 4, max_cache_len 4) and CacheTest.test_static_cache_mha_mqa_gqa, built
 * through the presets the way transformers builds them from a config.
 */
#include "test_util.h"

static kvc_cache* preset_cache(kvc_preset preset, uint32_t layers, const kvc_layer_type* types,
                               int64_t sliding_window, int64_t chunk, int64_t max_cache_len) {
  kvc_model_config cfg = tu_config(layers, types, sliding_window, chunk);
  const kvc_cache_options defaults = KVC_CACHE_OPTIONS_INIT;
  return tu_preset_cache(preset, &cfg, max_cache_len, defaults.offload);
}

static const kvc_layer_type FULL[1] = {KVC_LAYER_TYPE_FULL_ATTENTION};
static const kvc_layer_type SLIDING[1] = {KVC_LAYER_TYPE_SLIDING_ATTENTION};
static const kvc_layer_type CHUNKED[1] = {KVC_LAYER_TYPE_CHUNKED_ATTENTION};

#define UPD(c, layer, out, ...) \
  REQUIRE_OK(tu_update_list((c), (layer), 1, 1, 1, 1, TU_LIST(__VA_ARGS__), TU_COUNT(__VA_ARGS__), NULL, (out)))

static void test_static_cache_out_of_bounds(void) {
  kvc_cache* c = preset_cache(KVC_PRESET_STATIC, 1, FULL, 4, 0, 4);
  REQUIRE(c != NULL);
  UPD(c, 0, NULL, 1, 2, 3, 4);
  CHECK_ERR(tu_update_list(c, 0, 1, 1, 1, 1, TU_LIST(5), 1, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  kvc_cache_destroy(c);
}

static void test_static_cache(void) {
  kvc_cache* c = preset_cache(KVC_PRESET_STATIC, 1, FULL, 4, 0, 4);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_info(c, 0).kind, KVC_LAYER_STATIC);
  kvc_kv out;
  UPD(c, 0, &out, 1, 2);
  CHECK_KV_SEQ(out, 1, 2, -1, -1);
  UPD(c, 0, &out, 3);
  CHECK_KV_SEQ(out, 1, 2, 3, -1);
  CHECK_LAYER_SEQ(c, 0, 1, 2, 3, -1);
  UPD(c, 0, &out, 4);
  CHECK_KV_SEQ(out, 1, 2, 3, 4);
  kvc_cache_destroy(c);
}

/* Both ways transformers reaches an all-sliding static cache. */
static kvc_cache* sliding_cache(int via_sliding_preset) {
  if (via_sliding_preset) return preset_cache(KVC_PRESET_SLIDING_WINDOW, 1, NULL, 4, 0, 4);
  return preset_cache(KVC_PRESET_STATIC, 1, SLIDING, 4, 0, 4);
}

static void test_sliding_window_cache(void) {
  for (int via = 0; via < 2; via++) {
    kvc_cache* c = sliding_cache(via);
    REQUIRE(c != NULL);
    CHECK_EQ_I64(tu_info(c, 0).kind, KVC_LAYER_STATIC_SLIDING);
    kvc_kv out;
    UPD(c, 0, &out, 1, 2);
    UPD(c, 0, &out, 3);
    CHECK_KV_SEQ(out, 1, 2, 3, -1);
    CHECK_LAYER_SEQ(c, 0, 1, 2, 3, -1);
    kvc_cache_destroy(c);

    c = sliding_cache(via);
    REQUIRE(c != NULL);
    UPD(c, 0, &out, 1, 2, 3, 4);
    UPD(c, 0, &out, 5);
    CHECK_KV_SEQ(out, 2, 3, 4, 5);
    CHECK_LAYER_SEQ(c, 0, 2, 3, 4, 5);
    kvc_cache_destroy(c);

    c = sliding_cache(via);
    REQUIRE(c != NULL);
    UPD(c, 0, &out, 1, 2, 3, 4, 5, 6);
    CHECK_LAYER_SEQ(c, 0, 3, 4, 5, 6);
    kvc_cache_destroy(c);
  }
}

/* Layers of a DynamicCache append independently, in any interleaving. */
static void test_dynamic_cache(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  for (int64_t t = 1; t <= 4; t++) {
    REQUIRE_OK(tu_update_list(c, 0, 1, 1, 1, 1, TU_LIST(t), 1, NULL, NULL));
    REQUIRE_OK(tu_update_list(c, 1, 1, 1, 1, 1, TU_LIST(10 * t), 1, NULL, NULL));
  }
  CHECK_EQ_I64(kvc_cache_num_layers(c), 2);
  CHECK_LAYER_SEQ(c, 0, 1, 2, 3, 4);
  CHECK_LAYER_SEQ(c, 1, 10, 20, 30, 40);
  kvc_cache_destroy(c);
}

static void test_dynamic_cache_batch_select_indices(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_list(c, 0, 3, 1, 1, 1, TU_LIST(1, 2), 2, NULL, NULL));
  const int64_t idx[2] = {0, 2};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 2));
  kvc_kv st = tu_view(c, 0);
  CHECK_SHAPE(st.key, 2, 1, 2, 1);
  CHECK_TOKENS_ROWS(st, TU_LIST(1, 2), 2, idx);
  kvc_cache_destroy(c);
}

/* The updates both hybrid tests start with: layer 0 full with M = 4, layer 1 a window or chunk of 2 (a failed
 * update returns early; the caller's checks then fail too). */
static void hybrid_first_steps(kvc_cache* c) {
  kvc_kv out;
  UPD(c, 0, &out, 1, 2, 3);
  CHECK_KV_SEQ(out, 1, 2, 3, -1);
  CHECK_LAYER_SEQ(c, 0, 1, 2, 3, -1);
  UPD(c, 1, &out, 10, 20, 30);
  CHECK_KV_SEQ(out, 10, 20, 30);
  CHECK_LAYER_SEQ(c, 1, 20, 30);
  UPD(c, 0, &out, 5);
  CHECK_KV_SEQ(out, 1, 2, 3, 5);
  UPD(c, 1, &out, 50);
  CHECK_KV_SEQ(out, 30, 50);
}

/* [full, sliding(W=2)], M = 4; through StaticCache and through HybridCache. */
static void test_hybrid_cache(void) {
  static const kvc_layer_type types[2] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION};
  for (int via_hybrid = 0; via_hybrid < 2; via_hybrid++) {
    kvc_cache* c = preset_cache(via_hybrid ? KVC_PRESET_HYBRID : KVC_PRESET_STATIC, 2, types, 2, 0, 4);
    REQUIRE(c != NULL);
    CHECK_EQ_I64(tu_info(c, 0).kind, KVC_LAYER_STATIC);
    CHECK_EQ_I64(tu_info(c, 1).kind, KVC_LAYER_STATIC_SLIDING);
    hybrid_first_steps(c);
    CHECK_LAYER_SEQ(c, 1, 30, 50);
    kvc_cache_destroy(c);
  }
}

/* [full, chunked(2)], M = 4; through StaticCache and through HybridChunkedCache. */
static void test_hybrid_chunked_cache(void) {
  static const kvc_layer_type types[2] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_CHUNKED_ATTENTION};
  for (int via_hybrid = 0; via_hybrid < 2; via_hybrid++) {
    kvc_cache* c = preset_cache(via_hybrid ? KVC_PRESET_HYBRID_CHUNKED : KVC_PRESET_STATIC, 2, types, 0, 2, 4);
    REQUIRE(c != NULL);
    kvc_layer_info li = tu_info(c, 1);
    CHECK_EQ_I64(li.kind, KVC_LAYER_STATIC_CHUNKED);
    CHECK_EQ_I64(li.window, 2);
    CHECK_EQ_I64(li.is_chunked, 1);
    hybrid_first_steps(c);
    kvc_kv out;
    UPD(c, 1, &out, 60, 70);
    CHECK_KV_SEQ(out, 50, 60, 70);
    CHECK_LAYER_SEQ(c, 1, 60, 70);
    CHECK_EQ_I64(tu_seq(c, 1), 6);
    kvc_cache_destroy(c);
  }
}

/* One chunked layer with M = 3 (the chunk size 3 or larger keeps 3 slots). */
static void test_hybrid_chunked_cache_extra_cases(void) {
  const int64_t chunks[2] = {3, 4};
  for (int i = 0; i < 2; i++) {
    kvc_cache* c = preset_cache(KVC_PRESET_STATIC, 1, CHUNKED, 0, chunks[i], 3);
    REQUIRE(c != NULL);
    CHECK_EQ_I64(tu_info(c, 0).capacity, 3);
    kvc_kv out;
    UPD(c, 0, &out, 10, 20);
    CHECK_KV_SEQ(out, 10, 20, -1);
    CHECK_LAYER_SEQ(c, 0, 10, 20, -1);
    UPD(c, 0, &out, 30, 40);
    CHECK_KV_SEQ(out, 10, 20, 30, 40);
    CHECK_LAYER_SEQ(c, 0, 20, 30, 40);
    kvc_cache_destroy(c);
  }
}

/* Static buffers are [1, num_kv_heads, 10, 128] for MHA (32), GQA (4) and MQA (1). */
static void test_static_cache_mha_mqa_gqa(void) {
  const int64_t kv_heads[3] = {32, 4, 1};
  for (int i = 0; i < 3; i++) {
    kvc_cache* c = preset_cache(KVC_PRESET_STATIC, 1, NULL, 0, 0, 10);
    REQUIRE(c != NULL);
    kvc_kv out;
    REQUIRE_OK(tu_update_tokens(c, 0, 1, kv_heads[i], 1, 128, 128, 0, NULL, &out));
    CHECK_SHAPE(out.key, 1, kv_heads[i], 10, 128);
    CHECK_SHAPE(out.value, 1, kv_heads[i], 10, 128);
    CHECK_TOKENS(out, TU_LIST(0, -1, -1, -1, -1, -1, -1, -1, -1, -1), 10);
    kvc_layer_info li = tu_info(c, 0);
    CHECK_EQ_I64(li.num_kv_heads, kv_heads[i]);
    CHECK_EQ_I64(li.max_cache_len, 10);
    kvc_memory_info m = tu_memory(c);
    CHECK_EQ_U64(m.bytes_used, (uint64_t)(kv_heads[i] * 10 * 128 * 2 * 4));
    kvc_cache_destroy(c);
  }
}

int main(void) {
  TU_RUN(test_static_cache_out_of_bounds);
  TU_RUN(test_static_cache);
  TU_RUN(test_sliding_window_cache);
  TU_RUN(test_dynamic_cache);
  TU_RUN(test_dynamic_cache_batch_select_indices);
  TU_RUN(test_hybrid_cache);
  TU_RUN(test_hybrid_chunked_cache);
  TU_RUN(test_hybrid_chunked_cache_extra_cases);
  TU_RUN(test_static_cache_mha_mqa_gqa);
  return tu_finish();
}
