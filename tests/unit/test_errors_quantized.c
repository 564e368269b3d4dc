/*
 * test_errors_quantized.c: bad input to QUANTIZED layers: every field of
 * kvc_quant_options, the group sizes transformers refuses for a shape (docs/semantics.md,
 * 'quanto quantizer', 'HQQ quantizer' and 'Errors'), and dtype and shape mismatches. Each error names the
 * function, the argument and the value, and leaves the cache exactly as it
 * was, including updates of several layers that fail at the last one after
 * the first ones were ready to quantize.
 */
#include "test_errors.h"
#include "test_quantized.h"

#define F32 KVC_DTYPE_FLOAT32

static kvc_cache* const SENTINEL = (kvc_cache*)(uintptr_t)0x5a5a;

/* kvc_cache_create with KVC_PRESET_QUANTIZED and these options (and a 2-layer config). */
static kvc_error* create_with(const kvc_quant_options* q, kvc_cache** out) { return tq_create(q, 2, out); }

static void test_bad_quant_options(void) {
  struct {
    kvc_quant_options q;
    const char* field;
    const char* value;
  } bad[16];
  int n = 0;
  kvc_quant_options base = KVC_QUANT_OPTIONS_INIT, hqq = KVC_QUANT_OPTIONS_INIT;
  hqq.quantizer = KVC_QUANTIZER_HQQ;
#define BAD(from, field_, v, text)         \
  do {                                     \
    bad[n].q = (from);                     \
    bad[n].q.field_ = (v);                 \
    bad[n].field = "quant." #field_;       \
    bad[n].value = (text);                 \
    n++;                                   \
  } while (0)
  BAD(base, struct_size, 12, "12");
  BAD(base, quantizer, 0, "0");
  BAD(base, quantizer, 3, "3");
  BAD(base, mode, 3, "3");
  BAD(base, mode, -1, "-1");
  BAD(base, nbits, 3, "3");
  BAD(hqq, nbits, 5, "5");
  BAD(base, axis_key, 1, "1");
  BAD(hqq, axis_key, -1, "-1");
  BAD(base, axis_value, -2, "-2");
  BAD(hqq, axis_value, 2, "2");
  BAD(base, q_group_size, 0, "0");
  BAD(base, q_group_size, INT64_C(1) << 31, "2147483648");
  BAD(base, residual_length, -1, "-1");
  BAD(base, residual_length, INT64_C(1) << 31, "2147483648");
#undef BAD
  for (int i = 0; i < n; i++) {
    kvc_cache* c = SENTINEL;
    EXPECT_ERR(create_with(&bad[i].q, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", bad[i].field,
               bad[i].value);
    CHECK(c == SENTINEL);
  }
  /* The same options on a custom layer name that layer. */
  kvc_layer_options layers[2] = {KVC_LAYER_OPTIONS_INIT, KVC_LAYER_OPTIONS_INIT};
  layers[0].kind = layers[1].kind = KVC_LAYER_QUANTIZED;
  layers[1].quant = &bad[7].q; /* quanto axis_key 1 */
  kvc_cache_options o = tu_custom_options(2, layers);
  kvc_cache* c = SENTINEL;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "options->layers[1].quant",
             "axis_key", "[0, -1]", "got 1");
  CHECK(c == SENTINEL);
}

static void test_bad_preset_use(void) {
  kvc_cache* c = SENTINEL;
  kvc_cache_options o;
  kvc_cache_options_init(&o);
  o.preset = KVC_PRESET_QUANTIZED;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "config is NULL",
             "KVC_PRESET_QUANTIZED");
  kvc_model_config cfg;
  kvc_model_config_init(&cfg);
  cfg.num_hidden_layers = 3;
  kvc_layer_type types[3] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_SLIDING_ATTENTION,
                             KVC_LAYER_TYPE_FULL_ATTENTION};
  cfg.layer_types = types;
  cfg.sliding_window = 4;
  o.config = &cfg;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "layer 1",
             "only full attention");
  cfg.layer_types = NULL;
  o.offload = KVC_OFFLOAD_ALL;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_UNSUPPORTED, "kvc_cache_create", "options->offload",
             "KVC_PRESET_QUANTIZED");
  CHECK(c == SENTINEL);
}

/* Incremental per-token groups need head_dim to be a multiple of q_group_size: refused before anything changes. */
static void test_incremental_head_dim(void) {
  kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 4}, 1);
  REQUIRE(c);
  tq_rng rng = {1};
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 1, 2, 3, 6, 8, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "layer 0", "key head_dim is 6", "q_group_size is 4", "axis_key 0");
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 0);
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 1, 2, 3, 8, 10, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "value head_dim is 10", "q_group_size is 4");
  /* Per-channel groups have no such rule. */
  kvc_cache_destroy(c);
  tq_setting channel = {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 4};
  c = tq_cache(&channel, 1);
  REQUIRE(c);
  CHECK_OK(tq_update(c, 0, F32, 1, 2, 9, 6, 10, &rng, NULL, NULL, NULL));
  kvc_cache_destroy(c);
}

/* transformers' group-size rules, at the first call and at a later flush. */
static void test_transformers_group_sizes(void) {
  tq_rng rng = {2};
  /* quanto axis 0: G must divide heads*seq*head_dim (3*1*2 = 6 here). */
  tq_setting q0 = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 8, 3};
  kvc_cache* c = tq_cache(&q0, 1);
  REQUIRE(c);
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 2, 3, 1, 2, 2, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "layer 0", "keys", "[2, 3, 1, 2]", "Group size (8) must be a divisor of (6)");
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 0);
  /* 4 tokens: 3*4*2 = 24, fine; then a flush at 4 + 1 + 2 = 7 tokens: 42 is refused, 8 tokens would not be. */
  REQUIRE_OK(tq_update(c, 0, F32, 2, 3, 4, 2, 2, &rng, NULL, NULL, NULL));
  REQUIRE_OK(tq_update(c, 0, F32, 2, 3, 1, 2, 2, &rng, NULL, NULL, NULL));
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 2, 3, 2, 2, 2, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "[2, 3, 7, 2]", "Group size (8) must be a divisor of (42)");
  CHECK_OK(tq_update(c, 0, F32, 2, 3, 3, 2, 2, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tq_quantized(c, 0), 8);
  kvc_cache_destroy(c);

  /* quanto axis -1 on the values: G must divide batch*heads*seq and not exceed it. */
  tq_setting q1 = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 2, 0, -1, 4, 3};
  c = tq_cache(&q1, 1);
  REQUIRE(c);
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 1, 1, 2, 4, 4, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "values", "on axis -1", "batch*heads*seq", "Group size (4) must be a divisor of (2)");
  kvc_cache_destroy(c);

  /* hqq: G must divide the element count. */
  tq_setting h = {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 1, 0, 16, 3};
  c = tq_cache(&h, 1);
  REQUIRE(c);
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 1, 1, 3, 4, 4, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "(12 elements)", "q_group_size (16)",
                       "group_size should be divisble by the total tensor dimensions");
  kvc_cache_destroy(c);
}

static void test_dtype_and_shape(void) {
  for (int mode = 0; mode < 2; mode++) {
    tq_rng rng = {3};
    kvc_cache* c = tq_cache_holding(&(tq_setting){KVC_QUANTIZER_QUANTO, mode, 4, 0, 0, 4, 3}, 1, &rng, 2, 2, 5, 8, 8);
    REQUIRE(c);
    EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, KVC_DTYPE_FLOAT16, 2, 2, 1, 8, 8, &rng, NULL, NULL, NULL),
                         KVC_ERROR_DTYPE_MISMATCH, "kvc_cache_update", "key.dtype is float16", "float32");
    EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 2, 3, 1, 8, 8, &rng, NULL, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH,
                         "kvc_cache_update", "key.shape[1]", "is 3");
    EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 2, 2, 1, 8, 4, &rng, NULL, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH,
                         "kvc_cache_update", "value.shape[3]", "is 4");
    EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, 1, 2, 1, 8, 8, &rng, NULL, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH,
                         "kvc_cache_update", "key.shape[0]", "is 1");
    kvc_cache_destroy(c);
  }
}

/*
 * update_all: layers 0 and 1 would flush (quantize 4 tokens) and layer 2 is
 * refused, in the check phase (initialized, its flush of 6 tokens has 12
 * elements for groups of 8) or while making room (a first call this update
 * makes, of 4 elements): the cache is exactly as before either way, and the
 * same call with a fitting layer 2 then goes through.
 */
static void test_update_all_refused_late(void) {
  for (int fresh = 0; fresh < 2; fresh++) {
    kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 1, 1, 8, 2}, 3);
    REQUIRE(c);
    tq_rng rng = {4};
    const int64_t dim[3] = {4, 4, 1};
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 2, 4, 4, &rng, NULL, NULL, NULL));
    REQUIRE_OK(tq_update(c, 1, F32, 1, 2, 2, 4, 4, &rng, NULL, NULL, NULL));
    if (!fresh) REQUIRE_OK(tq_update(c, 2, F32, 1, 2, 4, 1, 1, &rng, NULL, NULL, NULL));
    for (int attempt = 0; attempt < 2; attempt++) {
      const int64_t n[3] = {2, 2, attempt ? 4 : 2};
      tu_tensor k[3], v[3];
      kvc_tensor kt[3], vt[3];
      for (int l = 0; l < 3; l++) {
        tq_normal_tensor(&k[l], F32, 1, 2, n[l], dim[l], &rng, 1.0f, NULL);
        tq_normal_tensor(&v[l], F32, 1, 2, n[l], dim[l], &rng, 1.0f, NULL);
        kt[l] = k[l].t;
        vt[l] = v[l].t;
      }
      if (!attempt) {
        EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, 3, kt, vt, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                             "kvc_cache_update_all", "layer 2", fresh ? "(4 elements)" : "(12 elements)",
                             "group_size should be divisble");
        CHECK_EQ_I64(tu_info(c, 2).is_initialized, !fresh);
        CHECK_EQ_I64(tq_quantized(c, 0), 2);
      } else {
        CHECK_OK(kvc_cache_update_all(c, 3, kt, vt, NULL, NULL));
        CHECK_EQ_I64(tq_quantized(c, 0), 4);
        CHECK_EQ_I64(tq_quantized(c, 1), 4);
        CHECK_EQ_I64(tq_quantized(c, 2), fresh ? 4 : 8);
      }
      for (int l = 0; l < 3; l++) {
        tu_tensor_free(&k[l]);
        tu_tensor_free(&v[l]);
      }
    }
    kvc_cache_destroy(c);
  }
}

/* Splits that disagree on their quantized tokens are refused by stack, which changes nothing. */
static void test_stack_mismatch(void) {
  tq_rng rng = {5};
  kvc_cache* c = tq_cache_holding(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 2}, 1, &rng, 2, 1, 6, 4, 4);
  REQUIRE(c);
  kvc_cache* splits[2] = {NULL, NULL};
  size_t count = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, 2, 1, splits, 2, &count));
  REQUIRE_OK(kvc_cache_crop(splits[0], -1));  /* 5 stored, 4 quantized */
  REQUIRE_OK(kvc_cache_crop(splits[1], -6));  /* refilled with 5: 3 quantized */
  REQUIRE_OK(tq_update(splits[1], 0, F32, 1, 1, 5, 4, 4, &rng, NULL, NULL, NULL));
  kvc_cache* out = SENTINEL;
  CHECK_UNCHANGED_BY(splits[1], EXPECT_ERR(kvc_cache_from_batch_splits((const kvc_cache* const*)splits, 2, &out),
                                           KVC_ERROR_INVALID_STATE, "kvc_cache_from_batch_splits", "splits[1]",
                                           "quantized_length 3", "splits[0] has 4"));
  CHECK(out == SENTINEL);
  TU_DESTROY(splits[0], splits[1], c);
}

int main(void) {
  TU_RUN(test_bad_quant_options);
  TU_RUN(test_bad_preset_use);
  TU_RUN(test_incremental_head_dim);
  TU_RUN(test_transformers_group_sizes);
  TU_RUN(test_dtype_and_shape);
  TU_RUN(test_update_all_refused_late);
  TU_RUN(test_stack_mismatch);
  return tu_finish();
}
