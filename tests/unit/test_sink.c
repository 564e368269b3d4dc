/*
 * Sink layers (SinkCache, docs/semantics.md, 'Sink layers') without RoPE: the 'Sink layer trace' trace, the storage
 * rules of every branch including transformers' oversized shifts, updates of
 * zero tokens, mask sizes, presets and layer info, batch operations, clone,
 * reset and the steady state of a full window.
 */
#include "test_sink.h"

#define STEP(c, layer, len, out, ...)                                                                          \
  do {                                                                                                          \
    CHECK_MASK((c), TU_COUNT(__VA_ARGS__), (layer), (len), 0);                                                  \
    REQUIRE_OK(sk_update((c), (layer), KVC_DTYPE_FLOAT32, 1, 1, 1, 1, TU_LIST(__VA_ARGS__), TU_COUNT(__VA_ARGS__), \
                         NULL, (out)));                                                                         \
  } while (0)

/* 'Sink layer trace': window 6, 2 sinks; each step asks the mask sizes first. */
static void test_d6_trace(void) {
  kvc_cache* c = sk_cache(6, 2, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 0, 4, &out, 0, 1, 2, 3);
  CHECK_SINK_TOKENS(out, 0, 1, 2, 3);
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  int64_t u = -1;
  CHECK_OK(kvc_cache_usable_length(c, 1, 0, &u));
  CHECK_EQ_I64(u, 4); /* 4 + 1 <= 6 */
  CHECK_OK(kvc_cache_usable_length(c, 3, 0, &u));
  CHECK_EQ_I64(u, 3); /* 4 + 3 > 6: window - new */
  STEP(c, 0, 5, &out, 4); /* 1 + 4 < 6: grows */
  CHECK_SINK_TOKENS(out, 0, 1, 2, 3, 4);
  STEP(c, 0, 6, &out, 5); /* 1 + 5 = 6: shifts, keeping the last 6 - 2 - 1 = 3 */
  CHECK_SINK_TOKENS(out, 0, 1, 2, 3, 4, 5);
  STEP(c, 0, 6, &out, 6);
  CHECK_SINK_TOKENS(out, 0, 1, 3, 4, 5, 6);
  kvc_kv st = tu_view(c, 0);
  CHECK_SINK_TOKENS(st, 0, 1, 3, 4, 5, 6);
  STEP(c, 0, 6, &out, 7, 8); /* keeps 6 - 2 - 2 = 2 */
  CHECK_SINK_TOKENS(out, 0, 1, 5, 6, 7, 8);
  CHECK_EQ_I64(tu_seq(c, 0), 6);
  CHECK_EQ_I64(tu_max_len(c, 0), 6);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 6);
  kvc_cache_destroy(c);
}

/* The first update is stored whole, however long; the next one brings the layer back to the window. */
static void test_first_update_longer_than_window(void) {
  kvc_cache* c = sk_cache(4, 1, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 0, 7, &out, 0, 1, 2, 3, 4, 5, 6);
  CHECK_SINK_TOKENS(out, 0, 1, 2, 3, 4, 5, 6);
  CHECK_EQ_I64(tu_seq(c, 0), 7);
  STEP(c, 0, 4, &out, 7);
  CHECK_SINK_TOKENS(out, 0, 5, 6, 7);
  kvc_cache_destroy(c);
}

/*
 * window - sinks - new <= 0 without RoPE: transformers' slice [-(W - S - n):]
 * keeps everything at 0 and drops only the first (n + S - W) tokens below,
 * so the sinks appear twice and the cache holds more than its window. kvcache
 * does the same (it is well defined); the next ordinary shift restores it.
 */
static void test_oversized_shifts_without_rope(void) {
  kvc_cache* c = sk_cache(6, 2, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  STEP(c, 0, 6, &out, 0, 1, 2, 3, 4, 5);
  STEP(c, 0, 12, &out, 6, 7, 8, 9); /* 6 - 2 - 4 = 0: [-0:] keeps all six */
  CHECK_SINK_TOKENS(out, 0, 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
  CHECK_EQ_I64(tu_seq(c, 0), 12);
  STEP(c, 0, 6, &out, 10);
  CHECK_SINK_TOKENS(out, 0, 1, 7, 8, 9, 10);
  /* 6 - 2 - 5 = -1: [1:] keeps all but the first stored token, sinks included once more */
  STEP(c, 0, 12, &out, 11, 12, 13, 14, 15);
  CHECK_SINK_TOKENS(out, 0, 1, 1, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  kvc_kv st = tu_view(c, 0);
  CHECK_SINK_TOKENS(st, 0, 1, 1, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  kvc_cache_destroy(c);

  c = sk_cache(3, 0, 0);
  REQUIRE(c != NULL);
  STEP(c, 0, 3, &out, 0, 1, 2);
  STEP(c, 0, 6, &out, 3, 4, 5, 6, 7); /* 3 - 0 - 5 = -2: [2:] */
  CHECK_SINK_TOKENS(out, 2, 3, 4, 5, 6, 7);
  kvc_cache_destroy(c);
}

/* Updates of 0 tokens: nothing stored, but a layer at or past its window is cut back to it. */
static void test_zero_token_updates(void) {
  kvc_cache* c = sk_cache(6, 2, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, NULL, 0, NULL, &out));
  CHECK_SHAPE(out.key, 1, 1, 0, 1);
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  STEP(c, 0, 3, &out, 0, 1, 2);
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, NULL, 0, NULL, &out));
  CHECK_SINK_TOKENS(out, 0, 1, 2);
  STEP(c, 0, 6, &out, 3, 4, 5);
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, NULL, 0, NULL, &out));
  CHECK_SINK_TOKENS(out, 0, 1, 2, 3, 4, 5);
  kvc_cache_destroy(c);

  c = sk_cache(6, 2, 0);
  REQUIRE(c != NULL);
  STEP(c, 0, 8, &out, 0, 1, 2, 3, 4, 5, 6, 7);
  CHECK_MASK(c, 0, 0, 6, 0);
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, NULL, 0, NULL, &out));
  CHECK_SINK_TOKENS(out, 0, 1, 4, 5, 6, 7);
  kvc_cache_destroy(c);
}

/* The presets and layer info: lazy, with a config, and custom layers next to other kinds. */
static void test_presets_and_layer_info(void) {
  kvc_cache* c = sk_cache(5, 1, 0);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), -1);
  REQUIRE_OK(sk_update(c, 2, KVC_DTYPE_FLOAT32, 1, 2, 3, 2, TU_LIST(0, 1), 2, NULL, NULL));
  REQUIRE_EQ_I64(kvc_cache_num_layers(c), 3);
  for (uint32_t i = 0; i < 3; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.kind, KVC_LAYER_SINK);
    CHECK_EQ_I64(li.window, 5);
    CHECK_EQ_I64(li.num_sink_tokens, 1);
    CHECK_EQ_I64(li.capacity, 5);
    CHECK_EQ_I64(li.is_sliding, 1); /* SinkCache.is_sliding = True (4.52) */
    CHECK_EQ_I64(li.is_chunked, 0);
    CHECK_EQ_I64(li.is_compileable, 0);
    CHECK_EQ_I64(li.max_cache_len, 0);
    CHECK_EQ_I64(li.is_initialized, i == 2);
    CHECK_EQ_I64(li.seq_length, i == 2 ? 2 : 0);
    CHECK_EQ_I64(li.stored_length, i == 2 ? 2 : 0);
    CHECK_EQ_I64(tu_max_len(c, (int32_t)i), 5);
  }
  kvc_layer_info li = tu_info(c, 2);
  CHECK_EQ_I64(li.num_kv_heads, 2);
  CHECK_EQ_I64(li.k_head_dim, 3);
  CHECK_EQ_I64(li.v_head_dim, 2);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 5);
  kvc_cache_destroy(c);

  c = sk_cache(7, 3, 4);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 4);
  CHECK_EQ_I64(tu_info(c, 3).kind, KVC_LAYER_SINK);
  CHECK_EQ_I64(tu_info(c, 3).num_sink_tokens, 3);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 7);
  kvc_cache_destroy(c);

  kvc_layer_options layers[3] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_SINK, 4, 0),
                                 tu_layer(KVC_LAYER_SINK, 9, 0)};
  layers[1].num_sink_tokens = 1;
  layers[2].num_sink_tokens = 0;
  c = tu_custom_cache(3, layers);
  REQUIRE(c != NULL);
  kvc_kv out;
  for (int64_t t = 0; t < 6; t++)
    for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(sk_update(c, i, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, &t, 1, NULL, &out));
  CHECK_SINK_TOKENS(tu_view(c, 0), 0, 1, 2, 3, 4, 5);
  CHECK_SINK_TOKENS(tu_view(c, 1), 0, 3, 4, 5);
  CHECK_SINK_TOKENS(tu_view(c, 2), 0, 1, 2, 3, 4, 5);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 9);
  kvc_cache_destroy(c);
}

/* mask_sizes(q) is the length the next update of q tokens returns; sinks and recent tokens start at offset 0. */
static void test_mask_sizes_follow_the_update(void) {
  kvc_cache* c = sk_cache(5, 1, 0);
  REQUIRE(c != NULL);
  const int64_t qs[] = {1, 2, 3, 4, 5, 6};
  int64_t next = 0;
  for (int round = 0; round < 12; round++) {
    int64_t q = qs[round % 6];
    int64_t len = -1, off = -1;
    REQUIRE_OK(kvc_cache_mask_sizes(c, q, 0, &len, &off));
    int64_t toks[8];
    kvc_kv out;
    REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, tu_range(toks, next, next + q), q, NULL, &out));
    next += q;
    CHECK_EQ_I64(len, out.key.shape[2]);
    CHECK_EQ_I64(off, 0);
  }
  kvc_cache_destroy(c);
}

/* reorder follows the rows through later shifts; the sink tokens of each row move with it. */
static void test_reorder(void) {
  kvc_cache* c = sk_cache(4, 1, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 3, 2, 2, 1, TU_LIST(0, 1, 2), 3, NULL, NULL));
  const int64_t idx[3] = {2, 0, 0};
  REQUIRE_OK(kvc_cache_reorder(c, idx, 3));
  CHECK_SINK_ROWS(tu_view(c, 0), TU_LIST(0, 1, 2), SK_NONE, 3, 0, idx);
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 3, 2, 2, 1, TU_LIST(3, 4), 2, NULL, &out));
  /* a shift keeping the sink and token 2: the old tokens come from row idx[b], the new ones from row b */
  CHECK_SHAPE(out.key, 3, 2, 4, 2);
  for (int64_t b = 0; b < 3; b++) {
    CHECK_EQ_F64(tu_get(&out.key, b, 1, 0, 1), sk_key(0, idx[b], 1, 1));
    CHECK_EQ_F64(tu_get(&out.key, b, 0, 1, 0), sk_key(2, idx[b], 0, 0));
    CHECK_EQ_F64(tu_get(&out.value, b, 1, 1, 0), -sk_key(2, idx[b], 1, 0));
    CHECK_EQ_F64(tu_get(&out.key, b, 1, 3, 1), sk_key(4, b, 1, 1));
  }
  kvc_cache_destroy(c);
}

/* A clone holds the same tokens and goes on independently. */
static void test_clone_is_independent(void) {
  kvc_cache* c = sk_filled(5, 2, 2, 2, 2, TU_LIST(0, 1, 2, 3, 4), 5);
  REQUIRE(c != NULL);
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_CACHES_EQUAL(c, d);
  REQUIRE_OK(sk_update(d, 0, KVC_DTYPE_FLOAT32, 1, 1, 2, 2, TU_LIST(5), 1, NULL, NULL));
  CHECK_SINK_TOKENS(tu_view(d, 0), 0, 1, 3, 4, 5);
  CHECK_SINK_TOKENS(tu_view(c, 0), 0, 1, 2, 3, 4);
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 2, 2, TU_LIST(9, 10), 2, NULL, NULL));
  CHECK_SINK_TOKENS(tu_view(c, 0), 0, 1, 4, 9, 10);
  CHECK_SINK_TOKENS(tu_view(d, 0), 0, 1, 3, 4, 5);
  TU_DESTROY(c, d);
}

/* reset empties every layer; the next update is a first one again (stored whole). */
static void test_reset(void) {
  kvc_cache* c = sk_filled(4, 1, 0, 2, 1, TU_LIST(0, 1, 2, 3, 4), 5);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 2);
  for (uint32_t i = 0; i < 2; i++) {
    CHECK_EQ_I64(tu_seq(c, i), 0);
    kvc_kv st = tu_view(c, i);
    CHECK_SHAPE(st.key, 1, 1, 0, 1);
    CHECK_MASK(c, 9, i, 9, 0);
  }
  kvc_kv out;
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, TU_LIST(10, 11, 12, 13, 14, 15), 6, NULL, &out));
  CHECK_SINK_TOKENS(out, 10, 11, 12, 13, 14, 15);
  REQUIRE_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 1, TU_LIST(16), 1, NULL, &out));
  CHECK_SINK_TOKENS(out, 10, 14, 15, 16);
  kvc_cache_destroy(c);
}

enum { STEADY_B = 2, STEADY_H = 2, STEADY_D = 4 };

/* A decode step of test_steady_decoding_does_not_allocate: token t into both layers. */
static kvc_error* decode_both_layers(kvc_cache* c, int64_t t) {
  kvc_error* e = NULL;
  for (uint32_t i = 0; i < 2 && !e; i++)
    e = sk_update(c, i, KVC_DTYPE_FLOAT32, STEADY_B, STEADY_H, STEADY_D, STEADY_D, &t, 1, NULL, NULL);
  return e;
}

/*
 * Decoding on a full window allocates nothing: the store stays where it is
 * (views keep their base pointer) and the memory reported does not move; the
 * window holds the sinks and the most recent tokens throughout.
 */
static void test_steady_decoding_does_not_allocate(void) {
  const int64_t W = 32, S = 4;
  kvc_cache* c = sk_cache(W, S, 2);
  REQUIRE(c != NULL);
  int64_t toks[64];
  for (uint32_t i = 0; i < 2; i++)
    REQUIRE_OK(sk_update(c, i, KVC_DTYPE_FLOAT32, STEADY_B, STEADY_H, STEADY_D, STEADY_D, tu_range(toks, 0, W), W,
                         NULL, NULL));
  kvc_kv st = sk_decode_in_place(c, 1, W, W + 300, decode_both_layers);
  int64_t want[32];
  sk_window_tokens(want, W, S, W + 300);
  CHECK_SINK(st, want, SK_NONE, W, 0);
  kvc_cache_destroy(c);
}

/* update_all: every layer's result in one call, all-or-nothing like any update. */
static void test_update_all(void) {
  kvc_cache* c = sk_cache(4, 1, 3);
  REQUIRE(c != NULL);
  for (int64_t t = 0; t < 6; t++) {
    kvc_kv out[3];
    CHECK_OK(sk_update_all(c, 3, 2, 2, &t, 1, NULL, out));
    if (t == 5)
      for (int i = 0; i < 3; i++) CHECK_SINK_TOKENS(out[i], 0, 3, 4, 5);
  }
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_d6_trace);
  TU_RUN(test_first_update_longer_than_window);
  TU_RUN(test_oversized_shifts_without_rope);
  TU_RUN(test_zero_token_updates);
  TU_RUN(test_presets_and_layer_info);
  TU_RUN(test_mask_sizes_follow_the_update);
  TU_RUN(test_reorder);
  TU_RUN(test_clone_is_independent);
  TU_RUN(test_reset);
  TU_RUN(test_steady_decoding_does_not_allocate);
  TU_RUN(test_update_all);
  return tu_finish();
}
