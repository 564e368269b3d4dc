/*
 * The presets: the layer lists kvc_cache_create builds from a model config,
 * as transformers' DynamicCache(config), StaticCache(config, max_cache_len),
 * SlidingWindowCache, HybridCache and HybridChunkedCache do (docs/semantics.md,
 * 'Layer types and presets'), and KVC_PRESET_CUSTOM.
 */
#include "test_util.h"

#define F KVC_LAYER_TYPE_FULL_ATTENTION
#define S KVC_LAYER_TYPE_SLIDING_ATTENTION
#define C KVC_LAYER_TYPE_CHUNKED_ATTENTION

typedef struct expect {
  kvc_layer_kind kind;
  int64_t window;
} expect;

typedef struct cfg_case {
  uint32_t layers;
  const kvc_layer_type* types;
  int64_t sliding_window, chunk;
  uint32_t shared, pattern;
} cfg_case;

static kvc_error* create(kvc_preset preset, const cfg_case* k, int64_t max_cache_len, kvc_cache** out) {
  kvc_model_config cfg = tu_config(k->layers, k->types, k->sliding_window, k->chunk);
  cfg.num_kv_shared_layers = k->shared;
  cfg.sliding_window_pattern = k->pattern;
  kvc_cache_options o = tu_preset_options(preset, &cfg, max_cache_len, KVC_OFFLOAD_DEFAULT);
  return kvc_cache_create(&o, out);
}

/* The preset builds exactly these layers, each with the right window and max_cache_len. */
static void expect_layers(int line, kvc_preset preset, cfg_case k, int64_t max_cache_len, const expect* want,
                          uint32_t n) {
  kvc_cache* c = NULL;
  if (!tu_ok(create(preset, &k, max_cache_len, &c), __FILE__, line, "kvc_cache_create")) return;
  tu_check_i64(kvc_cache_num_layers(c), n, __FILE__, line, "num_layers", "expected");
  for (uint32_t i = 0; i < n && i < kvc_cache_num_layers(c); i++) {
    kvc_layer_info li = tu_info(c, i);
    int stat = want[i].kind >= KVC_LAYER_STATIC;
    int ok = tu_check_i64(li.kind, want[i].kind, __FILE__, line, "layer kind", "expected");
    ok &= tu_check_i64(li.window, want[i].window, __FILE__, line, "layer window", "expected");
    ok &= tu_check_i64(li.max_cache_len, stat ? max_cache_len : 0, __FILE__, line, "layer max_cache_len", "expected");
    ok &= tu_check_i64(li.is_initialized, 0, __FILE__, line, "layer is_initialized", "0");
    if (!ok) fprintf(stderr, "    (layer %u)\n", i);
  }
  /* the layer list is fixed: no lazy growth beyond it */
  kvc_error* e = tu_update_tokens(c, n, 1, 1, 1, 2, 2, 0, NULL, NULL);
  tu_err(e, KVC_ERROR_OUT_OF_RANGE, __FILE__, line, "update beyond the preset's layers");
  kvc_cache_destroy(c);
}

#define EXPECT(preset, cfg, max_cache_len, ...)                                                         \
  expect_layers(__LINE__, preset, cfg, max_cache_len, (const expect[]){__VA_ARGS__},                  \
                (uint32_t)(sizeof((const expect[]){__VA_ARGS__}) / sizeof(expect)))

#define DYN {KVC_LAYER_DYNAMIC, 0}
#define DSL(w) {KVC_LAYER_DYNAMIC_SLIDING, w}
#define DCH(w) {KVC_LAYER_DYNAMIC_CHUNKED, w}
#define STA {KVC_LAYER_STATIC, 0}
#define SSL(w) {KVC_LAYER_STATIC_SLIDING, w}
#define SCH(w) {KVC_LAYER_STATIC_CHUNKED, w}

static void test_dynamic_from_config(void) {
  static const kvc_layer_type t1[4] = {F, S, F, S};
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){4, t1, 5, 0, 0, 0}), 0, DYN, DSL(5), DYN, DSL(5));
  static const kvc_layer_type t2[2] = {C, F};
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){2, t2, 0, 8, 0, 0}), 0, DCH(8), DYN);
  /* derived types: sliding if sliding_window, else chunked if a chunk size, else full */
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){3, NULL, 6, 0, 0, 0}), 0, DSL(6), DSL(6), DSL(6));
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){2, NULL, 0, 7, 0, 0}), 0, DCH(7), DCH(7));
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){2, NULL, 6, 7, 0, 0}), 0, DSL(6), DSL(6));
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){3, NULL, 0, 0, 0, 0}), 0, DYN, DYN, DYN);
  /* the last num_kv_shared_layers layers share KV and get no cache */
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){6, NULL, 0, 0, 2, 0}), 0, DYN, DYN, DYN, DYN);
  static const kvc_layer_type t3[5] = {S, F, S, F, S};
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){5, t3, 3, 0, 2, 0}), 0, DSL(3), DYN, DSL(3));
  /* sliding layers take sliding_window, chunked layers attention_chunk_size */
  static const kvc_layer_type t4[3] = {S, C, F};
  EXPECT(KVC_PRESET_DYNAMIC, ((cfg_case){3, t4, 4, 9, 0, 0}), 0, DSL(4), DCH(9), DYN);
}

static void test_static_from_config(void) {
  static const kvc_layer_type t1[3] = {F, S, C};
  EXPECT(KVC_PRESET_STATIC, ((cfg_case){3, t1, 4, 6, 0, 0}), 10, STA, SSL(4), SCH(6));
  EXPECT(KVC_PRESET_STATIC, ((cfg_case){2, NULL, 0, 0, 0, 0}), 10, STA, STA);
  EXPECT(KVC_PRESET_STATIC, ((cfg_case){2, NULL, 5, 0, 0, 0}), 10, SSL(5), SSL(5));
  EXPECT(KVC_PRESET_STATIC, ((cfg_case){2, NULL, 0, 3, 0, 0}), 10, SCH(3), SCH(3));
  static const kvc_layer_type t2[4] = {F, S, C, S};
  EXPECT(KVC_PRESET_STATIC, ((cfg_case){4, t2, 4, 6, 1, 0}), 10, STA, SSL(4), SCH(6));
  /* capacity: min(window, max_cache_len) */
  kvc_cache* c = NULL;
  cfg_case k = {3, t1, 40, 2, 0, 0};
  REQUIRE_OK(create(KVC_PRESET_STATIC, &k, 10, &c));
  CHECK_EQ_I64(tu_info(c, 0).capacity, 10);
  CHECK_EQ_I64(tu_info(c, 1).capacity, 10);
  CHECK_EQ_I64(tu_info(c, 2).capacity, 2);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 10);
  kvc_cache_destroy(c);
  /* StaticCache needs max_cache_len */
  c = NULL;
  CHECK_ERR(create(KVC_PRESET_STATIC, &k, 0, &c), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(c == NULL);
}

static void test_sliding_window_preset(void) {
  EXPECT(KVC_PRESET_SLIDING_WINDOW, ((cfg_case){3, NULL, 4, 0, 0, 0}), 8, SSL(4), SSL(4), SSL(4));
  kvc_cache* c = NULL;
  cfg_case k = {3, NULL, 0, 0, 0, 0};
  CHECK_ERR(create(KVC_PRESET_SLIDING_WINDOW, &k, 8, &c), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(c == NULL);
}

static void test_hybrid_preset(void) {
  /* default pattern 2: every second layer is full attention */
  EXPECT(KVC_PRESET_HYBRID, ((cfg_case){5, NULL, 4, 0, 0, 0}), 16, SSL(4), STA, SSL(4), STA, SSL(4));
  EXPECT(KVC_PRESET_HYBRID, ((cfg_case){6, NULL, 4, 0, 0, 3}), 16, SSL(4), SSL(4), STA, SSL(4), SSL(4), STA);
  EXPECT(KVC_PRESET_HYBRID, ((cfg_case){2, NULL, 4, 0, 0, 1}), 16, STA, STA);
  /* layer_types win over the pattern */
  static const kvc_layer_type t[3] = {F, F, S};
  EXPECT(KVC_PRESET_HYBRID, ((cfg_case){3, t, 4, 0, 0, 0}), 16, STA, STA, SSL(4));
  kvc_cache* c = NULL;
  cfg_case k = {2, NULL, 0, 0, 0, 0};
  CHECK_ERR(create(KVC_PRESET_HYBRID, &k, 16, &c), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(c == NULL);
}

static void test_hybrid_chunked_preset(void) {
  EXPECT(KVC_PRESET_HYBRID_CHUNKED, ((cfg_case){4, NULL, 0, 8, 0, 0}), 16, SCH(8), STA, SCH(8), STA);
  EXPECT(KVC_PRESET_HYBRID_CHUNKED, ((cfg_case){4, NULL, 0, 8, 0, 4}), 16, SCH(8), SCH(8), SCH(8), STA);
  /* the window is attention_chunk_size, else sliding_window */
  EXPECT(KVC_PRESET_HYBRID_CHUNKED, ((cfg_case){2, NULL, 5, 0, 0, 0}), 16, SCH(5), STA);
  EXPECT(KVC_PRESET_HYBRID_CHUNKED, ((cfg_case){2, NULL, 5, 8, 0, 0}), 16, SCH(8), STA);
  static const kvc_layer_type t[3] = {C, F, C};
  EXPECT(KVC_PRESET_HYBRID_CHUNKED, ((cfg_case){3, t, 0, 6, 0, 0}), 16, SCH(6), STA, SCH(6));
  kvc_cache* c = NULL;
  cfg_case k = {2, NULL, 0, 0, 0, 0};
  CHECK_ERR(create(KVC_PRESET_HYBRID_CHUNKED, &k, 16, &c), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(c == NULL);
}

static void test_custom_preset(void) {
  kvc_layer_options l[4] = {tu_layer(KVC_LAYER_STATIC_CHUNKED, 3, 7), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                            tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 2, 0), tu_layer(KVC_LAYER_STATIC, 0, 5)};
  kvc_cache* c = tu_custom_cache(4, l);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 4);
  for (uint32_t i = 0; i < 4; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.kind, l[i].kind);
    CHECK_EQ_I64(li.window, l[i].window);
    CHECK_EQ_I64(li.max_cache_len, l[i].max_cache_len);
  }
  CHECK_ERR(tu_update_tokens(c, 4, 1, 1, 1, 2, 2, 0, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  kvc_cache_destroy(c);
}

/* The options' init functions equal their macros. */
static void test_options_init(void) {
  kvc_cache_options a = KVC_CACHE_OPTIONS_INIT, b;
  memset(&b, 0xff, sizeof b);
  kvc_cache_options_init(&b);
  CHECK(a.struct_size == b.struct_size && a.preset == b.preset && a.config == b.config &&
        a.max_cache_len == b.max_cache_len && a.num_layers == b.num_layers && a.layers == b.layers &&
        a.device.device_type == b.device.device_type && a.device.device_id == b.device.device_id);
  kvc_model_config m = KVC_MODEL_CONFIG_INIT, n;
  memset(&n, 0xff, sizeof n);
  kvc_model_config_init(&n);
  CHECK(m.struct_size == n.struct_size && m.num_hidden_layers == n.num_hidden_layers && m.layer_types == n.layer_types &&
        m.sliding_window == n.sliding_window && m.attention_chunk_size == n.attention_chunk_size &&
        m.num_kv_shared_layers == n.num_kv_shared_layers && m.sliding_window_pattern == n.sliding_window_pattern);
  kvc_layer_options x = KVC_LAYER_OPTIONS_INIT, y;
  memset(&y, 0xff, sizeof y);
  kvc_layer_options_init(&y);
  CHECK(x.struct_size == y.struct_size && x.kind == y.kind && x.window == y.window &&
        x.max_cache_len == y.max_cache_len);
  kvc_init_options p = KVC_INIT_OPTIONS_INIT, q;
  memset(&q, 0xff, sizeof q);
  kvc_init_options_init(&q);
  CHECK(p.struct_size == q.struct_size && p.batch_size == q.batch_size && p.dtype == q.dtype &&
        p.num_kv_heads_per_layer == q.num_kv_heads_per_layer && p.head_dim_per_layer == q.head_dim_per_layer);
  kvc_update_options u = KVC_UPDATE_OPTIONS_INIT, v;
  memset(&v, 0xff, sizeof v);
  kvc_update_options_init(&v);
  CHECK(u.struct_size == v.struct_size && u.cache_position == v.cache_position &&
        u.cache_position_length == v.cache_position_length);
  kvc_cache_options_init(NULL);
  kvc_model_config_init(NULL);
}

int main(void) {
  TU_RUN(test_dynamic_from_config);
  TU_RUN(test_static_from_config);
  TU_RUN(test_sliding_window_preset);
  TU_RUN(test_hybrid_preset);
  TU_RUN(test_hybrid_chunked_preset);
  TU_RUN(test_custom_preset);
  TU_RUN(test_options_init);
  return tu_finish();
}
