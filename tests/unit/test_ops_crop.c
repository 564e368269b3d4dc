/*
 * crop and activate_past_recording (docs/semantics.md, 'Crop and past recording' and 'Edge cases', items 7-8), including the
 * attention-layer parts of transformers' CacheCroppingTests: keys shaped
 * (2, 32, 45, 32), W = 12, past recording activated.
 */
#include "test_util.h"

#define CB 2
#define CH 32
#define CD 32

static kvc_cache* cropping_cache(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 12, 0));
  if (!c) return NULL;
  return tu_kept(c, CHECK_OK(kvc_cache_activate_past_recording(c)) &&
                       CHECK_OK(tu_update_tokens(c, 0, CB, CH, 45, CD, CD, 0, NULL, NULL)) &&
                       CHECK_OK(tu_update_tokens(c, 1, CB, CH, 45, CD, CD, 0, NULL, NULL)));
}

static void test_crop_with_past(void) {
  kvc_cache* c = cropping_cache();
  REQUIRE(c != NULL);
  int64_t want[64];
  kvc_kv st = tu_view(c, 1);
  CHECK_TOKENS(st, tu_range(want, 0, 45), 45); /* everything recorded */
  REQUIRE_OK(kvc_cache_crop(c, -3));
  st = tu_view(c, 1);
  CHECK_SHAPE(st.key, CB, CH, 11, CD);
  CHECK_TOKENS(st, tu_range(want, 31, 42), 11); /* keys[..., -12+1-3 : -3, :] */
  st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 0, 42), 42);
  CHECK_EQ_I64(tu_seq(c, 0), 42);
  CHECK_EQ_I64(tu_seq(c, 1), 42);
  kvc_cache_destroy(c);
}

static void test_crop_with_zero_still_shrinks_states(void) {
  kvc_cache* c = cropping_cache();
  REQUIRE(c != NULL);
  int64_t want[64];
  REQUIRE_OK(kvc_cache_crop(c, 0));
  kvc_kv st = tu_view(c, 1);
  CHECK_TOKENS(st, tu_range(want, 34, 45), 11);
  st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 0, 45), 45);
  CHECK_EQ_I64(tu_seq(c, 1), 45);
  kvc_cache_destroy(c);
}

static void test_crop_outside_range(void) {
  kvc_cache* c = cropping_cache();
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, -46));
  for (uint32_t i = 0; i < 2; i++) {
    kvc_kv st = tu_view(c, i);
    CHECK_SHAPE(st.key, CB, CH, 0, CD);
    CHECK_SHAPE(st.value, CB, CH, 0, CD);
    CHECK_EQ_I64(tu_info(c, i).stored_length, 0);
  }
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  /* transformers lets the sliding counter go to -1; kvcache clamps it at 0 (documented difference) */
  CHECK_EQ_I64(tu_seq(c, 1), 0);
  CHECK_MASK(c, 1, 1, 1, 0);
  kvc_cache_destroy(c);
}

static void test_bc_crop_with_positive_value(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC, 0, 0, 0, CB, CH, 45, CD);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, 42));
  int64_t want[64];
  kvc_kv st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 0, 42), 42);
  REQUIRE_OK(kvc_cache_crop(c, 50)); /* at least the current length: a no-op */
  st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 0, 42), 42);
  CHECK_EQ_I64(tu_seq(c, 0), 42);
  kvc_cache_destroy(c);
}

/* After a crop, updates continue from the cropped length. */
static void test_dynamic_crop_then_update(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC, 0, 0, 0, 1, 2, 6, 3);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, -2));
  kvc_kv out;
  CHECK_MASK(c, 2, 0, 6, 0);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 2, 2, 3, 3, 4, NULL, &out));
  int64_t want[8];
  CHECK_TOKENS(out, tu_range(want, 0, 6), 6);
  kvc_cache_destroy(c);
}

/* Before the window is reached a sliding layer crops like a dynamic one and cum follows. */
static void sliding_crop_before_window(kvc_layer_kind kind) {
  kvc_cache* c = tu_filled_layer_cache(kind, 8, 0, 0, 1, 1, 5, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, -2));
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1, 2);
  CHECK_EQ_I64(tu_seq(c, 0), 3);
  CHECK_MASK(c, 1, 0, 4, 0);
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 3, 2, 2, 3, NULL, &out));
  CHECK_KV_SEQ(out, 0, 1, 2, 3, 4, 5);
  REQUIRE_OK(kvc_cache_crop(c, 2)); /* legacy absolute length */
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1);
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  REQUIRE_OK(kvc_cache_crop(c, 0));
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1);
  kvc_cache_destroy(c);
}

static void test_sliding_crop_before_window(void) {
  sliding_crop_before_window(KVC_LAYER_DYNAMIC_SLIDING);
  sliding_crop_before_window(KVC_LAYER_DYNAMIC_CHUNKED);
}

/* Once the window is reached, a sliding layer that does not record refuses every crop. */
static void test_sliding_crop_after_window_without_recording(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_SLIDING, 4, 0, 0, 1, 1, 4, 2);
  REQUIRE(c != NULL); /* cum == W */
  const int64_t args[3] = {-1, 0, 1};
  for (int i = 0; i < 3; i++) CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_crop(c, args[i]), KVC_ERROR_INVALID_STATE));
  kvc_cache_destroy(c);
}

/* A recording sliding layer refuses a positive crop once the window is reached. */
static void test_sliding_recording_positive_crop(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_SLIDING, 4, 0, 1, 1, 1, 6, 2);
  REQUIRE(c != NULL);
  CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_crop(c, 3), KVC_ERROR_INVALID_STATE));
  kvc_cache_destroy(c);
}

/*
 * Recording stores everything it receives, but an update returns only what
 * attention needs, the last window-1 stored tokens plus the new ones, so the
 * returned length equals kv_length (transformers 5.23; transformers 5.15 (docs/semantics.md, 'Version notes')
 * returned the whole record).
 */
static void test_recording_returns_and_mask(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_SLIDING, 4, 0, 1, 1, 1, 6, 2);
  REQUIRE(c != NULL);
  CHECK_MASK(c, 1, 0, 4, 3);
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 6, NULL, &out));
  CHECK_KV_SEQ(out, 3, 4, 5, 6);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1, 2, 3, 4, 5, 6);
  CHECK_EQ_I64(tu_seq(c, 0), 7);
  REQUIRE_OK(kvc_cache_crop(c, -1)); /* reject the last token */
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 3, 4, 5);
  CHECK_EQ_I64(tu_seq(c, 0), 6);
  CHECK_MASK(c, 1, 0, 4, 3);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 6, NULL, &out));
  CHECK_KV_SEQ(out, 3, 4, 5, 6);
  kvc_cache_destroy(c);
}

/* 'Dynamic sliding layer trace' continued: after crop(-2) on 45 recorded tokens, recording goes on. */
static void test_recording_continues_after_crop(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_CHUNKED, 12, 0, 1, 1, 2, 45, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, -2));
  CHECK_EQ_I64(tu_info(c, 0).records_past, 1);
  kvc_kv out;
  int64_t want[16];
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 2, 1, 2, 2, 43, NULL, &out));
  CHECK_TOKENS(out, tu_range(want, 32, 44), 12);
  kvc_kv st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 32, 44), 12);
  REQUIRE_OK(kvc_cache_crop(c, 0));
  st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 33, 44), 11);
  CHECK_EQ_I64(tu_seq(c, 0), 44);
  kvc_cache_destroy(c);
}

/* activate_past_recording marks only dynamic sliding layers. */
static void test_activate_past_recording_flags(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0),
                                 tu_layer(KVC_LAYER_DYNAMIC_CHUNKED, 4, 0), tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 8));
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 4; i++) CHECK_EQ_I64(tu_info(c, i).records_past, 0);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  CHECK_EQ_I64(tu_info(c, 0).records_past, 0);
  CHECK_EQ_I64(tu_info(c, 1).records_past, 1);
  CHECK_EQ_I64(tu_info(c, 2).records_past, 1);
  CHECK_EQ_I64(tu_info(c, 3).records_past, 0);
  kvc_cache_destroy(c);
}

/* Cropping layers that never received a token, or a lazy cache without layers, is harmless. */
static void test_crop_uninitialized(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0));
  REQUIRE(c != NULL);
  CHECK_UNCHANGED_BY(c, CHECK_OK(kvc_cache_crop(c, -1)), CHECK_OK(kvc_cache_crop(c, 0)));
  kvc_cache_destroy(c);

  c = NULL;
  REQUIRE_OK(kvc_cache_create(NULL, &c));
  CHECK_OK(kvc_cache_crop(c, -3));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  kvc_cache_destroy(c);
}

/* A lazy DynamicCache crops all its layers. */
static void test_crop_lazy_cache(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(tu_update_tokens(c, i, 2, 1, 5, 2, 2, 0, NULL, NULL));
  REQUIRE_OK(kvc_cache_crop(c, -2));
  for (uint32_t i = 0; i < 3; i++) {
    kvc_kv st = tu_view(c, i);
    CHECK_KV_SEQ(st, 0, 1, 2);
  }
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_crop_with_past);
  TU_RUN(test_crop_with_zero_still_shrinks_states);
  TU_RUN(test_crop_outside_range);
  TU_RUN(test_bc_crop_with_positive_value);
  TU_RUN(test_dynamic_crop_then_update);
  TU_RUN(test_sliding_crop_before_window);
  TU_RUN(test_sliding_crop_after_window_without_recording);
  TU_RUN(test_sliding_recording_positive_crop);
  TU_RUN(test_recording_returns_and_mask);
  TU_RUN(test_recording_continues_after_crop);
  TU_RUN(test_activate_past_recording_flags);
  TU_RUN(test_crop_uninitialized);
  TU_RUN(test_crop_lazy_cache);
  return tu_finish();
}
