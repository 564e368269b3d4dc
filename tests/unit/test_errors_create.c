/*
 * test_errors_create.c: bad input to the functions that make caches
 * (kvc_cache_create with every option struct it reads, create_from_tensors,
 * clone, early_initialization). Each case checks the exact code, that the
 * message names the argument and the offending value, that `*out` keeps the
 * caller's value, and, where a cache exists, that it did not change.
 */
#include "test_errors.h"


/* A value no successful call writes: failed calls must leave it in *out. */
static char sentinel_storage;
#define SENTINEL_CACHE ((kvc_cache*)(void*)&sentinel_storage)

/* kvc_cache_create(opts) must fail with `code` and leave *out alone. */
#define EXPECT_CREATE_ERR(opts, code, ...)                                   \
  do {                                                                       \
    kvc_cache* out_ = SENTINEL_CACHE;                                        \
    EXPECT_ERR(kvc_cache_create((opts), &out_), (code), __VA_ARGS__);        \
    CHECK_EQ_PTR(out_, SENTINEL_CACHE);                                      \
    if (out_ != SENTINEL_CACHE) kvc_cache_destroy(out_);                     \
  } while (0)

static kvc_cache_options preset_options(kvc_preset preset, const kvc_model_config* config,
                                        int64_t max_cache_len) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = preset;
  o.config = config;
  o.max_cache_len = max_cache_len;
  return o;
}

static kvc_model_config config_of(uint32_t layers, int64_t sliding_window, int64_t chunk) {
  kvc_model_config c = KVC_MODEL_CONFIG_INIT;
  c.num_hidden_layers = layers;
  c.sliding_window = sliding_window;
  c.attention_chunk_size = chunk;
  return c;
}

/* ------------------------------------------------------------ create */

static void test_create_null_out(void) {
  EXPECT_ERR(kvc_cache_create(NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "out", "NULL");
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  EXPECT_ERR(kvc_cache_create(&o, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "out", "NULL");
}

/* Sizes this library does not know for a struct of `real` bytes: zero, smaller, larger. */
#define N_BAD_SIZES 4
static uint32_t bad_size(size_t i, size_t real) {
  const uint32_t sizes[N_BAD_SIZES] = {0, 4, (uint32_t)real - 1, (uint32_t)real + 8};
  return sizes[i];
}

static void test_create_bad_struct_sizes(void) {
  char num[32];
  for (size_t i = 0; i < N_BAD_SIZES; i++) {
    kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
    o.struct_size = bad_size(i, sizeof o);
    snprintf(num, sizeof num, "%u", o.struct_size);
    EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "options", "struct_size", num);

    kvc_model_config c = config_of(2, 0, 0);
    c.struct_size = bad_size(i, sizeof c);
    snprintf(num, sizeof num, "%u", c.struct_size);
    kvc_cache_options so = preset_options(KVC_PRESET_STATIC, &c, 8);
    EXPECT_CREATE_ERR(&so, KVC_ERROR_INVALID_ARGUMENT, "config", "struct_size", num);
    kvc_cache_options dyn = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
    EXPECT_CREATE_ERR(&dyn, KVC_ERROR_INVALID_ARGUMENT, "config", "struct_size", num);

    kvc_layer_options layers[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC, 0, 4)};
    layers[1].struct_size = bad_size(i, sizeof layers[1]);
    snprintf(num, sizeof num, "%u", layers[1].struct_size);
    kvc_cache_options co = tu_custom_options(2, layers);
    EXPECT_CREATE_ERR(&co, KVC_ERROR_INVALID_ARGUMENT, "layers[1]", "struct_size", num);
  }
}

static void test_create_bad_preset(void) {
  static const kvc_preset bad[] = {13, 99, -1, INT32_MIN};
  kvc_model_config c = config_of(2, 4, 0);
  char num[32];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvc_cache_options o = preset_options(bad[i], &c, 8);
    snprintf(num, sizeof num, "%d", (int)bad[i]);
    EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "preset", num);
  }
}

static void test_create_bad_custom_layers(void) {
  kvc_cache_options o = tu_custom_options(2, NULL);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "layers", "NULL");

  kvc_layer_options one = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  o = tu_custom_options(0, &one);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "num_layers", "0");

  static const kvc_layer_kind bad_kinds[] = {0, 18, -1, 1000};
  char num[32];
  for (size_t i = 0; i < sizeof bad_kinds / sizeof bad_kinds[0]; i++) {
    kvc_layer_options l[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(bad_kinds[i], 4, 8)};
    o = tu_custom_options(2, l);
    snprintf(num, sizeof num, "%d", (int)bad_kinds[i]);
    EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "layers[1]", "kind", num);
  }

  /* Every windowed kind needs window >= 1; every static kind max_cache_len >= 1. */
  static const kvc_layer_kind windowed[] = {KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DYNAMIC_CHUNKED,
                                            KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED};
  static const int64_t bad_windows[] = {0, -3, INT64_MIN};
  for (size_t k = 0; k < sizeof windowed / sizeof windowed[0]; k++)
    for (size_t w = 0; w < sizeof bad_windows / sizeof bad_windows[0]; w++) {
      kvc_layer_options l[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(windowed[k], bad_windows[w], 8)};
      o = tu_custom_options(2, l);
      snprintf(num, sizeof num, "%lld", (long long)bad_windows[w]);
      EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "layers[1]", "window", num);
    }
  static const kvc_layer_kind statics[] = {KVC_LAYER_STATIC, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED};
  static const int64_t bad_lens[] = {0, -5};
  for (size_t k = 0; k < sizeof statics / sizeof statics[0]; k++)
    for (size_t m = 0; m < sizeof bad_lens / sizeof bad_lens[0]; m++) {
      kvc_layer_options l[2] = {tu_layer(statics[k], 4, bad_lens[m]), tu_layer(KVC_LAYER_DYNAMIC, 0, 0)};
      o = tu_custom_options(2, l);
      snprintf(num, sizeof num, "%lld", (long long)bad_lens[m]);
      EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "layers[0]", "max_cache_len", num);
    }
}

static void test_create_bad_presets_config(void) {
  static const kvc_preset needs_config[] = {KVC_PRESET_STATIC, KVC_PRESET_SLIDING_WINDOW, KVC_PRESET_HYBRID,
                                            KVC_PRESET_HYBRID_CHUNKED};
  kvc_model_config good = config_of(4, 4, 4);
  for (size_t i = 0; i < sizeof needs_config / sizeof needs_config[0]; i++) {
    kvc_cache_options o = preset_options(needs_config[i], NULL, 8);
    EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "config", "NULL");
    o = preset_options(needs_config[i], &good, 0);
    EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "max_cache_len", "0");
    o = preset_options(needs_config[i], &good, -4);
    EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "max_cache_len", "-4");
  }

  kvc_model_config c = config_of(0, 0, 0);
  kvc_cache_options o = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "num_hidden_layers", "0");

  kvc_layer_type types[3] = {KVC_LAYER_TYPE_FULL_ATTENTION, 9, KVC_LAYER_TYPE_FULL_ATTENTION};
  c = config_of(3, 4, 0);
  c.layer_types = types;
  o = preset_options(KVC_PRESET_STATIC, &c, 8);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "layer_types[1]", "9");
  types[1] = 0;
  o = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "layer_types[1]", "0");

  /* Sliding layers need a window; chunked layers a chunk size. */
  types[1] = KVC_LAYER_TYPE_SLIDING_ATTENTION;
  c = config_of(3, 0, 0);
  c.layer_types = types;
  o = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "sliding_window", "0");
  o = preset_options(KVC_PRESET_STATIC, &c, 8);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "sliding_window", "0");
  types[1] = KVC_LAYER_TYPE_CHUNKED_ATTENTION;
  o = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "attention_chunk_size", "0");

  c = config_of(3, -3, 0);
  o = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "sliding_window", "-3");
  c = config_of(3, 0, -2);
  o = preset_options(KVC_PRESET_STATIC, &c, 8);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "attention_chunk_size", "-2");

  c = config_of(3, 0, 0);
  o = preset_options(KVC_PRESET_SLIDING_WINDOW, &c, 8);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "sliding_window", "0");
  o = preset_options(KVC_PRESET_HYBRID, &c, 8);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "sliding_window", "0");
  o = preset_options(KVC_PRESET_HYBRID_CHUNKED, &c, 8);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "attention_chunk_size", "sliding_window", "0");

  /* Shared-KV layers are dropped from the end: dropping more than all is nonsense. */
  c = config_of(3, 0, 0);
  c.num_kv_shared_layers = 5;
  o = preset_options(KVC_PRESET_DYNAMIC, &c, 0);
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "num_kv_shared_layers", "5");
}

/*
 * A GPU device type on whatever machine runs this: kvc_features() says
 * whether device 0 of that type is usable (a backend loaded and its runtime
 * found a device). Where it is, a cache is created there; where it is not,
 * the refusal names the device type. Either way no device has id -1 or 1000,
 * and that refusal names the device type too.
 */
static void check_gpu_device(kvc_device_type type, uint64_t feature, const char* name) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.device.device_type = type;
  if (kvc_features() & feature) {
    printf("  a %s device is available: a cache is created on device 0\n", name);
    kvc_cache* c = NULL;
    CHECK_OK(kvc_cache_create(&o, &c));
    CHECK(c != NULL);
    kvc_cache_destroy(c);
  } else {
    EXPECT_CREATE_ERR(&o, KVC_ERROR_NO_DEVICE, "kvc_cache_create", name);
  }
  o.device.device_id = -1;
  EXPECT_CREATE_ERR(&o, KVC_ERROR_NO_DEVICE, "kvc_cache_create", name);
  o.device.device_id = 1000;
  EXPECT_CREATE_ERR(&o, KVC_ERROR_NO_DEVICE, "kvc_cache_create", name);
}

static void test_create_bad_device(void) {
  check_gpu_device(KVC_DEVICE_CUDA, KVC_FEATURE_CUDA, "CUDA");
  check_gpu_device(KVC_DEVICE_ROCM, KVC_FEATURE_HIP, "ROCm");

  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.device.device_type = KVC_DEVICE_CPU;
  o.device.device_id = 1;
  EXPECT_CREATE_ERR(&o, KVC_ERROR_NO_DEVICE, "kvc_cache_create", "device_id", "1");

  o.device.device_type = 99;
  o.device.device_id = 0;
  EXPECT_CREATE_ERR(&o, KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "device_type", "99");

  /* The layers are valid: the device alone must be the reason (for a custom cache too). */
  kvc_layer_options l = tu_layer(KVC_LAYER_STATIC, 0, 4);
  kvc_cache_options co = tu_custom_options(1, &l);
  co.device.device_type = 99;
  EXPECT_CREATE_ERR(&co, KVC_ERROR_INVALID_ARGUMENT, "device_type", "99");
}

/* ------------------------------------------------ create_from_tensors */

/* Two layers of [2, 2, 3, 4] float32 token tensors. */
typedef struct tensors2 {
  tu_tensor k[2], v[2];
  kvc_tensor keys[2], values[2];
} tensors2;

static void tensors2_make(tensors2* t) {
  for (int i = 0; i < 2; i++) {
    tu_tensor_tokens(&t->k[i], 2, 2, 3, 4, 0, 0);
    tu_tensor_tokens(&t->v[i], 2, 2, 3, 4, 0, 1);
    t->keys[i] = t->k[i].t;
    t->values[i] = t->v[i].t;
  }
}

static void tensors2_free(tensors2* t) {
  for (int i = 0; i < 2; i++) {
    tu_tensor_free(&t->k[i]);
    tu_tensor_free(&t->v[i]);
  }
}

#define EXPECT_FROM_TENSORS_ERR(opts, n, keys, values, code, ...)                              \
  do {                                                                                         \
    kvc_cache* out_ = SENTINEL_CACHE;                                                          \
    EXPECT_ERR(kvc_cache_create_from_tensors((opts), (n), (keys), (values), &out_), (code),    \
               __VA_ARGS__);                                                                   \
    CHECK_EQ_PTR(out_, SENTINEL_CACHE);                                                        \
    if (out_ != SENTINEL_CACHE) kvc_cache_destroy(out_);                                       \
  } while (0)

static void test_create_from_tensors_bad_input(void) {
  tensors2 t;
  tensors2_make(&t);
  const char* FN = "kvc_cache_create_from_tensors";

  EXPECT_ERR(kvc_cache_create_from_tensors(NULL, 2, t.keys, t.values, NULL), KVC_ERROR_INVALID_ARGUMENT, FN,
             "out", "NULL");
  EXPECT_FROM_TENSORS_ERR(NULL, 2, NULL, t.values, KVC_ERROR_INVALID_ARGUMENT, FN, "keys", "NULL");
  EXPECT_FROM_TENSORS_ERR(NULL, 2, t.keys, NULL, KVC_ERROR_INVALID_ARGUMENT, FN, "values", "NULL");

  kvc_cache_options bad = KVC_CACHE_OPTIONS_INIT;
  bad.struct_size = 0;
  EXPECT_FROM_TENSORS_ERR(&bad, 2, t.keys, t.values, KVC_ERROR_INVALID_ARGUMENT, "struct_size", "0");

  /* Layer 1 is bad: layer 0 must not survive as a half-built cache. */
  t.keys[1].dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 64, 1};
  EXPECT_FROM_TENSORS_ERR(NULL, 2, t.keys, t.values, KVC_ERROR_DTYPE_MISMATCH, FN, "keys[1]", "64");
  t.keys[1] = t.k[1].t;

  t.v[1].shape[0] = 3; /* value batch disagrees with key batch */
  EXPECT_FROM_TENSORS_ERR(NULL, 2, t.keys, t.values, KVC_ERROR_SHAPE_MISMATCH, FN, "values[1]", "3");
  t.v[1].shape[0] = 2;

  t.keys[1].device.device_type = KVC_DEVICE_CUDA;
  EXPECT_FROM_TENSORS_ERR(NULL, 2, t.keys, t.values, KVC_ERROR_DEVICE_MISMATCH, FN, "keys[1]", "CUDA");
  t.keys[1] = t.k[1].t;

  t.values[1].data = NULL;
  EXPECT_FROM_TENSORS_ERR(NULL, 2, t.keys, t.values, KVC_ERROR_INVALID_ARGUMENT, FN, "values[1]", "data", "NULL");
  t.values[1] = t.v[1].t;

  /* More tensors than a non-lazy cache has layers. */
  kvc_layer_options one = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options co = tu_custom_options(1, &one);
  EXPECT_FROM_TENSORS_ERR(&co, 2, t.keys, t.values, KVC_ERROR_OUT_OF_RANGE, FN, "1");

  /* 3 tokens do not fit a static cache of 2 slots. */
  kvc_model_config c = config_of(2, 0, 0);
  kvc_cache_options so = preset_options(KVC_PRESET_STATIC, &c, 2);
  EXPECT_FROM_TENSORS_ERR(&so, 2, t.keys, t.values, KVC_ERROR_OUT_OF_RANGE, FN, "max_cache_len", "2", "3");

  /* Layers of one cache may differ from each other, but not K from V within a layer. */
  t.keys[0].dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 16, 1};
  EXPECT_FROM_TENSORS_ERR(NULL, 2, t.keys, t.values, KVC_ERROR_DTYPE_MISMATCH, FN, "float16", "float32");
  t.keys[0] = t.k[0].t;

  /* Sanity: the same tensors are accepted, so the failures above were about the defects. */
  kvc_cache* ok = NULL;
  CHECK_OK(kvc_cache_create_from_tensors(NULL, 2, t.keys, t.values, &ok));
  CHECK_EQ_U64(kvc_cache_num_layers(ok), 2);
  kvc_cache_destroy(ok);
  tensors2_free(&t);
}

/* --------------------------------------------------------------- clone */

static void test_clone_bad_input(void) {
  kvc_cache* out = SENTINEL_CACHE;
  EXPECT_ERR(kvc_cache_clone(NULL, &out), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_clone", "cache", "NULL");
  CHECK_EQ_PTR(out, SENTINEL_CACHE);

  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC, 0, 5));
  REQUIRE(c != NULL);
  CHECK_OK(tu_update_tokens(c, 0, 2, 2, 3, 4, 4, 0, NULL, NULL));
  EXPECT_ERR_UNCHANGED(c, kvc_cache_clone(c, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_clone", "out", "NULL");
  kvc_cache_destroy(c);
}

/* ------------------------------------------------ early_initialization */

/* Every bad option set, tried on the cache `c` which must not change. */
static void early_init_cases(kvc_cache* c) {
  const char* FN = "kvc_cache_early_initialization";
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, NULL), KVC_ERROR_INVALID_ARGUMENT, FN, "options",
                       "NULL");
  char num[32];
  for (size_t i = 0; i < N_BAD_SIZES; i++) {
    kvc_init_options o = tu_init_options(2, 2, 4, 4, KVC_DTYPE_FLOAT32);
    o.struct_size = bad_size(i, sizeof o);
    snprintf(num, sizeof num, "%u", o.struct_size);
    EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "struct_size",
                         num);
  }
  kvc_init_options o = tu_init_options(0, 2, 4, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "batch_size", "0");
  o = tu_init_options(-1, 2, 4, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "batch_size",
                       "-1");
  o = tu_init_options(2, 0, 4, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "num_kv_heads",
                       "0");
  o = tu_init_options(2, -2, 4, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "num_kv_heads",
                       "-2");
  o = tu_init_options(2, 2, 0, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "k_head_dim", "0");
  o = tu_init_options(2, 2, -7, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "k_head_dim",
                       "-7");
  o = tu_init_options(2, 2, 4, -1, KVC_DTYPE_FLOAT32);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "v_head_dim",
                       "-1");
  o = tu_init_options(2, 2, 4, 4, KVC_DTYPE_UNSET);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "dtype", "0");
  o = tu_init_options(2, 2, 4, 4, 9);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "dtype", "9");
  o = tu_init_options(2, 2, 4, 4, -1);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "dtype", "-1");
}

/* Per-layer arrays: the bad entry is the last one, so earlier layers would be initialized first. */
static void early_init_per_layer_cases(kvc_cache* c, uint32_t n) {
  const char* FN = "kvc_cache_early_initialization";
  int64_t heads[4] = {2, 2, 2, 2};
  int64_t dims[4] = {4, 4, 4, 4};
  char num[32];
  heads[n - 1] = 0;
  kvc_init_options o = tu_init_options(2, 2, 4, 4, KVC_DTYPE_FLOAT32);
  o.num_kv_heads_per_layer = heads;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "num_kv_heads_per_layer", "0");
  heads[n - 1] = 2;
  dims[n - 1] = -3;
  o = tu_init_options(2, 2, 4, 4, KVC_DTYPE_FLOAT32);
  o.head_dim_per_layer = dims;
  snprintf(num, sizeof num, "%u", n - 1);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &o), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "head_dim_per_layer", "-3", num);
}

static void test_early_initialization_bad_input(void) {
  kvc_init_options good = tu_init_options(2, 2, 4, 4, KVC_DTYPE_FLOAT32);
  EXPECT_ERR(kvc_cache_early_initialization(NULL, &good), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_early_initialization", "cache", "NULL");

  /* Fresh: no layer initialized yet. */
  kvc_layer_options l[3] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC_SLIDING, 3, 6),
                            tu_layer(KVC_LAYER_STATIC, 0, 5)};
  kvc_cache* c = tu_custom_cache(3, l);
  REQUIRE(c != NULL);
  early_init_cases(c);
  early_init_per_layer_cases(c, 3);
  kvc_cache_destroy(c);

  /* Partly initialized: layer 0 holds tokens, the others wait. */
  c = tu_custom_cache(3, l);
  REQUIRE(c != NULL);
  CHECK_OK(tu_update_tokens(c, 0, 2, 2, 3, 4, 4, 0, NULL, NULL));
  early_init_cases(c);
  early_init_per_layer_cases(c, 3);
  kvc_cache_destroy(c);

  /* Lazy: nothing to initialize, but the options are still wrong. */
  c = NULL;
  REQUIRE_OK(kvc_cache_create(NULL, &c));
  early_init_cases(c);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_create_null_out);
  TU_RUN(test_create_bad_struct_sizes);
  TU_RUN(test_create_bad_preset);
  TU_RUN(test_create_bad_custom_layers);
  TU_RUN(test_create_bad_presets_config);
  TU_RUN(test_create_bad_device);
  TU_RUN(test_create_from_tensors_bad_input);
  TU_RUN(test_clone_bad_input);
  TU_RUN(test_early_initialization_bad_input);
  return tu_finish();
}
