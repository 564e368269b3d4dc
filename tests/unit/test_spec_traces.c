/*
 * The worked traces of docs/semantics.md (the dynamic, dynamic sliding, static and static sliding layer traces, and the examples of 'Static sliding and chunked layers'):
 * one batch row, one head, head_dim 1, each tensor written as its tokens.
 * Every step checks the mask sizes asked before the call, the returned view,
 * the stored view and the sequence length.
 */
#include "test_util.h"

#define B 1
#define H 1
#define D 1

/* update with the listed tokens; mask sizes asked first must be (len, off). */
#define STEP(c, len, off, out, ...)                                                         \
  do {                                                                                      \
    CHECK_MASK((c), TU_COUNT(__VA_ARGS__), 0, (len), (off));                                \
    REQUIRE_OK(tu_update_list((c), 0, B, H, D, D, TU_LIST(__VA_ARGS__), TU_COUNT(__VA_ARGS__), NULL, (out))); \
  } while (0)

/* 'Dynamic layer trace' */
static void test_d1_dynamic_layer(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_DYNAMIC, 0, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 2, 0, &out, 1, 2);
  CHECK_KV_SEQ(out, 1, 2);
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  STEP(c, 3, 0, &out, 3);
  CHECK_KV_SEQ(out, 1, 2, 3);
  STEP(c, 4, 0, &out, 4);
  CHECK_KV_SEQ(out, 1, 2, 3, 4);
  CHECK_EQ_I64(tu_seq(c, 0), 4);

  CHECK_OK(kvc_cache_crop(c, -1));
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 1, 2, 3);
  CHECK_EQ_I64(tu_seq(c, 0), 3);

  CHECK_OK(kvc_cache_crop(c, 0)); /* HEAD: a no-op (v4.57 emptied the layer) */
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 1, 2, 3);

  CHECK_OK(kvc_cache_crop(c, 2)); /* legacy positive: an absolute length */
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 1, 2);
  CHECK_EQ_I64(tu_seq(c, 0), 2);

  CHECK_OK(kvc_cache_crop(c, -99));
  st = tu_view(c, 0);
  CHECK_KV_EMPTY(st);
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  CHECK_MASK(c, 1, 0, 1, 0);
  kvc_cache_destroy(c);
}

/* 'Dynamic layer trace', batch part: rows [[1,2],[10,20],[100,200]], select (0, 2). */
static void test_d1_batch_select(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_DYNAMIC, 0, 0);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_list(c, 0, 3, H, D, D, TU_LIST(1, 2), 2, NULL, NULL));
  const int64_t idx[2] = {0, 2};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 2));
  kvc_kv st = tu_view(c, 0);
  CHECK_SHAPE(st.key, 2, H, 2, D);
  CHECK_TOKENS_ROWS(st, TU_LIST(1, 2), 2, idx);
  CHECK_EQ_I64(tu_info(c, 0).batch_size, 2);
  kvc_cache_destroy(c);
}

/* 'Dynamic sliding layer trace', for the sliding and the chunked kind (same storage rules). */
static void d2_dynamic_sliding(kvc_layer_kind kind) {
  kvc_cache* c = tu_one_layer_cache(kind, 4, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 6, 0, &out, 1, 2, 3, 4, 5, 6);
  CHECK_KV_SEQ(out, 1, 2, 3, 4, 5, 6);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 4, 5, 6);
  CHECK_EQ_I64(tu_seq(c, 0), 6);

  STEP(c, 4, 3, &out, 7);
  CHECK_KV_SEQ(out, 4, 5, 6, 7);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 5, 6, 7);
  CHECK_EQ_I64(tu_seq(c, 0), 7);

  STEP(c, 5, 4, &out, 8, 9);
  CHECK_KV_SEQ(out, 5, 6, 7, 8, 9);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 7, 8, 9);
  CHECK_EQ_I64(tu_seq(c, 0), 9);
  CHECK_EQ_I64(tu_info(c, 0).stored_length, 3);
  kvc_cache_destroy(c);
}

static void test_d2_dynamic_sliding(void) { d2_dynamic_sliding(KVC_LAYER_DYNAMIC_SLIDING); }
static void test_d2_dynamic_chunked(void) { d2_dynamic_sliding(KVC_LAYER_DYNAMIC_CHUNKED); }

/* 'Dynamic sliding layer trace', record_past: everything is kept until crop(0) shrinks it back to W-1. */
static void test_d2_record_past_crop_zero(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_DYNAMIC_SLIDING, 4, 0);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  CHECK_EQ_I64(tu_info(c, 0).records_past, 1);
  kvc_kv out;
  REQUIRE_OK(tu_update_list(c, 0, B, H, D, D, TU_LIST(1, 2, 3, 4, 5, 6), 6, NULL, &out));
  CHECK_KV_SEQ(out, 1, 2, 3, 4, 5, 6);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 1, 2, 3, 4, 5, 6);
  CHECK_OK(kvc_cache_crop(c, 0));
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 4, 5, 6);
  CHECK_EQ_I64(tu_seq(c, 0), 6);
  kvc_cache_destroy(c);
}

/* 'Dynamic sliding layer trace', record_past: crop(-2) on 45 recorded tokens with W = 12 keeps 32..42, cum 43. */
static void test_d2_record_past_crop_negative(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_SLIDING, 12, 0, 1, B, H, 45, D);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_info(c, 0).stored_length, 45);
  CHECK_OK(kvc_cache_crop(c, -2));
  int64_t want[11];
  kvc_kv st = tu_view(c, 0);
  CHECK_TOKENS(st, tu_range(want, 32, 43), 11);
  CHECK_EQ_I64(tu_seq(c, 0), 43);
  kvc_cache_destroy(c);
}

/* 'Static layer trace' */
static void test_d3_static_layer(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC, 0, 4);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 4, 0, &out, 1, 2);
  CHECK_KV_SEQ(out, 1, 2, -1, -1);
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  STEP(c, 4, 0, &out, 3);
  CHECK_KV_SEQ(out, 1, 2, 3, -1);
  STEP(c, 4, 0, &out, 4);
  CHECK_KV_SEQ(out, 1, 2, 3, 4);
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  CHECK_MASK(c, 1, 0, 4, 0);

  /* transformers raises IndexError with its counter already advanced; kvcache changes nothing */
  CHECK_ERR(tu_update_list(c, 0, B, H, D, D, TU_LIST(5), 1, NULL, NULL), KVC_ERROR_OUT_OF_RANGE);
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 1, 2, 3, 4);
  CHECK_MASK(c, 1, 0, 4, 0);
  kvc_cache_destroy(c);
}

/* 'Static sliding layer trace', sliding and chunked kinds; the capacity is min(window, max_cache_len). */
static void d4_static_sliding(kvc_layer_kind kind, int64_t window, int64_t max_cache_len) {
  kvc_cache* c = tu_one_layer_cache(kind, window, max_cache_len);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 4, 0, &out, 1, 2);
  CHECK_KV_SEQ(out, 1, 2, -1, -1);
  STEP(c, 4, 0, &out, 3);
  CHECK_KV_SEQ(out, 1, 2, 3, -1);
  STEP(c, 4, 0, &out, 4);
  CHECK_KV_SEQ(out, 1, 2, 3, 4);
  STEP(c, 4, 1, &out, 5);
  CHECK_KV_SEQ(out, 2, 3, 4, 5);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 2, 3, 4, 5);
  CHECK_EQ_I64(tu_seq(c, 0), 5);
  STEP(c, 5, 2, &out, 6, 7);
  CHECK_KV_SEQ(out, 3, 4, 5, 6, 7);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 4, 5, 6, 7);
  CHECK_EQ_I64(tu_seq(c, 0), 7);
  kvc_cache_destroy(c);
}

static void test_d4_static_sliding(void) {
  d4_static_sliding(KVC_LAYER_STATIC_SLIDING, 4, 4);
  d4_static_sliding(KVC_LAYER_STATIC_SLIDING, 4, 100);
  d4_static_sliding(KVC_LAYER_STATIC_SLIDING, 100, 4);
}

static void test_d4_static_chunked(void) {
  d4_static_sliding(KVC_LAYER_STATIC_CHUNKED, 4, 4);
  d4_static_sliding(KVC_LAYER_STATIC_CHUNKED, 4, 9);
}

/* 'Static sliding and chunked layers' worked examples: M' = 2, 3, 4. */
static void test_a6_examples(void) {
  kvc_kv out, st;
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC_SLIDING, 2, 4);
  REQUIRE(c != NULL);
  STEP(c, 3, 0, &out, 10, 20, 30); /* c=0 < 2 < 0+3 */
  CHECK_KV_SEQ(out, 10, 20, 30);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 20, 30);
  STEP(c, 2, 2, &out, 50); /* c=3 >= 2: (2+1-1, 3-2+1) */
  CHECK_KV_SEQ(out, 30, 50);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 30, 50);
  STEP(c, 3, 3, &out, 60, 70);
  CHECK_KV_SEQ(out, 50, 60, 70);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 60, 70);
  kvc_cache_destroy(c);

  c = tu_one_layer_cache(KVC_LAYER_STATIC_SLIDING, 3, 10);
  REQUIRE(c != NULL);
  STEP(c, 3, 0, &out, 10, 20);
  CHECK_KV_SEQ(out, 10, 20, -1);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 10, 20, -1);
  STEP(c, 4, 0, &out, 30, 40); /* c=2 < 3 < 4 */
  CHECK_KV_SEQ(out, 10, 20, 30, 40);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 20, 30, 40);
  kvc_cache_destroy(c);

  c = tu_one_layer_cache(KVC_LAYER_STATIC_SLIDING, 4, 4);
  REQUIRE(c != NULL);
  STEP(c, 6, 0, &out, 1, 2, 3, 4, 5, 6); /* fast prefill longer than the window */
  CHECK_KV_SEQ(out, 1, 2, 3, 4, 5, 6);
  st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 3, 4, 5, 6);
  CHECK_EQ_I64(tu_seq(c, 0), 6);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_d1_dynamic_layer);
  TU_RUN(test_d1_batch_select);
  TU_RUN(test_d2_dynamic_sliding);
  TU_RUN(test_d2_dynamic_chunked);
  TU_RUN(test_d2_record_past_crop_zero);
  TU_RUN(test_d2_record_past_crop_negative);
  TU_RUN(test_d3_static_layer);
  TU_RUN(test_d4_static_sliding);
  TU_RUN(test_d4_static_chunked);
  TU_RUN(test_a6_examples);
  return tu_finish();
}
