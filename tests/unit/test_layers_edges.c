/*
 * Edge parameters of the windowed kinds: window 1 (documented difference:
 * kvcache keeps W-1 = 0 tokens where Python's [-0:] slice keeps all), a
 * static sliding layer whose window exceeds max_cache_len (it slides over
 * max_cache_len slots instead of overflowing), and one-slot static layers.
 */
#include "test_util.h"

static void window_one_dynamic(kvc_layer_kind kind) {
  kvc_cache* c = tu_one_layer_cache(kind, 1, 0);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_info(c, 0).capacity, 0);
  CHECK_MASK(c, 3, 0, 3, 0);
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 2, 3, 2, 2, 0, NULL, &out));
  CHECK_KV_SEQ(out, 0, 1, 2);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_EMPTY(st);
  CHECK_EQ_I64(tu_seq(c, 0), 3);
  CHECK_MASK(c, 1, 0, 1, 3); /* a query sees only itself */
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 2, 1, 2, 2, 3, NULL, &out));
  CHECK_KV_SEQ(out, 3);
  st = tu_view(c, 0);
  CHECK_KV_EMPTY(st);
  CHECK_EQ_I64(tu_max_len(c, 0), 1);
  kvc_cache_destroy(c);
}

static void test_dynamic_window_one(void) {
  window_one_dynamic(KVC_LAYER_DYNAMIC_SLIDING);
  window_one_dynamic(KVC_LAYER_DYNAMIC_CHUNKED);
}

/* M' = 1: every one-token step rolls; several tokens return the previous one plus them. */
static void test_static_sliding_one_slot(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC_SLIDING, 1, 5);
  REQUIRE(c != NULL);
  kvc_kv out, st;
  CHECK_MASK(c, 1, 0, 1, 0);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 0, NULL, &out));
  CHECK_KV_SEQ(out, 0);
  CHECK_MASK(c, 1, 0, 1, 1);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 1, NULL, &out));
  CHECK_KV_SEQ(out, 1);
  CHECK_MASK(c, 3, 0, 3, 2);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 3, 2, 2, 2, NULL, &out));
  CHECK_KV_SEQ(out, 2, 3, 4);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 4);
  CHECK_EQ_I64(tu_seq(c, 0), 5);
  kvc_cache_destroy(c);
}

/* window > max_cache_len: M' = max_cache_len and the layer slides where STATIC would overflow. */
static void test_static_sliding_window_beyond_max(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC_SLIDING, 1000, 3);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_max_len(c, 0), 3);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 3, 2, 2, 0, NULL, NULL));
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 3, NULL, &out));
  CHECK_KV_SEQ(out, 1, 2, 3);
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  kvc_cache_destroy(c);
}

/* A one-slot static layer takes exactly one token. */
static void test_static_one_slot(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC, 0, 1);
  REQUIRE(c != NULL);
  kvc_kv out;
  CHECK_ERR(tu_update_tokens(c, 0, 1, 1, 2, 2, 2, 0, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 0, NULL, &out));
  CHECK_KV_SEQ(out, 0);
  CHECK_ERR(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 1, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_dynamic_window_one);
  TU_RUN(test_static_sliding_one_slot);
  TU_RUN(test_static_sliding_window_beyond_max);
  TU_RUN(test_static_one_slot);
  return tu_finish();
}
