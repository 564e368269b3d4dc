/*
 * transformers 5.24's crop of static layers, the 5.23 behaviour kept behind
 * kvc_cache_options.transformers_release, and is_croppable
 * (docs/transformers-5.24.md, items 1 and 7).
 */
#include "test_util.h"

/* A custom cache of the listed layers following transformers `release` (0: the newest). */
static kvc_cache* cache_for(uint32_t release, uint32_t n, const kvc_layer_options* layers) {
  kvc_cache_options o = tu_custom_options(n, layers);
  o.transformers_release = release;
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  return c;
}

/* cache_for with the one layer `layer`. */
static kvc_cache* one_layer_for(uint32_t release, kvc_layer_options layer) { return cache_for(release, 1, &layer); }

/* StaticLayer.crop: the counter moves back, the slots stay; the next update overwrites them. */
static void test_static_crop_moves_the_counter(void) {
  kvc_cache* c = tu_holding_tokens(one_layer_for(0, tu_layer(KVC_LAYER_STATIC, 0, 8)), 0, 1, 1, 5, 2, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, -2));
  CHECK_EQ_I64(tu_seq(c, 0), 3);
  CHECK_LAYER_SEQ(c, 0, 0, 1, 2, 3, 4, -1, -1, -1); /* untouched: transformers' buffers too */
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 10, NULL, NULL));
  CHECK_LAYER_SEQ(c, 0, 0, 1, 2, 10, 4, -1, -1, -1);
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  REQUIRE_OK(kvc_cache_crop(c, 0));
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  REQUIRE_OK(kvc_cache_crop(c, 2)); /* positive: the legacy absolute length, as on dynamic layers */
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  REQUIRE_OK(kvc_cache_crop(c, 6));
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  REQUIRE_OK(kvc_cache_crop(c, -100)); /* transformers' counter would go negative: clamped (difference 3) */
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  kvc_cache_destroy(c);
}

/* StaticSlidingWindowLayer.crop: exact while the window has not moved, refused after. */
static void test_static_sliding_crop_until_the_window_moves(void) {
  const kvc_layer_kind kinds[2] = {KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED};
  for (int i = 0; i < 2; i++) {
    kvc_cache* c = one_layer_for(0, tu_layer(kinds[i], 4, 8)); /* 4 slots */
    REQUIRE(c != NULL);
    REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 3, 2, 2, 0, NULL, NULL));
    REQUIRE_OK(kvc_cache_crop(c, -1));
    CHECK_EQ_I64(tu_seq(c, 0), 2);
    REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 2, 2, 2, 20, NULL, NULL));
    CHECK_LAYER_SEQ(c, 0, 0, 1, 20, 21);
    CHECK_EQ_I64(tu_seq(c, 0), 4); /* full, but nothing evicted yet */
    REQUIRE_OK(kvc_cache_crop(c, -1));
    REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 2, 2, 2, 30, NULL, NULL)); /* 5 seen: the window moves */
    CHECK_EQ_I64(tu_seq(c, 0), 5);
    CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_crop(c, -1), KVC_ERROR_INVALID_STATE));
    CHECK_OK(kvc_cache_crop(c, 0)); /* removes nothing */
    CHECK_EQ_I64(tu_seq(c, 0), 5);
    kvc_cache_destroy(c);
  }
}

/* A cache following 5.23 refuses to crop static kinds, before cropping any layer; the static hybrids still crop their linear part. */
static void test_release_5_23_keeps_static_crop_unsupported(void) {
  const kvc_layer_kind kinds[3] = {KVC_LAYER_STATIC, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_STATIC_CHUNKED};
  for (int i = 0; i < 3; i++) {
    kvc_layer_options l[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(kinds[i], 4, 8)};
    kvc_cache* c = cache_for(52300, 2, l);
    REQUIRE(c != NULL);
    REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 3, 2, 2, 0, NULL, NULL));
    REQUIRE_OK(tu_update_tokens(c, 1, 1, 1, 3, 2, 2, 0, NULL, NULL));
    CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_crop(c, -1), KVC_ERROR_UNSUPPORTED));
    CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_crop(c, 0), KVC_ERROR_UNSUPPORTED));
    kvc_cache_destroy(c);
  }
  kvc_cache* c = tu_holding_tokens(one_layer_for(52300, tu_layer(KVC_LAYER_DYNAMIC, 0, 0)), 0, 1, 1, 3, 2, 2);
  REQUIRE(c != NULL);
  CHECK_OK(kvc_cache_crop(c, -1));
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  kvc_cache_destroy(c);
}

static void test_release_is_checked(void) {
  kvc_layer_options l = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options o = tu_custom_options(1, &l);
  kvc_cache* c = NULL;
  o.transformers_release = 523; /* 5.23 written as a bare number */
  CHECK_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(c == NULL);
  o.transformers_release = 45700;
  CHECK_OK(kvc_cache_create(&o, &c));
  kvc_cache_destroy(c);
}

static uint8_t croppable(const kvc_cache* c, int32_t layer) {
  uint8_t v = 99;
  CHECK_OK(kvc_cache_is_croppable(c, layer, &v));
  return v;
}

/* is_croppable per kind, in 5.24 and as 5.23 reported it. */
static void test_is_croppable(void) {
  kvc_layer_options l[6] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0),        tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0),
                            tu_layer(KVC_LAYER_STATIC, 0, 8),         tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 8),
                            tu_layer(KVC_LAYER_STATIC_CHUNKED, 8, 4), tu_layer(KVC_LAYER_QUANTIZED, 0, 0)};
  const uint8_t now[6] = {1, 1, 1, 0, 1, 0}, then[6] = {1, 1, 0, 0, 0, 1};
  kvc_cache* c = cache_for(0, 6, l);
  kvc_cache* old = cache_for(52300, 6, l);
  REQUIRE(c != NULL && old != NULL);
  for (int32_t i = 0; i < 6; i++) {
    CHECK_EQ_U64(croppable(c, i), now[i]);
    CHECK_EQ_U64(croppable(old, i), then[i]);
  }
  CHECK_EQ_U64(croppable(c, KVC_ALL_LAYERS), 0);
  uint8_t v = 7;
  CHECK_ERR(kvc_cache_is_croppable(c, 6, &v), KVC_ERROR_OUT_OF_RANGE);
  CHECK_ERR(kvc_cache_is_croppable(c, -2, &v), KVC_ERROR_OUT_OF_RANGE);
  CHECK_ERR(kvc_cache_is_croppable(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_cache_is_croppable(NULL, 0, &v), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_U64(v, 7);
  TU_DESTROY(c, old);

  /* The static full layers alone: croppable; a linear layer before any state: not yet. */
  kvc_layer_options s[2] = {tu_layer(KVC_LAYER_STATIC, 0, 8), tu_layer(KVC_LAYER_STATIC_SLIDING, 8, 8)};
  c = cache_for(0, 2, s);
  REQUIRE(c != NULL);
  CHECK_EQ_U64(croppable(c, KVC_ALL_LAYERS), 1);
  kvc_cache_destroy(c);
  c = one_layer_for(0, tu_layer(KVC_LAYER_LINEAR, 0, 0));
  REQUIRE(c != NULL);
  CHECK_EQ_U64(croppable(c, 0), 0);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_static_crop_moves_the_counter);
  TU_RUN(test_static_sliding_crop_until_the_window_moves);
  TU_RUN(test_release_5_23_keeps_static_crop_unsupported);
  TU_RUN(test_release_is_checked);
  TU_RUN(test_is_croppable);
  return tu_finish();
}
