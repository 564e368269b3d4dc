/*
 * test_errors_update.c: bad input to kvc_cache_update and
 * kvc_cache_update_all. Every defect a key or value tensor can have, every
 * disagreement with what a layer already stores, layer indices, static
 * overflow and cache positions; for update_all, defects in the last layer
 * only, so that an implementation that updates as it validates is caught.
 * Each case checks the exact code, the message, that the caller's out views
 * are untouched and that the cache is unchanged.
 */
#include "test_errors.h"


/* The fixture's geometry: batch 2, 2 heads, key head_dim 4, value head_dim 3 (so K and V differ). */
enum { B = 2, H = 2, DK = 4, DV = 3, NL = 4 };

/*
 * One layer of each kind the update path branches on, each holding 2
 * tokens. The last layer is the static one, so that update_all can
 * overflow only the last layer.
 */
static kvc_cache* make_cache(void) {
  kvc_layer_options l[NL] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0),
                             tu_layer(KVC_LAYER_STATIC_SLIDING, 3, 8), tu_layer(KVC_LAYER_STATIC, 0, 6)};
  kvc_cache* c = tu_custom_cache(NL, l);
  if (!c) return NULL;
  int ok = 1;
  for (uint32_t i = 0; ok && i < NL; i++) ok = CHECK_OK(tu_update_tokens(c, i, B, H, 2, DK, DV, 0, NULL, NULL));
  return tu_kept(c, ok);
}

/* Out views pre-filled with this byte must come back byte for byte. */
#define OUT_FILL 0xA5
static int kv_untouched(const kvc_kv* kv, size_t n) {
  const unsigned char* p = (const unsigned char*)kv;
  for (size_t i = 0; i < n * sizeof *kv; i++)
    if (p[i] != OUT_FILL) return 0;
  return 1;
}

/* ------------------------------------------------- tensor defects */

static int64_t shape5[5] = {B, H, 2, DK, 1};

static void spoil_ndim3(kvc_tensor* t) { t->ndim = 3; }
static void spoil_ndim5(kvc_tensor* t) { t->ndim = 5; t->shape = shape5; }
static void spoil_ndim0(kvc_tensor* t) { t->ndim = 0; }
static void spoil_shape_null(kvc_tensor* t) { t->shape = NULL; }
static void spoil_data_null(kvc_tensor* t) { t->data = NULL; }
static void spoil_int32(kvc_tensor* t) { t->dtype = (kvc_data_type){KVC_TYPE_CODE_INT, 32, 1}; }
static void spoil_uint8(kvc_tensor* t) { t->dtype = (kvc_data_type){KVC_TYPE_CODE_UINT, 8, 1}; }
static void spoil_float64(kvc_tensor* t) { t->dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 64, 1}; }
static void spoil_lanes2(kvc_tensor* t) { t->dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 32, 2}; }
static void spoil_lanes0(kvc_tensor* t) { t->dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 32, 0}; }
static void spoil_cuda(kvc_tensor* t) { t->device = (kvc_device){KVC_DEVICE_CUDA, 0}; }
static void spoil_rocm(kvc_tensor* t) { t->device = (kvc_device){KVC_DEVICE_ROCM, 0}; }
static void spoil_neg_seq(kvc_tensor* t) { t->shape[2] = -1; }
static void spoil_neg_head_dim(kvc_tensor* t) { t->shape[3] = -4; }
static void spoil_neg_batch(kvc_tensor* t) { t->shape[0] = -2; }
static void spoil_zero_batch(kvc_tensor* t) { t->shape[0] = 0; }
static void spoil_zero_heads(kvc_tensor* t) { t->shape[1] = 0; }
static void spoil_zero_head_dim(kvc_tensor* t) { t->shape[3] = 0; }

typedef struct tensor_defect {
  const char* what;
  void (*spoil)(kvc_tensor*);
  kvc_code code;
  const char* needle1; /* the field */
  const char* needle2; /* the value */
} tensor_defect;

static const tensor_defect defects[] = {
    {"ndim 3", spoil_ndim3, KVC_ERROR_SHAPE_MISMATCH, "ndim", "3"},
    {"ndim 5", spoil_ndim5, KVC_ERROR_SHAPE_MISMATCH, "ndim", "5"},
    {"ndim 0", spoil_ndim0, KVC_ERROR_SHAPE_MISMATCH, "ndim", "0"},
    {"shape NULL", spoil_shape_null, KVC_ERROR_INVALID_ARGUMENT, "shape", "NULL"},
    {"data NULL", spoil_data_null, KVC_ERROR_INVALID_ARGUMENT, "data", "NULL"},
    {"int32", spoil_int32, KVC_ERROR_DTYPE_MISMATCH, "dtype", "32"},
    {"uint8", spoil_uint8, KVC_ERROR_DTYPE_MISMATCH, "dtype", "8"},
    {"float64", spoil_float64, KVC_ERROR_DTYPE_MISMATCH, "dtype", "64"},
    {"lanes 2", spoil_lanes2, KVC_ERROR_DTYPE_MISMATCH, "lanes", "2"},
    {"lanes 0", spoil_lanes0, KVC_ERROR_DTYPE_MISMATCH, "lanes", "0"},
    {"CUDA", spoil_cuda, KVC_ERROR_DEVICE_MISMATCH, "CUDA", "CPU"},
    {"ROCm", spoil_rocm, KVC_ERROR_DEVICE_MISMATCH, "ROCm", "CPU"},
    {"seq -1", spoil_neg_seq, KVC_ERROR_SHAPE_MISMATCH, "shape[2]", "-1"},
    {"head_dim -4", spoil_neg_head_dim, KVC_ERROR_SHAPE_MISMATCH, "shape[3]", "-4"},
    {"batch -2", spoil_neg_batch, KVC_ERROR_SHAPE_MISMATCH, "shape[0]", "-2"},
    {"batch 0", spoil_zero_batch, KVC_ERROR_SHAPE_MISMATCH, "shape[0]", "0"},
    {"heads 0", spoil_zero_heads, KVC_ERROR_SHAPE_MISMATCH, "shape[1]", "0"},
    {"head_dim 0", spoil_zero_head_dim, KVC_ERROR_SHAPE_MISMATCH, "shape[3]", "0"},
};
#define N_DEFECTS (sizeof defects / sizeof defects[0])

/*
 * update(layer) with 2 good tokens, except that defect `d` is applied to the
 * key (which == 0) or the value (which == 1): must fail with the defect's
 * code, name "key"/"value", and change nothing.
 */
static void expect_defect_rejected(kvc_cache* c, uint32_t layer, const tensor_defect* d, int which) {
  tu_tensor k, v;
  tu_tensor_tokens(&k, B, H, 2, DK, 10, 0);
  tu_tensor_tokens(&v, B, H, 2, DV, 10, 1);
  d->spoil(which == 0 ? &k.t : &v.t);
  kvc_kv out;
  memset(&out, OUT_FILL, sizeof out);
  long failures = tu_failures_total;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update(c, layer, &k.t, &v.t, NULL, &out), d->code, "kvc_cache_update",
                       which == 0 ? "key" : "value", d->needle1, d->needle2);
  CHECK(kv_untouched(&out, 1));
  if (tu_failures_total != failures)
    fprintf(stderr, "    (defect: %s in the %s, layer %u)\n", d->what, which == 0 ? "key" : "value", layer);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}

static void test_update_bad_tensors_every_layer_kind(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  for (uint32_t layer = 0; layer < NL; layer++)
    for (size_t i = 0; i < N_DEFECTS; i++)
      for (int which = 0; which < 2; which++) expect_defect_rejected(c, layer, &defects[i], which);
  kvc_cache_destroy(c);
}

/* Uninitialized layers (first update) and a lazy cache (which must not grow). */
static void test_update_bad_tensors_fresh_layers(void) {
  kvc_cache* fresh = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_STATIC, 0, 6), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 3, 0));
  REQUIRE(fresh != NULL);
  kvc_cache* lazy = tu_lazy_cache();
  REQUIRE(lazy != NULL);
  for (size_t i = 0; i < N_DEFECTS; i++)
    for (int which = 0; which < 2; which++) {
      expect_defect_rejected(fresh, 0, &defects[i], which);
      expect_defect_rejected(fresh, 1, &defects[i], which);
      expect_defect_rejected(lazy, 0, &defects[i], which);
      expect_defect_rejected(lazy, 3, &defects[i], which);
    }
  CHECK_EQ_U64(kvc_cache_num_layers(lazy), 0);
  TU_DESTROY(fresh, lazy);
}

/* make_cache(), one token per row for any of its layers, and an out-parameter filled with OUT_FILL (a failed call
 * must leave it so). */
typedef struct one_token {
  kvc_cache* c;
  tu_tensor k, v;
  kvc_kv out;
} one_token;

static int one_token_make(one_token* f) {
  f->c = make_cache();
  if (!CHECK(f->c != NULL)) return 0;
  tu_tensor_tokens(&f->k, B, H, 1, DK, 10, 0);
  tu_tensor_tokens(&f->v, B, H, 1, DV, 10, 1);
  memset(&f->out, OUT_FILL, sizeof f->out);
  return 1;
}

/* Checks that every refused call left the out-parameter alone, then frees it all. */
static void one_token_finish(one_token* f) {
  CHECK(kv_untouched(&f->out, 1));
  tu_tensor_free(&f->k);
  tu_tensor_free(&f->v);
  kvc_cache_destroy(f->c);
}

static void test_update_null_arguments(void) {
  one_token f;
  REQUIRE(one_token_make(&f));
  EXPECT_ERR(kvc_cache_update(NULL, 0, &f.k.t, &f.v.t, NULL, &f.out), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_update",
             "cache", "NULL");
  EXPECT_ERR_UNCHANGED(f.c, kvc_cache_update(f.c, 0, NULL, &f.v.t, NULL, &f.out), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "key", "NULL");
  EXPECT_ERR_UNCHANGED(f.c, kvc_cache_update(f.c, 0, &f.k.t, NULL, NULL, &f.out), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update", "value", "NULL");
  one_token_finish(&f);
}

/* -------------------------------------------- key and value disagree */

static void test_update_key_value_disagree(void) {
  kvc_cache* c = make_cache();
  kvc_cache* lazy = tu_lazy_cache();
  REQUIRE(c != NULL && lazy != NULL);
  kvc_cache* caches[2] = {c, lazy};
  for (int ci = 0; ci < 2; ci++) {
    kvc_cache* cc = caches[ci];
    for (uint32_t layer = 0; layer < (ci == 0 ? (uint32_t)NL : 1u); layer++) {
      tu_tensor k, v;
      kvc_kv out;
      memset(&out, OUT_FILL, sizeof out);

      tu_tensor_tokens(&k, B, H, 2, DK, 10, 0);
      tu_tensor_tokens(&v, 1, H, 2, DV, 10, 1);
      EXPECT_ERR_UNCHANGED(cc, kvc_cache_update(cc, layer, &k.t, &v.t, NULL, &out), KVC_ERROR_SHAPE_MISMATCH,
                           "kvc_cache_update", "value", "batch", "1");
      tu_tensor_free(&v);
      tu_tensor_tokens(&v, B, 1, 2, DV, 10, 1);
      EXPECT_ERR_UNCHANGED(cc, kvc_cache_update(cc, layer, &k.t, &v.t, NULL, &out), KVC_ERROR_SHAPE_MISMATCH,
                           "kvc_cache_update", "value", "heads", "1");
      tu_tensor_free(&v);
      tu_tensor_tokens(&v, B, H, 3, DV, 10, 1);
      EXPECT_ERR_UNCHANGED(cc, kvc_cache_update(cc, layer, &k.t, &v.t, NULL, &out), KVC_ERROR_SHAPE_MISMATCH,
                           "kvc_cache_update", "value", "seq", "3");
      tu_tensor_free(&v);
      tu_tensor_tokens_ex(&v, KVC_DTYPE_FLOAT16, B, H, 2, DV, 10, 1, NULL);
      EXPECT_ERR_UNCHANGED(cc, kvc_cache_update(cc, layer, &k.t, &v.t, NULL, &out), KVC_ERROR_DTYPE_MISMATCH,
                           "kvc_cache_update", "value", "float16", "float32");
      tu_tensor_free(&v);
      CHECK(kv_untouched(&out, 1));
      tu_tensor_free(&k);
    }
  }
  CHECK_EQ_U64(kvc_cache_num_layers(lazy), 0);
  TU_DESTROY(c, lazy);
}

/* ------------------------------------- disagreement with stored state */

static void expect_stored_mismatch(kvc_cache* c, uint32_t layer, kvc_dtype dt, int64_t b, int64_t h, int64_t dk,
                                   int64_t dv, kvc_code code, const char* arg, const char* field,
                                   const char* value) {
  tu_tensor k, v;
  tu_tensor_tokens_ex(&k, dt, b, h, 1, dk, 10, 0, NULL);
  tu_tensor_tokens_ex(&v, dt, b, h, 1, dv, 10, 1, NULL);
  kvc_kv out;
  memset(&out, OUT_FILL, sizeof out);
  char layer_text[16];
  snprintf(layer_text, sizeof layer_text, "layer %u", layer);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update(c, layer, &k.t, &v.t, NULL, &out), code, "kvc_cache_update", arg, field,
                       value, layer_text);
  CHECK(kv_untouched(&out, 1));
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}

static void test_update_disagrees_with_stored(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  for (uint32_t layer = 0; layer < NL; layer++) {
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, 3, H, DK, DV, KVC_ERROR_SHAPE_MISMATCH, "key", "batch", "3");
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, 1, H, DK, DV, KVC_ERROR_SHAPE_MISMATCH, "key", "batch", "1");
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, B, 3, DK, DV, KVC_ERROR_SHAPE_MISMATCH, "key", "heads", "3");
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, B, H, 5, DV, KVC_ERROR_SHAPE_MISMATCH, "key", "head_dim",
                           "5");
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, B, H, DK, 7, KVC_ERROR_SHAPE_MISMATCH, "value", "head_dim",
                           "7");
    /* K and V swapped: each head_dim is valid for the other tensor. */
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, B, H, DV, DK, KVC_ERROR_SHAPE_MISMATCH, "key", "head_dim",
                           "3");
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT16, B, H, DK, DV, KVC_ERROR_DTYPE_MISMATCH, "key", "float16",
                           "float32");
    expect_stored_mismatch(c, layer, KVC_DTYPE_BFLOAT16, B, H, DK, DV, KVC_ERROR_DTYPE_MISMATCH, "key", "bfloat16",
                           "float32");
  }
  kvc_cache_destroy(c);
}

/* A layer initialized by early_initialization holds no token but has fixed its geometry. */
static void test_update_disagrees_with_early_initialization(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_STATIC, 0, 6), tu_layer(KVC_LAYER_DYNAMIC, 0, 0));
  REQUIRE(c != NULL);
  kvc_init_options o = tu_init_options(B, H, DK, DV, KVC_DTYPE_BFLOAT16);
  REQUIRE_OK(kvc_cache_early_initialization(c, &o));
  for (uint32_t layer = 0; layer < 2; layer++) {
    expect_stored_mismatch(c, layer, KVC_DTYPE_FLOAT32, B, H, DK, DV, KVC_ERROR_DTYPE_MISMATCH, "key", "float32",
                           "bfloat16");
    expect_stored_mismatch(c, layer, KVC_DTYPE_BFLOAT16, 4, H, DK, DV, KVC_ERROR_SHAPE_MISMATCH, "key", "batch",
                           "4");
    expect_stored_mismatch(c, layer, KVC_DTYPE_BFLOAT16, B, H, DK, 9, KVC_ERROR_SHAPE_MISMATCH, "value",
                           "head_dim", "9");
  }
  kvc_cache_destroy(c);
}

/* ------------------------------------------------ layers and overflow */

static void test_update_layer_out_of_range(void) {
  one_token f;
  REQUIRE(one_token_make(&f));
  static const struct {
    uint32_t layer;
    const char* named;
  } beyond[3] = {{NL, "4"}, {1000, "1000"}, {UINT32_MAX, "4294967295"}};
  for (int i = 0; i < 3; i++)
    EXPECT_ERR_UNCHANGED(f.c, kvc_cache_update(f.c, beyond[i].layer, &f.k.t, &f.v.t, NULL, &f.out),
                         KVC_ERROR_OUT_OF_RANGE, "kvc_cache_update", "layer", beyond[i].named);
  /* A lazy cache grows on demand, but not to four billion layers. */
  kvc_cache* lazy = tu_lazy_cache();
  if (CHECK(lazy != NULL))
    EXPECT_ERR_UNCHANGED(lazy, kvc_cache_update(lazy, UINT32_MAX, &f.k.t, &f.v.t, NULL, &f.out),
                         KVC_ERROR_OUT_OF_RANGE, "kvc_cache_update", "layer", "4294967295");
  one_token_finish(&f);
  kvc_cache_destroy(lazy);
}

/* An update of n tokens (numbered from `first`) into `layer` that a static store of max_cache_len `max_len` refuses. */
static void expect_overflow(kvc_cache* c, uint32_t layer, int64_t n, int64_t first, const char* max_len, kvc_kv* out) {
  char tokens[24];
  snprintf(tokens, sizeof tokens, "%lld", (long long)n);
  tu_tensor k, v;
  tu_tensor_tokens(&k, B, H, n, DK, first, 0);
  tu_tensor_tokens(&v, B, H, n, DV, first, 1);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update(c, layer, &k.t, &v.t, NULL, out), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_update", "max_cache_len", max_len, tokens);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}

static void test_update_static_overflow(void) {
  kvc_cache* c = make_cache(); /* layer 3: static, 6 slots, 2 used */
  REQUIRE(c != NULL);
  kvc_kv out;
  memset(&out, OUT_FILL, sizeof out);
  expect_overflow(c, 3, 5, 10, "6", &out);
  /* Fill it exactly (allowed), then one more token overflows. */
  REQUIRE_OK(tu_update_tokens(c, 3, B, H, 4, DK, DV, 2, NULL, NULL));
  expect_overflow(c, 3, 1, 10, "6", &out);
  CHECK(kv_untouched(&out, 1));

  /* A prompt longer than a fresh static layer: nothing may be initialized by the failed call. */
  kvc_cache* fresh = tu_one_layer_cache(KVC_LAYER_STATIC, 0, 3);
  REQUIRE(fresh != NULL);
  expect_overflow(fresh, 0, 4, 0, "3", &out);
  TU_DESTROY(fresh, c);
}

/* ---------------------------------------------------- update options */

static void expect_options_rejected(kvc_cache* c, uint32_t layer, int64_t n, const kvc_update_options* o,
                                    kvc_code code, const char* needle1, const char* needle2) {
  tu_tensor k, v;
  tu_tensor_tokens(&k, B, H, n, DK, 10, 0);
  tu_tensor_tokens(&v, B, H, n, DV, 10, 1);
  kvc_kv out;
  memset(&out, OUT_FILL, sizeof out);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update(c, layer, &k.t, &v.t, o, &out), code, "kvc_cache_update", needle1,
                       needle2);
  CHECK(kv_untouched(&out, 1));
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}

static void test_update_bad_options(void) {
  kvc_cache* c = make_cache();
  kvc_cache* fresh = tu_one_layer_cache(KVC_LAYER_STATIC, 0, 6);
  REQUIRE(c != NULL && fresh != NULL);
  const uint32_t sizes[] = {0, 4, (uint32_t)sizeof(kvc_update_options) - 1, (uint32_t)sizeof(kvc_update_options) + 8};
  char num[32];
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
    o.struct_size = sizes[i];
    snprintf(num, sizeof num, "%u", sizes[i]);
    for (uint32_t layer = 0; layer < NL; layer++)
      expect_options_rejected(c, layer, 1, &o, KVC_ERROR_INVALID_ARGUMENT, "struct_size", num);
    expect_options_rejected(fresh, 0, 1, &o, KVC_ERROR_INVALID_ARGUMENT, "struct_size", num);
  }

  kvc_cache* targets[2] = {c, fresh};
  const uint32_t static_layer[2] = {3, 0};
  for (int t = 0; t < 2; t++) {
    kvc_cache* cc = targets[t];
    uint32_t layer = static_layer[t];
    kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
    o.cache_position_length = 2;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_INVALID_ARGUMENT, "cache_position", "NULL");
    int64_t pos[3] = {2, 3, 4};
    o.cache_position = pos;
    o.cache_position_length = 1;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_INVALID_ARGUMENT, "cache_position_length", "1");
    o.cache_position_length = 3;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_INVALID_ARGUMENT, "cache_position_length", "3");
    o.cache_position_length = 0;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_INVALID_ARGUMENT, "cache_position_length", "0");
    int64_t beyond[2] = {2, 6};
    o.cache_position = beyond;
    o.cache_position_length = 2;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_OUT_OF_RANGE, "cache_position[1]", "6");
    int64_t negative[2] = {-1, 2};
    o.cache_position = negative;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_OUT_OF_RANGE, "cache_position[0]", "-1");
    int64_t huge[2] = {3, INT64_MAX};
    o.cache_position = huge;
    expect_options_rejected(cc, layer, 2, &o, KVC_ERROR_OUT_OF_RANGE, "cache_position[1]", "9223372036854775807");
  }
  /*
   * The static sliding layer (layer 2) has min(3, 8) = 3 slots and holds 2
   * tokens. Positions are read while the window still has room ('Static sliding and chunked layers', case 4):
   * one more token at slot 3 is beyond it.
   */
  kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
  int64_t pos[1] = {3};
  o.cache_position = pos;
  o.cache_position_length = 1;
  expect_options_rejected(c, 2, 1, &o, KVC_ERROR_OUT_OF_RANGE, "cache_position[0]", "3");
  pos[0] = -1;
  expect_options_rejected(c, 2, 1, &o, KVC_ERROR_OUT_OF_RANGE, "cache_position[0]", "-1");
  TU_DESTROY(c, fresh);
}

/* ---------------------------------------------------------- update_all */

/* The keys and values of one update_all call: up to NL + 1 layers (one too many) of n tokens each. */
typedef struct step {
  int count;
  tu_tensor k[NL + 1], v[NL + 1];
  kvc_tensor keys[NL + 1], values[NL + 1];
} step;

/* `count` layers of float32 [B, H, n, DK] keys and [B, H, n, DV] values, except that the last layer's pair is of
 * dtype last_dt, batch last_b and head dims last_dk / last_dv: the one layer a test makes disagree. */
static void step_make_ex(step* s, int count, int64_t n, kvc_dtype last_dt, int64_t last_b, int64_t last_dk,
                         int64_t last_dv) {
  s->count = count;
  for (int i = 0; i < count; i++) {
    int last = i == count - 1;
    kvc_dtype dt = last ? last_dt : KVC_DTYPE_FLOAT32;
    int64_t b = last ? last_b : B;
    tu_tensor_tokens_ex(&s->k[i], dt, b, H, n, last ? last_dk : DK, 10, 0, NULL);
    tu_tensor_tokens_ex(&s->v[i], dt, b, H, n, last ? last_dv : DV, 10, 1, NULL);
    s->keys[i] = s->k[i].t;
    s->values[i] = s->v[i].t;
  }
}

/* NL layers that agree. */
static void step_make(step* s, int64_t n) { step_make_ex(s, NL, n, KVC_DTYPE_FLOAT32, B, DK, DV); }

static void step_free(step* s) {
  for (int i = 0; i < s->count; i++) {
    tu_tensor_free(&s->k[i]);
    tu_tensor_free(&s->v[i]);
  }
}

static void test_update_all_null_arguments(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  step s;
  step_make(&s, 1);
  kvc_kv out[NL];
  memset(out, OUT_FILL, sizeof out);
  const char* FN = "kvc_cache_update_all";
  EXPECT_ERR(kvc_cache_update_all(NULL, NL, s.keys, s.values, NULL, out), KVC_ERROR_INVALID_ARGUMENT, FN, "cache",
             "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, NULL, s.values, NULL, out), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "keys", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, s.keys, NULL, NULL, out), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "values", "NULL");
  CHECK(kv_untouched(out, NL));
  step_free(&s);
  kvc_cache_destroy(c);
}

static void test_update_all_too_many_layers(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  step s;
  step_make_ex(&s, NL + 1, 1, KVC_DTYPE_FLOAT32, B, DK, DV);
  kvc_kv out[NL + 1];
  memset(out, OUT_FILL, sizeof out);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL + 1, s.keys, s.values, NULL, out), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_update_all", "4");
  CHECK(kv_untouched(out, NL + 1));
  step_free(&s);
  kvc_cache_destroy(c);
}

/* Every tensor defect, in keys[last] or values[last] only. */
static void expect_all_last_defect(kvc_cache* c, uint32_t n, const tensor_defect* d, int which) {
  step s;
  step_make(&s, 1);
  d->spoil(which == 0 ? &s.keys[n - 1] : &s.values[n - 1]);
  kvc_kv out[NL];
  memset(out, OUT_FILL, sizeof out);
  char arg[16];
  snprintf(arg, sizeof arg, "%s[%u]", which == 0 ? "keys" : "values", n - 1);
  long failures = tu_failures_total;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, n, s.keys, s.values, NULL, out), d->code, "kvc_cache_update_all",
                       arg, d->needle1, d->needle2);
  CHECK(kv_untouched(out, NL));
  if (tu_failures_total != failures) fprintf(stderr, "    (defect: %s in %s)\n", d->what, arg);
  step_free(&s);
}

static void test_update_all_last_layer_tensor_defect(void) {
  kvc_cache* c = make_cache();
  kvc_cache* lazy = tu_lazy_cache();
  REQUIRE(c != NULL && lazy != NULL);
  for (size_t i = 0; i < N_DEFECTS; i++)
    for (int which = 0; which < 2; which++) {
      expect_all_last_defect(c, NL, &defects[i], which);
      expect_all_last_defect(lazy, NL, &defects[i], which);
    }
  CHECK_EQ_U64(kvc_cache_num_layers(lazy), 0);
  TU_DESTROY(c, lazy);
}

static void test_update_all_last_layer_disagrees(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  const char* FN = "kvc_cache_update_all";
  kvc_kv out[NL];
  memset(out, OUT_FILL, sizeof out);
  step s;

  /* Batch of the last layer's pair only. */
  step_make_ex(&s, NL, 1, KVC_DTYPE_FLOAT32, 3, DK, DV);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, s.keys, s.values, NULL, out), KVC_ERROR_SHAPE_MISMATCH, FN,
                       "keys[3]", "batch", "3", "layer 3");
  step_free(&s);

  /* Value head_dim of the last layer. */
  step_make_ex(&s, NL, 1, KVC_DTYPE_FLOAT32, B, DK, DV + 2);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, s.keys, s.values, NULL, out), KVC_ERROR_SHAPE_MISMATCH, FN,
                       "values[3]", "head_dim", "5", "layer 3");
  step_free(&s);

  /* Dtype of the last layer (both K and V, so only the stored dtype disagrees). */
  step_make_ex(&s, NL, 1, KVC_DTYPE_FLOAT16, B, DK, DV);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, s.keys, s.values, NULL, out), KVC_ERROR_DTYPE_MISMATCH, FN,
                       "keys[3]", "float16", "float32");
  step_free(&s);

  /* 5 tokens fit layers 0-2 (dynamic, sliding, static sliding) but overflow the static layer 3. */
  step_make(&s, 5);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, s.keys, s.values, NULL, out), KVC_ERROR_OUT_OF_RANGE, FN,
                       "layer 3", "max_cache_len", "6", "5");
  step_free(&s);

  /* Options are validated before any layer is touched. */
  step_make(&s, 1);
  kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
  o.struct_size = 0;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, NL, s.keys, s.values, &o, out), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "struct_size", "0");
  step_free(&s);
  CHECK(kv_untouched(out, NL));
  kvc_cache_destroy(c);
}

/* A lazy cache with one layer: update_all over 3 layers, the third bad, must not add layers 1 and 2. */
static void test_update_all_lazy_does_not_grow(void) {
  kvc_cache* lazy = tu_holding_tokens(tu_lazy_cache(), 0, B, H, 2, DK, DV);
  REQUIRE(lazy != NULL);
  step s;
  step_make(&s, 1);
  s.values[2].dtype = (kvc_data_type){KVC_TYPE_CODE_INT, 32, 1};
  kvc_kv out[NL];
  memset(out, OUT_FILL, sizeof out);
  EXPECT_ERR_UNCHANGED(lazy, kvc_cache_update_all(lazy, 3, s.keys, s.values, NULL, out), KVC_ERROR_DTYPE_MISMATCH,
                       "kvc_cache_update_all", "values[2]", "32");
  CHECK_EQ_U64(kvc_cache_num_layers(lazy), 1);
  CHECK(kv_untouched(out, NL));
  step_free(&s);
  kvc_cache_destroy(lazy);
}

int main(void) {
  TU_RUN(test_update_null_arguments);
  TU_RUN(test_update_bad_tensors_every_layer_kind);
  TU_RUN(test_update_bad_tensors_fresh_layers);
  TU_RUN(test_update_key_value_disagree);
  TU_RUN(test_update_disagrees_with_stored);
  TU_RUN(test_update_disagrees_with_early_initialization);
  TU_RUN(test_update_layer_out_of_range);
  TU_RUN(test_update_static_overflow);
  TU_RUN(test_update_bad_options);
  TU_RUN(test_update_all_null_arguments);
  TU_RUN(test_update_all_too_many_layers);
  TU_RUN(test_update_all_last_layer_tensor_defect);
  TU_RUN(test_update_all_last_layer_disagrees);
  TU_RUN(test_update_all_lazy_does_not_grow);
  return tu_finish();
}
