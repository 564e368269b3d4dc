/*
 * test_linear_batch.c: batch operations on recurrent states. transformers'
 * LinearAttentionLayer only has reorder_cache (index_select on every state);
 * kvcache also moves states under batch_select_indices,
 * batch_repeat_interleave, batch_split / from_batch_splits and clone, so
 * that a layer's K/V and states always describe the same rows. Every case is
 * checked against a reference gathered from the rows before the operation.
 */
#include "test_errors.h"
#include "test_linear.h"

#define B 4
#define C 3
#define K 3

/* Every byte of a state view, row-major. */
static unsigned char* state_bytes(const kvc_tensor* t, size_t* n) { return tu_view_bytes_alloc(t, n); }

/* Checks that view `after` row b equals view `before` row rows[b] (both compact-read). */
static void check_rows(const kvc_tensor* before_t, const unsigned char* before, const kvc_tensor* after,
                       const int64_t* rows, int64_t nb) {
  size_t n = 0;
  unsigned char* got = state_bytes(after, &n);
  REQUIRE_EQ_I64(after->shape[0], nb);
  size_t row = (size_t)tu_numel(before_t) / (size_t)before_t->shape[0] * tu_elem_size(before_t);
  CHECK_EQ_U64(n, row * (size_t)nb);
  for (int64_t b = 0; b < nb; b++) CHECK(memcmp(got + (size_t)b * row, before + (size_t)rows[b] * row, row) == 0);
  free(got);
}

/* A LINEAR layer and a dynamic hybrid, each with a conv state (recent columns 0..5) and a recurrent state. */
static kvc_cache* filled(void) {
  const kvc_layer_kind kinds[2] = {KVC_LAYER_LINEAR, KVC_LAYER_LINEAR_DYNAMIC};
  kvc_cache* c = tl_cache(2, kinds, 0, 0, 1, K);
  if (!c) return NULL;
  const int64_t shape[3] = {B, 2, 5};
  for (uint32_t i = 0; i < 2; i++) {
    CHECK_OK(tl_conv(c, i, B, C, 0, 6, NULL, NULL));
    tl_tensor s;
    /* distinct per row: element k is 1000 * layer + k */
    tl_rec_input(&s, KVC_DTYPE_FLOAT32, 3, shape, 1000.0f * (float)i);
    CHECK_OK(kvc_cache_update_recurrent_state(c, i, 0, &s.t, NULL));
    tl_free(&s);
  }
  CHECK_OK(tu_update_tokens(c, 1, B, 2, 3, 2, 2, 0, NULL, NULL));
  return c;
}

typedef struct before {
  kvc_tensor rec[2];
  unsigned char* rec_bytes[2];
} before;

static void take_before(kvc_cache* c, before* b) {
  for (uint32_t i = 0; i < 2; i++) {
    size_t n = 0;
    b->rec[i] = tl_rec_view(c, i, 0);
    b->rec_bytes[i] = state_bytes(&b->rec[i], &n);
  }
}

static void free_before(before* b) {
  for (int i = 0; i < 2; i++) free(b->rec_bytes[i]);
}

/* filled(), its recurrent states taken into *b (NULL: none taken, nothing to free). */
static kvc_cache* filled_before(before* b) {
  kvc_cache* c = filled();
  if (c) take_before(c, b);
  return c;
}

/* After a gather with source rows `rows`: conv columns, recurrent rows and (layer 1) K/V rows follow. */
static void check_gathered(kvc_cache* c, const before* bf, const int64_t* rows, int64_t nb) {
  const int64_t conv[K] = {3, 4, 5}, kv[3] = {0, 1, 2};
  for (uint32_t i = 0; i < 2; i++) {
    kvc_tensor cv = tl_conv_view(c, i, 0);
    CHECK_CONV(&cv, nb, C, conv, K, rows);
    kvc_tensor rv = tl_rec_view(c, i, 0);
    check_rows(&bf->rec[i], bf->rec_bytes[i], &rv, rows, nb);
    CHECK_EQ_I64(tu_info(c, i).batch_size, nb);
  }
  kvc_kv v = tu_view(c, 1);
  CHECK_TOKENS_ROWS(v, kv, 3, rows);
}

static void test_reorder_in_place(void) {
  before bf;
  kvc_cache* c = filled_before(&bf);
  REQUIRE(c != NULL);
  const int64_t idx[B] = {2, 2, 0, 1}; /* row 0 is read by row 2 after being overwritten: needs scratch */
  void* conv_before = tl_conv_view(c, 0, 0).data;
  REQUIRE_OK(kvc_cache_reorder(c, idx, B));
  CHECK_EQ_PTR(tl_conv_view(c, 0, 0).data, conv_before); /* in place */
  check_gathered(c, &bf, idx, B);
  /* Decoding goes on from the reordered states. */
  kvc_tensor ret;
  REQUIRE_OK(tl_conv(c, 0, B, C, 6, 1, NULL, &ret));
  const int64_t cols[K + 1] = {3, 4, 5, 6};
  const int64_t mixed[B] = {2, 2, 0, 1};
  /* The old columns come from the source rows, the new column from each row itself: check the old ones. */
  kvc_tensor old = ret;
  int64_t shape3[3] = {B, C, K};
  old.shape = shape3;
  CHECK_CONV(&old, B, C, cols, K, mixed);
  free_before(&bf);
  kvc_cache_destroy(c);
}

static void test_select_and_repeat(void) {
  before bf;
  kvc_cache* c = filled_before(&bf);
  REQUIRE(c != NULL);
  const int64_t idx[2] = {3, 1};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 2));
  check_gathered(c, &bf, idx, 2);
  free_before(&bf);
  take_before(c, &bf);
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 3));
  const int64_t rep[6] = {0, 0, 0, 1, 1, 1}, orig[6] = {3, 3, 3, 1, 1, 1};
  for (uint32_t i = 0; i < 2; i++) {
    kvc_tensor rv = tl_rec_view(c, i, 0);
    check_rows(&bf.rec[i], bf.rec_bytes[i], &rv, rep, 6);
    kvc_tensor cv = tl_conv_view(c, i, 0);
    const int64_t conv[K] = {3, 4, 5};
    CHECK_CONV(&cv, 6, C, conv, K, orig);
  }
  /* New inputs must now have the new batch, for states and K/V alike. */
  CHECK_ERR(tl_conv(c, 0, B, C, 6, 1, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH);
  CHECK_OK(tl_conv(c, 0, 6, C, 6, 1, NULL, NULL));
  CHECK_OK(tu_update_tokens(c, 1, 6, 2, 1, 2, 2, 3, NULL, NULL));
  free_before(&bf);
  kvc_cache_destroy(c);
}

/* A reset hybrid keeps an initialized, empty K/V store: a batch change must resize it with the states. */
static void test_select_after_reset(void) {
  kvc_cache* c = filled();
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_reset(c));
  const int64_t idx[2] = {0, 3};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 2));
  CHECK_EQ_I64(tu_info(c, 1).batch_size, 2);
  kvc_kv kv;
  REQUIRE_OK(tu_update_tokens(c, 1, 2, 2, 3, 2, 2, 40, NULL, &kv));
  const int64_t t[3] = {40, 41, 42};
  CHECK_TOKENS(kv, t, 3);
  CHECK_ERR(tu_update_tokens(c, 1, B, 2, 1, 2, 2, 43, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH);
  /* Growing the batch of a reset layer: the store must grow too (the sanitizer build sees any overflow). */
  REQUIRE_OK(kvc_cache_reset(c));
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 3));
  REQUIRE_OK(tu_update_tokens(c, 1, 6, 2, 2, 2, 2, 50, NULL, &kv)); /* few enough tokens not to regrow the store */
  CHECK_EQ_I64(kv.key.shape[0], 6);
  CHECK_EQ_I64(kv.key.shape[2], 2);
  kvc_memory_info m = tu_memory(c);
  CHECK(m.bytes_used > 0);
  kvc_cache_destroy(c);
}

/* States of a layer with only some of them allocated move too; unallocated ones stay unallocated. */
static void test_partial_states(void) {
  kvc_cache* c = tl_linear(3, K);
  REQUIRE(c != NULL);
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  o.state_index = 2;
  REQUIRE_OK(tl_conv(c, 0, B, C, 0, 2, &o, NULL));
  const int64_t idx[3] = {1, 1, 3};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 3));
  kvc_tensor cv = tl_conv_view(c, 0, 2);
  const int64_t cols[K] = {-1, 0, 1};
  CHECK_CONV(&cv, 3, C, cols, K, idx);
  kvc_tensor none = tl_conv_view(c, 0, 0);
  CHECK(none.data == NULL && none.ndim == 0);
  CHECK_EQ_I64(tl_has_prev(c, 0, 2), 1);
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 0);
  kvc_cache_destroy(c);
}

static void test_clone(void) {
  kvc_cache* c = filled();
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  REQUIRE_OK(tl_conv(c, 0, B, C, 6, 2, NULL, NULL));
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  tu_snapshot sc, sd;
  snapshot(c, &sc);
  snapshot(d, &sd);
  CHECK_SNAPSHOT_EQUAL(&sc, &sd);
  snapshot_free(&sd);
  CHECK_NE_PTR(tl_conv_view(d, 0, 0).data, tl_conv_view(c, 0, 0).data);
  /* The clone is independent: changing the original leaves it as it was, and both continue alike. */
  REQUIRE_OK(tl_conv(c, 0, B, C, 8, 1, NULL, NULL));
  REQUIRE_OK(kvc_cache_reset(c));
  snapshot(d, &sd);
  snapshot_free(&sc);
  kvc_cache* e = NULL;
  REQUIRE_OK(kvc_cache_clone(d, &e));
  kvc_tensor r1, r2;
  REQUIRE_OK(tl_conv(d, 0, B, C, 8, 3, NULL, &r1));
  REQUIRE_OK(tl_conv(e, 0, B, C, 8, 3, NULL, &r2));
  const int64_t cols[8] = {3, 4, 5, 6, 7, 8, 9, 10};
  CHECK_CONV(&r1, B, C, cols, 8, NULL); /* recording since columns 3..5 were stored: everything after them */
  CHECK_CONV(&r2, B, C, cols, 8, NULL);
  snapshot_free(&sd);
  TU_DESTROY(c, d, e);
}

static void test_split_and_stack(void) {
  before bf;
  kvc_cache* c = filled_before(&bf);
  REQUIRE(c != NULL);
  kvc_cache* parts[4] = {NULL, NULL, NULL, NULL};
  size_t n = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, B, 3, parts, 4, &n));
  REQUIRE_EQ_I64(n, 2);
  const int64_t first[3] = {0, 1, 2}, second[1] = {3};
  for (uint32_t i = 0; i < 2; i++) {
    kvc_tensor rv = tl_rec_view(parts[0], i, 0);
    check_rows(&bf.rec[i], bf.rec_bytes[i], &rv, first, 3);
    rv = tl_rec_view(parts[1], i, 0);
    check_rows(&bf.rec[i], bf.rec_bytes[i], &rv, second, 1);
    const int64_t conv[K] = {3, 4, 5};
    kvc_tensor cv = tl_conv_view(parts[1], i, 0);
    CHECK_CONV(&cv, 1, C, conv, K, second);
    CHECK_EQ_I64(tl_has_prev(parts[1], (int32_t)i, 0), 1);
  }
  /* Stacked back: the original. */
  kvc_cache* s = NULL;
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &s));
  CHECK_CACHES_EQUAL_CONTENTS(c, s);
  /* Splits that went different ways do not stack, and nothing is created. */
  REQUIRE_OK(tl_conv(parts[0], 0, 3, C, 6, 1, NULL, NULL));
  REQUIRE_OK(tl_conv(parts[1], 0, 1, C, 6, 2, NULL, NULL));
  kvc_cache* bad = NULL;
  EXPECT_ERR(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &bad), KVC_ERROR_INVALID_STATE,
             "kvc_cache_from_batch_splits", "splits[1]", "conv region");
  CHECK(bad == NULL);
  /* The same calls on both keep them stackable. */
  REQUIRE_OK(tl_conv(parts[0], 0, 3, C, 7, 1, NULL, NULL));
  REQUIRE_OK(tl_conv(parts[1], 0, 1, C, 7, 1, NULL, NULL));
  REQUIRE_OK(tl_conv(parts[0], 0, 3, C, 8, 1, NULL, NULL));
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &bad));
  kvc_cache_destroy(bad);
  free_before(&bf);
  for (size_t i = 0; i < n; i++) kvc_cache_destroy(parts[i]);
  TU_DESTROY(s, c);
}

/* A pure LINEAR cache can be split as soon as a state exists (its batch). */
static void test_split_linear_only(void) {
  kvc_cache* c = tl_linear(1, K);
  REQUIRE(c != NULL);
  kvc_cache* parts[2];
  size_t n = 0;
  CHECK_ERR(kvc_cache_batch_split(c, 2, 1, parts, 2, &n), KVC_ERROR_INVALID_STATE); /* no batch yet */
  REQUIRE_OK(tl_conv(c, 0, 2, C, 0, 1, NULL, NULL));
  REQUIRE_OK(kvc_cache_batch_split(c, 2, 1, parts, 2, &n));
  REQUIRE_EQ_I64(n, 2);
  const int64_t cols[K] = {-1, -1, 0}, row1[1] = {1};
  kvc_tensor cv = tl_conv_view(parts[1], 0, 0);
  CHECK_CONV(&cv, 1, C, cols, K, row1);
  TU_DESTROY(parts[0], parts[1], c);
}

/* Many state pairs (more buffers than a layer of another kind has): every one follows a batch change. */
static void test_many_states(void) {
  enum { NS = 40 };
  kvc_cache* c = tl_linear(NS, 2);
  REQUIRE(c != NULL);
  const int64_t shape[2] = {3, 2};
  for (uint32_t st = 0; st < NS; st++) {
    kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
    o.state_index = st;
    REQUIRE_OK(tl_conv(c, 0, 3, 1, 10 * st, 2, &o, NULL));
    tl_tensor s;
    tl_rec_input(&s, KVC_DTYPE_FLOAT32, 2, shape, 100.0f * (float)st);
    REQUIRE_OK(kvc_cache_update_recurrent_state(c, 0, st, &s.t, NULL));
    tl_free(&s);
  }
  const int64_t idx[2] = {2, 0};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 2));
  for (uint32_t st = 0; st < NS; st++) {
    kvc_tensor cv = tl_conv_view(c, 0, st);
    const int64_t cols[2] = {10 * st, 10 * st + 1};
    CHECK_CONV(&cv, 2, 1, cols, 2, idx);
    kvc_tensor rv = tl_rec_view(c, 0, st);
    float f[4];
    REQUIRE_EQ_I64(tu_read_view(&rv, f), 4);
    CHECK_EQ_F64(f[0], 100.0 * st + 4); /* row 2 */
    CHECK_EQ_F64(f[2], 100.0 * st + 0); /* row 0 */
  }
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_reorder_in_place);
  TU_RUN(test_select_and_repeat);
  TU_RUN(test_select_after_reset);
  TU_RUN(test_partial_states);
  TU_RUN(test_clone);
  TU_RUN(test_split_and_stack);
  TU_RUN(test_split_linear_only);
  TU_RUN(test_many_states);
  return tu_finish();
}
