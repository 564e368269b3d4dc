/*
 * Bad input around offloading: kvc_cache_offload / kvc_cache_prefetch, the
 * offload option of kvc_cache_create, and failed updates of offloaded
 * layers. Every error names the function, the argument and the value, and
 * leaves the cache exactly as it was, the tier of every layer and the bytes
 * per tier included.
 */
#include "test_errors.h"
#include "test_offload_util.h"

/* EXPECT_ERR_UNCHANGED, plus: every layer's tier and the bytes per tier are the same after the call. */
#define EXPECT_ERR_UNCHANGED_TIERS(cache, expr, code, ...)                    \
  do {                                                                      \
    char tiers_before_[128];                                                \
    ot_tiers((cache), tiers_before_);                                       \
    kvc_memory_info mem_before_ = tu_memory(cache);                         \
    EXPECT_ERR_UNCHANGED(cache, expr, code, __VA_ARGS__);                   \
    CHECK_TIERS((cache), tiers_before_, #expr);                             \
    kvc_memory_info mem_after_ = tu_memory(cache);                          \
    CHECK_EQ_U64(mem_after_.bytes_device, mem_before_.bytes_device);        \
    CHECK_EQ_U64(mem_after_.bytes_host, mem_before_.bytes_host);            \
  } while (0)

/* Layers f s f with every layer offloaded, after one step: tiers 011. */
static kvc_cache* stepped_cache(void) {
  return ot_stepped_cache(KVC_PRESET_DYNAMIC, "fsf", 3, 0, KVC_OFFLOAD_ALL, 2, 2, 3, "011");
}

static void test_offload_prefetch_bad_layer(void) {
  kvc_cache* c = stepped_cache();
  REQUIRE(c);
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_offload(c, 3), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_offload", "layer is 3",
                             "3 layers", "0..2");
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_prefetch(c, 7), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_prefetch", "layer is 7",
                             "3 layers");
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_offload(c, UINT32_MAX), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_offload",
                             "layer is 4294967295");
  kvc_cache_destroy(c);
  /* a lazy cache before its first update has no layer at all */
  kvc_cache* lazy = ot_cache(KVC_PRESET_OFFLOADED, "", 0, 0, 0, KVC_OFFLOAD_DEFAULT);
  REQUIRE(lazy);
  EXPECT_ERR_UNCHANGED_TIERS(lazy, kvc_cache_prefetch(lazy, 0), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_prefetch",
                             "layer is 0", "0 layers");
  kvc_cache_destroy(lazy);
}

static void test_offload_prefetch_null_cache(void) {
  EXPECT_ERR(kvc_cache_offload(NULL, 0), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_offload", "cache is NULL");
  EXPECT_ERR(kvc_cache_prefetch(NULL, 0), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_prefetch", "cache is NULL");
}

static void test_create_bad_offload_option(void) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  kvc_cache* c = (kvc_cache*)0x1;
  o.offload = 4;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "options->offload is 4",
             "_NON_SLIDING (3)");
  o.offload = -1;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "options->offload is -1");
  CHECK(c == (kvc_cache*)0x1); /* out untouched */
  /* transformers' QuantizedCache has no offloading */
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = 2;
  o.preset = KVC_PRESET_QUANTIZED;
  o.config = &cfg;
  o.offload = KVC_OFFLOAD_ALL;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_UNSUPPORTED, "kvc_cache_create", "options->offload is 2",
             "KVC_PRESET_QUANTIZED");
  CHECK(c == (kvc_cache*)0x1);
}

/* A failed update of an offloaded layer moves nothing: not the layer, not the layer it would prefetch. */
static void test_failed_update_moves_nothing(void) {
  kvc_cache* c = stepped_cache();
  REQUIRE(c);
  tu_tensor k, v;
  ot_random(&k, KVC_DTYPE_FLOAT32, 1, 3, 1, 3, 1); /* 3 heads where the layers hold 2 */
  ot_random(&v, KVC_DTYPE_FLOAT32, 1, 3, 1, 3, 2);
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_update(c, 1, &k.t, &v.t, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH,
                             "kvc_cache_update", "key.shape[1] (num_kv_heads) is 3", "layer 1 holds 2");
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  ot_random(&k, KVC_DTYPE_FLOAT16, 1, 2, 1, 3, 1);
  ot_random(&v, KVC_DTYPE_FLOAT16, 1, 2, 1, 3, 2);
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_update(c, 2, &k.t, &v.t, NULL, NULL), KVC_ERROR_DTYPE_MISMATCH,
                             "kvc_cache_update", "float16", "layer 2 stores float32");
  /* update_all: layer 2 is refused after layers 0 and 1 passed their checks; none was written or moved */
  tu_tensor good[2][2];
  kvc_tensor kt[3], vt[3];
  for (int i = 0; i < 2; i++) {
    ot_random(&good[i][0], KVC_DTYPE_FLOAT32, 1, 2, 1, 3, (uint64_t)i);
    ot_random(&good[i][1], KVC_DTYPE_FLOAT32, 1, 2, 1, 3, (uint64_t)i + 9);
    kt[i] = good[i][0].t;
    vt[i] = good[i][1].t;
  }
  kt[2] = k.t;
  vt[2] = v.t;
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_update_all(c, 3, kt, vt, NULL, NULL), KVC_ERROR_DTYPE_MISMATCH,
                             "kvc_cache_update_all", "keys[2]", "layer 2 stores float32");
  for (int i = 0; i < 2; i++) {
    tu_tensor_free(&good[i][0]);
    tu_tensor_free(&good[i][1]);
  }
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  kvc_cache_destroy(c);
}

/* A static overflow on an offloaded layer (OffloadedStaticCache) changes nothing either. */
static void test_static_overflow_offloaded(void) {
  kvc_cache* c = ot_stepped_cache(KVC_PRESET_OFFLOADED_STATIC, "ff", 0, 4, KVC_OFFLOAD_DEFAULT, 1, 3, 2, "01");
  REQUIRE(c);
  tu_tensor k, v;
  ot_random(&k, KVC_DTYPE_FLOAT32, 1, 1, 2, 2, 5);
  ot_random(&v, KVC_DTYPE_FLOAT32, 1, 1, 2, 2, 6);
  EXPECT_ERR_UNCHANGED_TIERS(c, kvc_cache_update(c, 1, &k.t, &v.t, NULL, NULL), KVC_ERROR_OUT_OF_RANGE,
                             "kvc_cache_update", "layer 1");
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_offload_prefetch_bad_layer);
  TU_RUN(test_offload_prefetch_null_cache);
  TU_RUN(test_create_bad_offload_option);
  TU_RUN(test_failed_update_moves_nothing);
  TU_RUN(test_static_overflow_offloaded);
  return tu_finish();
}
