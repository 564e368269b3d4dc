/*
 * test_errors_ops.c: bad input to the cache operations: crop, past
 * recording, reorder, repeat-interleave, select, split, stack and reset.
 * Operations act on every layer, so each case has a layer that would accept
 * the call next to the one that refuses it: a failed call must leave both as
 * they were (snapshot before == snapshot after), and out-params untouched.
 */
#include "test_errors.h"


static char sentinel_storage;
#define SENTINEL_CACHE ((kvc_cache*)(void*)&sentinel_storage)

/*
 * A two-layer cache: layer 0 `kind0`, layer 1 `kind1` (window and
 * max_cache_len as given), both updated with `tokens` tokens of [batch,
 * heads, tokens, dk|dv] of dtype `dt`.
 */
static kvc_cache* make_pair(kvc_layer_kind kind0, kvc_layer_kind kind1, int64_t window, int64_t max_len,
                            int64_t batch, int64_t heads, int64_t dk, int64_t dv, kvc_dtype dt, int64_t tokens) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(kind0, window, max_len), tu_layer(kind1, window, max_len));
  if (!c) return NULL;
  int ok = 1;
  for (uint32_t i = 0; ok && i < 2; i++)
    ok = CHECK_OK(tu_update_kv_dt(c, i, dt, batch, heads, tokens, dk, dv, NULL, 0, NULL, NULL));
  return tu_kept(c, ok);
}

/* Batch 4, 3 tokens: dynamic + dynamic sliding (window 8, not reached). */
static kvc_cache* make_dynamic(void) {
  return make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 4, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
}

/* ---------------------------------------------------------------- crop */

static void test_null_cache(void) {
  int64_t idx[2] = {0, 1};
  kvc_cache* out[2] = {SENTINEL_CACHE, SENTINEL_CACHE};
  size_t count = 777;
  EXPECT_ERR(kvc_cache_crop(NULL, -1), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_crop", "cache", "NULL");
  EXPECT_ERR(kvc_cache_activate_past_recording(NULL), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_activate_past_recording", "cache", "NULL");
  EXPECT_ERR(kvc_cache_reorder(NULL, idx, 2), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_reorder", "cache", "NULL");
  EXPECT_ERR(kvc_cache_batch_repeat_interleave(NULL, 2), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_batch_repeat_interleave", "cache", "NULL");
  EXPECT_ERR(kvc_cache_batch_select_indices(NULL, idx, 2), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_batch_select_indices", "cache", "NULL");
  EXPECT_ERR(kvc_cache_batch_split(NULL, 2, 1, out, 2, &count), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_batch_split",
             "cache", "NULL");
  EXPECT_ERR(kvc_cache_reset(NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_reset", "cache", "NULL");
  CHECK_EQ_PTR(out[0], SENTINEL_CACHE);
  CHECK_EQ_PTR(out[1], SENTINEL_CACHE);
  CHECK_EQ_U64(count, 777);
}

/* Static sliding layers whose window has moved (5 tokens seen, 4 slots) cannot be cropped (5.24 would rewind a rolled buffer). */
static void test_crop_static_sliding_after_window(void) {
  static const kvc_layer_kind statics[] = {KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED};
  static const char* names[] = {"static sliding", "static chunked"};
  static const int64_t tokens[] = {-1, 2, -100};
  char num[32];
  for (size_t k = 0; k < sizeof statics / sizeof statics[0]; k++) {
    /* The dynamic layer comes first: it must not be cropped before the static one refuses. */
    kvc_cache* c = make_pair(KVC_LAYER_DYNAMIC, statics[k], 4, 6, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 5);
    kvc_cache* r = make_pair(statics[k], KVC_LAYER_DYNAMIC, 4, 6, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 5);
    REQUIRE(c != NULL && r != NULL);
    for (size_t t = 0; t < sizeof tokens / sizeof tokens[0]; t++) {
      snprintf(num, sizeof num, "%lld", (long long)tokens[t]);
      EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, tokens[t]), KVC_ERROR_INVALID_STATE, "kvc_cache_crop", names[k],
                           "seen 5", num);
      EXPECT_ERR_UNCHANGED(r, kvc_cache_crop(r, tokens[t]), KVC_ERROR_INVALID_STATE, "kvc_cache_crop", names[k],
                           "seen 5", num);
    }
    TU_DESTROY(c, r);
  }
}

static void test_crop_sliding_after_window(void) {
  static const kvc_layer_kind windowed[] = {KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DYNAMIC_CHUNKED};
  for (size_t k = 0; k < sizeof windowed / sizeof windowed[0]; k++) {
    /* Window 3, 5 tokens seen: the window is reached. */
    kvc_cache* c = make_pair(KVC_LAYER_DYNAMIC, windowed[k], 3, 0, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 5);
    REQUIRE(c != NULL);
    static const int64_t any[] = {-1, 0, 1, -5, INT64_MIN};
    for (size_t t = 0; t < sizeof any / sizeof any[0]; t++)
      EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, any[t]), KVC_ERROR_INVALID_STATE, "kvc_cache_crop",
                           "kvc_cache_activate_past_recording", "window", "3");

    /* Recording: rolling back is allowed, but only by a negative count (or 0). */
    REQUIRE_OK(kvc_cache_activate_past_recording(c));
    REQUIRE_OK(tu_update_tokens(c, 0, 2, 2, 2, 4, 3, 5, NULL, NULL));
    REQUIRE_OK(tu_update_tokens(c, 1, 2, 2, 2, 4, 3, 5, NULL, NULL));
    static const int64_t positive[] = {1, 2, 6, INT64_MAX};
    char num[32];
    for (size_t t = 0; t < sizeof positive / sizeof positive[0]; t++) {
      snprintf(num, sizeof num, "%lld", (long long)positive[t]);
      EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, positive[t]), KVC_ERROR_INVALID_STATE, "kvc_cache_crop", "tokens",
                           num, "negative");
    }
    kvc_cache_destroy(c);
  }
}

/* ------------------------------------------------------------- reorder */

static void test_reorder_bad_indices(void) {
  kvc_cache* c = make_dynamic();
  kvc_cache* s = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_STATIC, 0, 6, 4, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
  REQUIRE(c != NULL && s != NULL);
  kvc_cache* caches[2] = {c, s};
  for (int i = 0; i < 2; i++) {
    kvc_cache* x = caches[i];
    int64_t idx[4] = {0, 1, 2, 3};
    EXPECT_ERR_UNCHANGED(x, kvc_cache_reorder(x, NULL, 4), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_reorder",
                         "beam_idx", "NULL");
    EXPECT_ERR_UNCHANGED(x, kvc_cache_reorder(x, idx, 0), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_reorder", "count",
                         "0");
    int64_t beyond[4] = {3, 2, 4, 0};
    EXPECT_ERR_UNCHANGED(x, kvc_cache_reorder(x, beyond, 4), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_reorder",
                         "beam_idx[2]", "4");
    int64_t negative[4] = {1, 0, 3, -1};
    EXPECT_ERR_UNCHANGED(x, kvc_cache_reorder(x, negative, 4), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_reorder",
                         "beam_idx[3]", "-1");
    int64_t huge[2] = {INT64_MAX, 0};
    EXPECT_ERR_UNCHANGED(x, kvc_cache_reorder(x, huge, 2), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_reorder",
                         "beam_idx[0]", "9223372036854775807");
  }
  TU_DESTROY(c, s);
}

/* Layers of different batch sizes: an index valid for one layer but not another changes neither. */
static void test_reorder_index_valid_for_one_layer_only(void) {
  kvc_cache* c = tu_holding_tokens(tu_lazy_cache(), 0, 4, 2, 3, 4, 3);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 1, 2, 2, 3, 4, 3, 0, NULL, NULL));
  int64_t idx[2] = {1, 3};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_reorder(c, idx, 2), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_reorder", "beam_idx[1]",
                       "3");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, idx, 2), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_batch_select_indices", "indices[1]", "3");
  kvc_cache_destroy(c);
}

/* --------------------------------------------- repeat and select */

/* Both batch operations on c, whose layer 1 is static: refused, naming the layer, with c unchanged; c is destroyed. */
static void expect_static_batch_refusals(kvc_cache* c) {
  const int64_t idx[2] = {1, 0};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_repeat_interleave(c, 2), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_batch_repeat_interleave", "layer 1", "static");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, idx, 2), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_batch_select_indices", "layer 1", "static");
  kvc_cache_destroy(c);
}

static void test_batch_ops_on_static_layers(void) {
  static const kvc_layer_kind statics[] = {KVC_LAYER_STATIC, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED};
  for (size_t k = 0; k < sizeof statics / sizeof statics[0]; k++) {
    kvc_cache* c = make_pair(KVC_LAYER_DYNAMIC, statics[k], 4, 6, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
    REQUIRE(c != NULL);
    expect_static_batch_refusals(c);
  }
  /* A static layer that holds nothing yet is still a static layer. */
  kvc_cache* c = tu_holding_tokens(TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC, 0, 6)),
                                   0, 2, 2, 3, 4, 3);
  REQUIRE(c != NULL);
  expect_static_batch_refusals(c);
}

static void test_repeat_interleave_bad_repeats(void) {
  kvc_cache* c = make_dynamic();
  REQUIRE(c != NULL);
  static const int64_t bad[] = {0, -1, -2, INT64_MIN};
  char num[32];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(num, sizeof num, "%lld", (long long)bad[i]);
    EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_repeat_interleave(c, bad[i]), KVC_ERROR_INVALID_ARGUMENT,
                         "kvc_cache_batch_repeat_interleave", "repeats", num);
  }
  kvc_cache_destroy(c);
}

/* batch * repeats does not fit int64: the call must refuse, not wrap around. */
static void test_repeat_interleave_overflowing_batch(void) {
  kvc_cache* c = make_dynamic();
  REQUIRE(c != NULL);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_repeat_interleave(c, INT64_MAX), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_batch_repeat_interleave", "repeats", "9223372036854775807");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_repeat_interleave(c, INT64_MAX / 2), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_batch_repeat_interleave", "repeats", "4611686018427387903");
  kvc_cache_destroy(c);
}

static void test_select_indices_bad_indices(void) {
  kvc_cache* c = make_dynamic();
  REQUIRE(c != NULL);
  int64_t ok[2] = {0, 1};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, NULL, 2), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_batch_select_indices", "indices", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, ok, 0), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_batch_select_indices", "count", "0");
  int64_t beyond[3] = {0, 2, 4};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, beyond, 3), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_batch_select_indices", "indices[2]", "4");
  int64_t negative[1] = {-2};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, negative, 1), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_batch_select_indices", "indices[0]", "-2");
  kvc_cache_destroy(c);
}

/* ---------------------------------------------------------- batch_split */

static void test_batch_split_bad_arguments(void) {
  kvc_cache* c = make_dynamic(); /* batch 4 */
  REQUIRE(c != NULL);
  const char* FN = "kvc_cache_batch_split";
  kvc_cache* out[8];
  size_t count = 777;
  for (int i = 0; i < 8; i++) out[i] = SENTINEL_CACHE;

  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, 2, NULL, 8, &count), KVC_ERROR_INVALID_ARGUMENT, FN, "out",
                       "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, 2, out, 8, NULL), KVC_ERROR_INVALID_ARGUMENT, FN, "count",
                       "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, 0, out, 8, &count), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "split_size", "0");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, -1, out, 8, &count), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "split_size", "-1");
  static const int64_t wrong_full[] = {3, 5, 0, -4};
  char num[32];
  for (size_t i = 0; i < sizeof wrong_full / sizeof wrong_full[0]; i++) {
    snprintf(num, sizeof num, "%lld", (long long)wrong_full[i]);
    EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, wrong_full[i], 2, out, 8, &count), KVC_ERROR_INVALID_ARGUMENT,
                         FN, "full_batch_size", num, "4");
  }
  /* Too little room: the error says how many handles are needed, and nothing is made. */
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, 1, out, 3, &count), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "capacity", "3", "4");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, 3, out, 1, &count), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "capacity", "1", "2");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, 2, out, 0, &count), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "capacity", "0", "2");
  /* A split_size past the batch makes one cache; near INT64_MAX the count must not overflow into a huge one. */
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, INT64_MAX, out, 0, &count), KVC_ERROR_INVALID_ARGUMENT, FN,
                       "capacity", "0", "makes 1 caches");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_split(c, 4, INT64_MAX - 2, out, 0, &count), KVC_ERROR_INVALID_ARGUMENT,
                       FN, "capacity", "0", "makes 1 caches");
  for (int i = 0; i < 8; i++) CHECK_EQ_PTR(out[i], SENTINEL_CACHE);
  CHECK_EQ_U64(count, 777);
  kvc_cache_destroy(c);
}

/* ---------------------------------------------------- from_batch_splits */

#define EXPECT_STACK_ERR(splits, n, code, ...)                                               \
  do {                                                                                       \
    kvc_cache* out_ = SENTINEL_CACHE;                                                        \
    EXPECT_ERR(kvc_cache_from_batch_splits((splits), (n), &out_), (code), __VA_ARGS__);      \
    CHECK_EQ_PTR(out_, SENTINEL_CACHE);                                                      \
    if (out_ != SENTINEL_CACHE) kvc_cache_destroy(out_);                                     \
  } while (0)

/* splits[0] is a good split; `other` disagrees with it in one respect. Neither may change. */
static void expect_incompatible(const kvc_cache* first, const kvc_cache* other, kvc_code code, const char* what,
                                const char* value) {
  const kvc_cache* splits[2] = {first, other};
  tu_snapshot b0, b1, a0, a1;
  snapshot(first, &b0);
  snapshot(other, &b1);
  EXPECT_STACK_ERR(splits, 2, code, "kvc_cache_from_batch_splits", "splits[1]", what, value);
  snapshot(first, &a0);
  snapshot(other, &a1);
  CHECK_SNAPSHOT_EQUAL(&b0, &a0);
  CHECK_SNAPSHOT_EQUAL(&b1, &a1);
  snapshot_free(&b0);
  snapshot_free(&b1);
  snapshot_free(&a0);
  snapshot_free(&a1);
}

static void test_from_batch_splits_bad_arguments(void) {
  const char* FN = "kvc_cache_from_batch_splits";
  kvc_cache* c = make_dynamic();
  REQUIRE(c != NULL);
  const kvc_cache* one[2] = {c, NULL};
  EXPECT_STACK_ERR(NULL, 2, KVC_ERROR_INVALID_ARGUMENT, FN, "splits", "NULL");
  EXPECT_STACK_ERR(one, 0, KVC_ERROR_INVALID_ARGUMENT, FN, "count", "0");
  EXPECT_STACK_ERR(one, 2, KVC_ERROR_INVALID_ARGUMENT, FN, "splits[1]", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_from_batch_splits(one, 1, NULL), KVC_ERROR_INVALID_ARGUMENT, FN, "out", "NULL");
  kvc_cache_destroy(c);
}

static void test_from_batch_splits_mismatched(void) {
  /* Batch 2 each; batch sizes may differ between splits, nothing else may. */
  kvc_cache* good = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
  kvc_cache* batch3 = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 3, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
  REQUIRE(good != NULL && batch3 != NULL);
  {
    const kvc_cache* splits[2] = {good, batch3};
    kvc_cache* stacked = NULL;
    CHECK_OK(kvc_cache_from_batch_splits(splits, 2, &stacked)); /* the baseline the failures differ from */
    kvc_cache_destroy(stacked);
  }
  kvc_cache* heads = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 2, 5, 4, 3, KVC_DTYPE_FLOAT32, 3);
  kvc_cache* kdim = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 2, 2, 6, 3, KVC_DTYPE_FLOAT32, 3);
  kvc_cache* vdim = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 2, 2, 4, 7, KVC_DTYPE_FLOAT32, 3);
  kvc_cache* f16 = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 2, 2, 4, 3, KVC_DTYPE_FLOAT16, 3);
  kvc_cache* longer = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 8, 0, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 5);
  kvc_cache* window = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, 6, 0, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
  kvc_cache* kind = make_pair(KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC, 0, 0, 2, 2, 4, 3, KVC_DTYPE_FLOAT32, 3);
  kvc_cache* three = tu_lazy_cache();
  REQUIRE(three != NULL);
  for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(tu_update_tokens(three, i, 2, 2, 3, 4, 3, 0, NULL, NULL));
  REQUIRE(heads && kdim && vdim && f16 && longer && window && kind);

  expect_incompatible(good, heads, KVC_ERROR_SHAPE_MISMATCH, "heads", "5");
  expect_incompatible(good, kdim, KVC_ERROR_SHAPE_MISMATCH, "head_dim", "6");
  expect_incompatible(good, vdim, KVC_ERROR_SHAPE_MISMATCH, "head_dim", "7");
  expect_incompatible(good, f16, KVC_ERROR_DTYPE_MISMATCH, "float16", "float32");
  expect_incompatible(good, longer, KVC_ERROR_INVALID_ARGUMENT, "length", "5");
  expect_incompatible(good, window, KVC_ERROR_INVALID_ARGUMENT, "window", "6");
  expect_incompatible(good, kind, KVC_ERROR_INVALID_ARGUMENT, "kind", "dynamic");
  expect_incompatible(good, three, KVC_ERROR_INVALID_ARGUMENT, "layers", "3");

  kvc_cache* all[] = {good, batch3, heads, kdim, vdim, f16, longer, window, kind, three};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) kvc_cache_destroy(all[i]);
}

int main(void) {
  TU_RUN(test_null_cache);
  TU_RUN(test_crop_static_sliding_after_window);
  TU_RUN(test_crop_sliding_after_window);
  TU_RUN(test_reorder_bad_indices);
  TU_RUN(test_reorder_index_valid_for_one_layer_only);
  TU_RUN(test_batch_ops_on_static_layers);
  TU_RUN(test_repeat_interleave_bad_repeats);
  TU_RUN(test_select_indices_bad_indices);
  TU_RUN(test_batch_split_bad_arguments);
  TU_RUN(test_from_batch_splits_bad_arguments);
  TU_RUN(test_from_batch_splits_mismatched);
  /* Last: an implementation that wraps the batch size around may not survive it. */
  TU_RUN(test_repeat_interleave_overflowing_batch);
  return tu_finish();
}
