/*
 * test_errors_encdec.c: bad input to the encoder-decoder cache: creation
 * (NULL, the same cache twice), the cross-attention protocol, and the
 * operations that act on both caches (which must refuse non-dynamic caches,
 * and must not touch the self-attention cache when the cross-attention one
 * refuses). Each case checks the code, the message, untouched out-params and
 * that both caches and the is_updated flags are unchanged.
 */
#include "test_errors.h"


/* Same as EXPECT_ERR_UNCHANGED, for an encoder-decoder cache (both caches and the flags). */
#define EXPECT_ED_ERR_UNCHANGED(ed, expr, code, ...) CHECK_ED_UNCHANGED_BY(ed, EXPECT_ERR(expr, code, __VA_ARGS__))

static char sentinel_storage;
#define SENTINEL_ED ((kvc_encoder_decoder_cache*)(void*)&sentinel_storage)
#define OUT_FILL 0xA5

static int kv_untouched(const kvc_kv* kv) {
  const unsigned char* p = (const unsigned char*)kv;
  for (size_t i = 0; i < sizeof *kv; i++)
    if (p[i] != OUT_FILL) return 0;
  return 1;
}

/* Two layers of `kind` (window 3 / 6 slots where it matters), each holding `tokens` tokens of batch `batch`. */
static kvc_cache* make_cache(kvc_layer_kind kind, int64_t batch, int64_t tokens) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(kind, 3, 6), tu_layer(kind, 3, 6));
  for (uint32_t i = 0; c && i < 2 && tokens > 0; i++) CHECK_OK(tu_update_tokens(c, i, batch, 2, tokens, 4, 3, 0, NULL, NULL));
  return c;
}

/*
 * self: two layers holding 2 tokens. cross: layer 0 computed (5 encoder
 * tokens), layer 1 early-initialized for float32 but not computed.
 */
static kvc_encoder_decoder_cache* make_ed(kvc_layer_kind self_kind, kvc_layer_kind cross_kind, int64_t self_batch,
                                          int64_t cross_batch) {
  kvc_cache* self = make_cache(self_kind, self_batch, 2);
  kvc_cache* cross = make_cache(cross_kind, cross_batch, 0);
  if (!self || !cross) goto fail;
  kvc_init_options io = tu_init_options(cross_batch, 2, 4, 3, KVC_DTYPE_FLOAT32);
  if (!CHECK_OK(kvc_cache_early_initialization(cross, &io))) goto fail;
  kvc_encoder_decoder_cache* ed = NULL;
  if (!CHECK_OK(kvc_encoder_decoder_cache_create(self, cross, &ed))) goto fail;
  tu_tensor k, v;
  tu_tensor_tokens(&k, cross_batch, 2, 5, 4, 100, 0);
  tu_tensor_tokens(&v, cross_batch, 2, 5, 3, 100, 1);
  int ok = CHECK_OK(kvc_encoder_decoder_cache_update_cross(ed, 0, &k.t, &v.t, NULL));
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  if (!ok) {
    kvc_encoder_decoder_cache_destroy(ed);
    return NULL;
  }
  return ed;
fail:
  TU_DESTROY(self, cross);
  return NULL;
}

static kvc_encoder_decoder_cache* make_dynamic_ed(int64_t batch) {
  return make_ed(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC, batch, batch);
}

/* -------------------------------------------------------------- create */

static void test_create_bad_arguments(void) {
  const char* FN = "kvc_encoder_decoder_cache_create";
  kvc_cache* a = make_cache(KVC_LAYER_DYNAMIC, 2, 2);
  kvc_cache* b = make_cache(KVC_LAYER_DYNAMIC, 2, 2);
  REQUIRE(a != NULL && b != NULL);
  kvc_encoder_decoder_cache* out = SENTINEL_ED;
  EXPECT_ERR_UNCHANGED(b, kvc_encoder_decoder_cache_create(NULL, b, &out), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "self_attention", "NULL");
  EXPECT_ERR_UNCHANGED(a, kvc_encoder_decoder_cache_create(a, NULL, &out), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "cross_attention", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_create(NULL, NULL, &out), KVC_ERROR_INVALID_ARGUMENT, FN, "NULL");
  EXPECT_ERR_UNCHANGED(a, kvc_encoder_decoder_cache_create(a, a, &out), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "self_attention", "cross_attention", "same");
  EXPECT_ERR_UNCHANGED(a, kvc_encoder_decoder_cache_create(a, b, NULL), KVC_ERROR_INVALID_ARGUMENT, FN, "out",
                       "NULL");
  CHECK_EQ_PTR(out, SENTINEL_ED);
  /* On error the caller still owns both: destroying them here must be the only free (ASan checks). */
  TU_DESTROY(a, b);
}

/* ---------------------------------------------------------- NULL handles */

static void test_null_handles(void) {
  int32_t flag = -7;
  int64_t idx[2] = {0, 1};
  kvc_kv kv;
  memset(&kv, OUT_FILL, sizeof kv);
  kvc_encoder_decoder_cache* out[2] = {SENTINEL_ED, SENTINEL_ED};
  size_t count = 777;
  tu_tensor k, v;
  tu_tensor_tokens(&k, 2, 2, 1, 4, 0, 0);
  tu_tensor_tokens(&v, 2, 2, 1, 3, 0, 1);

  EXPECT_ERR(kvc_encoder_decoder_cache_is_updated(NULL, 0, &flag), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_is_updated", "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_update_cross(NULL, 0, &k.t, &v.t, &kv), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_update_cross", "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_crop(NULL, -1), KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_crop",
             "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_reorder(NULL, idx, 2), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_reorder", "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_batch_repeat_interleave(NULL, 2), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_batch_repeat_interleave", "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_batch_select_indices(NULL, idx, 2), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_batch_select_indices", "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_batch_split(NULL, 2, 1, out, 2, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_batch_split", "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_from_batch_splits(NULL, 2, out), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_from_batch_splits", "splits", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_reset(NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_reset",
             "cache", "NULL");
  EXPECT_ERR(kvc_encoder_decoder_cache_clone(NULL, out), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_encoder_decoder_cache_clone", "cache", "NULL");
  CHECK_EQ_I64(flag, -7);
  CHECK(kv_untouched(&kv));
  CHECK_EQ_PTR(out[0], SENTINEL_ED);
  CHECK_EQ_PTR(out[1], SENTINEL_ED);
  CHECK_EQ_U64(count, 777);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}

static void test_null_out(void) {
  kvc_encoder_decoder_cache* ed = make_dynamic_ed(2);
  REQUIRE(ed != NULL);
  kvc_encoder_decoder_cache* out[2] = {SENTINEL_ED, SENTINEL_ED};
  size_t count = 777;
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_is_updated(ed, 0, NULL), KVC_ERROR_INVALID_ARGUMENT,
                          "kvc_encoder_decoder_cache_is_updated", "out", "NULL");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_clone(ed, NULL), KVC_ERROR_INVALID_ARGUMENT,
                          "kvc_encoder_decoder_cache_clone", "out", "NULL");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 2, 1, NULL, 2, &count),
                          KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_batch_split", "out", "NULL");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 2, 1, out, 2, NULL),
                          KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_batch_split", "count", "NULL");
  const kvc_encoder_decoder_cache* splits[1] = {ed};
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_from_batch_splits(splits, 1, NULL),
                          KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_from_batch_splits", "out", "NULL");
  CHECK_EQ_PTR(out[0], SENTINEL_ED);
  CHECK_EQ_U64(count, 777);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* -------------------------------------------------------- update_cross */

static void test_update_cross_bad_input(void) {
  const char* FN = "kvc_encoder_decoder_cache_update_cross";
  kvc_encoder_decoder_cache* ed = make_dynamic_ed(2);
  REQUIRE(ed != NULL);
  kvc_kv kv;
  memset(&kv, OUT_FILL, sizeof kv);
  tu_tensor k, v;
  tu_tensor_tokens(&k, 2, 2, 5, 4, 100, 0);
  tu_tensor_tokens(&v, 2, 2, 5, 3, 100, 1);

  /* Layer 1 is not computed yet: key and value are required and checked like any update. */
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, NULL, &v.t, &kv),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "key", "NULL", "1");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, &k.t, NULL, &kv),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "value", "NULL", "1");
  k.t.ndim = 3;
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, &k.t, &v.t, &kv),
                          KVC_ERROR_SHAPE_MISMATCH, FN, "key", "ndim", "3");
  k.t.ndim = 4;
  v.t.device.device_type = KVC_DEVICE_CUDA;
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, &k.t, &v.t, &kv),
                          KVC_ERROR_DEVICE_MISMATCH, FN, "value", "CUDA");
  v.t.device.device_type = KVC_DEVICE_CPU;
  k.t.dtype = (kvc_data_type){KVC_TYPE_CODE_INT, 32, 1};
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, &k.t, &v.t, &kv),
                          KVC_ERROR_DTYPE_MISMATCH, FN, "key", "32");
  k.t.dtype = v.t.dtype;
  k.shape[0] = 3; /* the early initialization fixed batch 2 */
  v.shape[0] = 3;
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, &k.t, &v.t, &kv),
                          KVC_ERROR_SHAPE_MISMATCH, FN, "key", "batch", "3");
  k.shape[0] = 2;
  v.shape[0] = 2;
  tu_tensor k16, v16;
  tu_tensor_tokens_ex(&k16, KVC_DTYPE_FLOAT16, 2, 2, 5, 4, 100, 0, NULL);
  tu_tensor_tokens_ex(&v16, KVC_DTYPE_FLOAT16, 2, 2, 5, 3, 100, 1, NULL);
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1, &k16.t, &v16.t, &kv),
                          KVC_ERROR_DTYPE_MISMATCH, FN, "key", "float16", "float32");
  tu_tensor_free(&k16);
  tu_tensor_free(&v16);

  /* The cross cache has two layers and is not lazy. */
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 2, &k.t, &v.t, &kv),
                          KVC_ERROR_OUT_OF_RANGE, FN, "layer", "2");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, 1u << 24, &k.t, &v.t, &kv),
                          KVC_ERROR_OUT_OF_RANGE, FN, "layer", "16777216");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_update_cross(ed, UINT32_MAX, &k.t, &v.t, &kv),
                          KVC_ERROR_OUT_OF_RANGE, FN, "layer", "4294967295");
  CHECK(kv_untouched(&kv));
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* -------------------------------------------------------- crop and batch ops */

/* Pairs where at least one cache is not dynamic. */
typedef struct kinds {
  kvc_layer_kind self, cross;
} kinds;
static const kinds not_dynamic[] = {
    {KVC_LAYER_STATIC, KVC_LAYER_DYNAMIC},
    {KVC_LAYER_DYNAMIC, KVC_LAYER_STATIC},
    {KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC},
    {KVC_LAYER_DYNAMIC, KVC_LAYER_STATIC_CHUNKED},
};
#define N_NOT_DYNAMIC (sizeof not_dynamic / sizeof not_dynamic[0])

static void test_ops_on_non_dynamic_caches(void) {
  int64_t idx[2] = {1, 0};
  for (size_t i = 0; i < N_NOT_DYNAMIC; i++) {
    kvc_encoder_decoder_cache* ed = make_ed(not_dynamic[i].self, not_dynamic[i].cross, 2, 2);
    REQUIRE(ed != NULL);
    const char* which = not_dynamic[i].self == KVC_LAYER_DYNAMIC ? "cross" : "self";
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_crop(ed, -1), KVC_ERROR_UNSUPPORTED,
                            "kvc_encoder_decoder_cache_crop", "dynamic", which);
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_repeat_interleave(ed, 2), KVC_ERROR_UNSUPPORTED,
                            "kvc_encoder_decoder_cache_batch_repeat_interleave", "dynamic", which);
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_select_indices(ed, idx, 2), KVC_ERROR_UNSUPPORTED,
                            "kvc_encoder_decoder_cache_batch_select_indices", "dynamic", which);
    kvc_encoder_decoder_cache* out[2] = {SENTINEL_ED, SENTINEL_ED};
    size_t count = 777;
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 2, 1, out, 2, &count),
                            KVC_ERROR_UNSUPPORTED, "kvc_encoder_decoder_cache_batch_split", "dynamic", which);
    const kvc_encoder_decoder_cache* splits[1] = {ed};
    kvc_encoder_decoder_cache* stacked = SENTINEL_ED;
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_from_batch_splits(splits, 1, &stacked),
                            KVC_ERROR_UNSUPPORTED, "kvc_encoder_decoder_cache_from_batch_splits", "dynamic", which);
    CHECK_EQ_PTR(out[0], SENTINEL_ED);
    CHECK_EQ_PTR(out[1], SENTINEL_ED);
    CHECK_EQ_U64(count, 777);
    CHECK_EQ_PTR(stacked, SENTINEL_ED);
    kvc_encoder_decoder_cache_destroy(ed);
  }
}

static void test_crop_sliding_self_after_window(void) {
  /* Self: dynamic sliding, window 3, 2 + 3 tokens seen. */
  kvc_encoder_decoder_cache* ed = make_ed(KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DYNAMIC, 2, 2);
  REQUIRE(ed != NULL);
  kvc_cache* self = kvc_encoder_decoder_cache_self_attention(ed);
  REQUIRE_OK(tu_update_tokens(self, 0, 2, 2, 3, 4, 3, 2, NULL, NULL));
  REQUIRE_OK(tu_update_tokens(self, 1, 2, 2, 3, 4, 3, 2, NULL, NULL));
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_crop(ed, -1), KVC_ERROR_INVALID_STATE,
                          "kvc_encoder_decoder_cache_crop", "activate_past_recording", "window");
  kvc_encoder_decoder_cache_destroy(ed);
}

static void test_reorder_and_select_bad_indices(void) {
  const char* RFN = "kvc_encoder_decoder_cache_reorder";
  const char* SFN = "kvc_encoder_decoder_cache_batch_select_indices";
  /* Reorder is defined for static caches too, so try both. */
  kvc_encoder_decoder_cache* eds[2] = {make_dynamic_ed(2), make_ed(KVC_LAYER_STATIC, KVC_LAYER_STATIC, 2, 2)};
  REQUIRE(eds[0] != NULL && eds[1] != NULL);
  for (int i = 0; i < 2; i++) {
    kvc_encoder_decoder_cache* ed = eds[i];
    int64_t beyond[2] = {0, 2};
    int64_t negative[2] = {-1, 0};
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_reorder(ed, NULL, 2), KVC_ERROR_INVALID_ARGUMENT, RFN,
                            "beam_idx", "NULL");
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_reorder(ed, beyond, 2), KVC_ERROR_OUT_OF_RANGE, RFN,
                            "beam_idx[1]", "2");
    EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_reorder(ed, negative, 2), KVC_ERROR_OUT_OF_RANGE, RFN,
                            "beam_idx[0]", "-1");
    if (i == 0) {
      EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_select_indices(ed, NULL, 2),
                              KVC_ERROR_INVALID_ARGUMENT, SFN, "indices", "NULL");
      EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_select_indices(ed, beyond, 2),
                              KVC_ERROR_OUT_OF_RANGE, SFN, "indices[1]", "2");
      EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_repeat_interleave(ed, 0),
                              KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_batch_repeat_interleave",
                              "repeats", "0");
      EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_repeat_interleave(ed, -3),
                              KVC_ERROR_INVALID_ARGUMENT, "kvc_encoder_decoder_cache_batch_repeat_interleave",
                              "repeats", "-3");
    }
  }
  kvc_encoder_decoder_cache_destroy(eds[0]);
  kvc_encoder_decoder_cache_destroy(eds[1]);

  /*
   * Self holds 4 rows, cross 2: index 3 is valid for the self-attention
   * cache but not for the cross-attention cache, which is handled second.
   * The self-attention cache must not have been reordered.
   */
  kvc_encoder_decoder_cache* ed = make_ed(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC, 4, 2);
  REQUIRE(ed != NULL);
  int64_t idx[2] = {1, 3};
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_reorder(ed, idx, 2), KVC_ERROR_OUT_OF_RANGE, RFN,
                          "beam_idx[1]", "3");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_select_indices(ed, idx, 2), KVC_ERROR_OUT_OF_RANGE,
                          SFN, "indices[1]", "3");
  kvc_encoder_decoder_cache_destroy(ed);
}

static void test_batch_split_bad_arguments(void) {
  const char* FN = "kvc_encoder_decoder_cache_batch_split";
  kvc_encoder_decoder_cache* ed = make_dynamic_ed(4);
  REQUIRE(ed != NULL);
  kvc_encoder_decoder_cache* out[4] = {SENTINEL_ED, SENTINEL_ED, SENTINEL_ED, SENTINEL_ED};
  size_t count = 777;
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 4, 0, out, 4, &count),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "split_size", "0");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 3, 1, out, 4, &count),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "full_batch_size", "3", "4");
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 4, 1, out, 3, &count),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "capacity", "3", "4");
  for (int i = 0; i < 4; i++) CHECK_EQ_PTR(out[i], SENTINEL_ED);
  CHECK_EQ_U64(count, 777);
  kvc_encoder_decoder_cache_destroy(ed);

  /* Self holds 4 rows, cross 2: full_batch_size 4 fits one cache only, so nothing may be split. */
  ed = make_ed(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC, 4, 2);
  REQUIRE(ed != NULL);
  EXPECT_ED_ERR_UNCHANGED(ed, kvc_encoder_decoder_cache_batch_split(ed, 4, 2, out, 4, &count),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "full_batch_size", "4", "2");
  for (int i = 0; i < 4; i++) CHECK_EQ_PTR(out[i], SENTINEL_ED);
  CHECK_EQ_U64(count, 777);
  kvc_encoder_decoder_cache_destroy(ed);
}

static void test_from_batch_splits_bad_arguments(void) {
  const char* FN = "kvc_encoder_decoder_cache_from_batch_splits";
  kvc_encoder_decoder_cache* a = make_dynamic_ed(2);
  kvc_encoder_decoder_cache* b = make_dynamic_ed(2);
  REQUIRE(a != NULL && b != NULL);
  kvc_encoder_decoder_cache* out = SENTINEL_ED;
  const kvc_encoder_decoder_cache* with_null[2] = {a, NULL};
  EXPECT_ED_ERR_UNCHANGED(a, kvc_encoder_decoder_cache_from_batch_splits(with_null, 0, &out),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "count", "0");
  EXPECT_ED_ERR_UNCHANGED(a, kvc_encoder_decoder_cache_from_batch_splits(with_null, 2, &out),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "splits[1]", "NULL");

  /* b's self-attention cache holds one token more than a's. */
  REQUIRE_OK(tu_update_tokens(kvc_encoder_decoder_cache_self_attention(b), 0, 2, 2, 1, 4, 3, 2, NULL, NULL));
  const kvc_encoder_decoder_cache* splits[2] = {a, b};
  tu_ed_snapshot before_b, after_b;
  snapshot_ed(b, &before_b);
  EXPECT_ED_ERR_UNCHANGED(a, kvc_encoder_decoder_cache_from_batch_splits(splits, 2, &out),
                          KVC_ERROR_INVALID_ARGUMENT, FN, "splits[1]", "length", "3");
  snapshot_ed(b, &after_b);
  CHECK_ED_SNAPSHOT_EQUAL(&before_b, &after_b);
  snapshot_ed_free(&before_b);
  snapshot_ed_free(&after_b);
  CHECK_EQ_PTR(out, SENTINEL_ED);
  kvc_encoder_decoder_cache_destroy(a);
  kvc_encoder_decoder_cache_destroy(b);
}

int main(void) {
  TU_RUN(test_create_bad_arguments);
  TU_RUN(test_null_handles);
  TU_RUN(test_null_out);
  TU_RUN(test_update_cross_bad_input);
  TU_RUN(test_ops_on_non_dynamic_caches);
  TU_RUN(test_crop_sliding_self_after_window);
  TU_RUN(test_reorder_and_select_bad_indices);
  TU_RUN(test_batch_split_bad_arguments);
  TU_RUN(test_from_batch_splits_bad_arguments);
  return tu_finish();
}
