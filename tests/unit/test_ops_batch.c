/*
 * Operations along the batch axis: reorder (beam search), batch_repeat_interleave,
 * batch_select_indices, batch_split + from_batch_splits, and batch_size.
 * Every batch row carries its own tag in the token encoding, so a check
 * names the source row of every result row.
 */
#include "test_util.h"
#include "test_model.h"

#define NH 2
#define DK 3
#define DV 5
#define NT 5 /* tokens per layer */

static const kvc_layer_options* all_kinds(void) {
  static kvc_layer_options l[6];
  static const int64_t wm[6][2] = {{0, 0}, {3, 0}, {4, 0}, {0, 8}, {3, 8}, {6, 8}}; /* window, max_cache_len */
  return tu_layers(l, 6, TU_SIX_KINDS, wm);
}

/* What each kind of all_kinds() stores after tokens 0..NT-1. */
static int64_t stored_tokens(uint32_t layer, int64_t* out) {
  static const int64_t s0[] = {0, 1, 2, 3, 4}, s1[] = {3, 4}, s2[] = {2, 3, 4}, s3[] = {0, 1, 2, 3, 4, -1, -1, -1},
                       s4[] = {2, 3, 4}, s5[] = {0, 1, 2, 3, 4, -1};
  static const int64_t* all[6] = {s0, s1, s2, s3, s4, s5};
  static const int64_t lens[6] = {5, 2, 3, 8, 3, 6};
  memcpy(out, all[layer], (size_t)lens[layer] * sizeof(int64_t));
  return lens[layer];
}

static kvc_cache* filled(const kvc_layer_options* layers, uint32_t n, int64_t batch) {
  kvc_cache* c = tu_custom_cache(n, layers);
  if (!c) return NULL;
  int ok = 1;
  for (uint32_t i = 0; ok && i < n; i++) ok = CHECK_OK(tu_update_tokens(c, i, batch, NH, NT, DK, DV, 0, NULL, NULL));
  return tu_kept(c, ok);
}

/* Every layer holds its usual tokens with result row b taken from rows[b]. */
static void check_rows(const kvc_cache* c, uint32_t n, int64_t batch, const int64_t* rows) {
  for (uint32_t i = 0; i < n; i++) {
    int64_t want[8];
    int64_t len = stored_tokens(i, want);
    kvc_kv st = tu_view(c, i);
    CHECK_SHAPE(st.key, batch, NH, len, DK);
    CHECK_SHAPE(st.value, batch, NH, len, DV);
    if (!CHECK_TOKENS_ROWS(st, want, len, rows)) fprintf(stderr, "    (layer %u)\n", i);
    CHECK_EQ_I64(tu_info(c, i).batch_size, batch);
    CHECK_EQ_I64(tu_seq(c, i), NT);
  }
}

static void test_reorder_every_kind(void) {
  kvc_cache* c = filled(all_kinds(), 6, 4);
  REQUIRE(c != NULL);
  const int64_t beam[4] = {2, 0, 3, 3};
  REQUIRE_OK(kvc_cache_reorder(c, beam, 4));
  check_rows(c, 6, 4, beam);
  /* and again: composition of permutations */
  const int64_t beam2[4] = {1, 1, 0, 2};
  REQUIRE_OK(kvc_cache_reorder(c, beam2, 4));
  const int64_t composed[4] = {0, 0, 2, 3};
  check_rows(c, 6, 4, composed);
  kvc_cache_destroy(c);
}

/* count != batch: index_select semantics, the batch becomes count. */
static void test_reorder_changes_batch(void) {
  kvc_cache* c = filled(all_kinds(), 6, 4);
  REQUIRE(c != NULL);
  const int64_t beam[2] = {3, 1};
  REQUIRE_OK(kvc_cache_reorder(c, beam, 2));
  check_rows(c, 6, 2, beam);
  int64_t bs = -9;
  CHECK_OK(kvc_cache_batch_size(c, &bs));
  CHECK_EQ_I64(bs, 2);
  /* the new batch is what later updates must match */
  CHECK_OK(tu_update_tokens(c, 0, 2, NH, 1, DK, DV, NT, NULL, NULL));
  CHECK_ERR(tu_update_tokens(c, 0, 4, NH, 1, DK, DV, NT + 1, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH);
  const int64_t grow[6] = {0, 1, 0, 1, 1, 0};
  REQUIRE_OK(kvc_cache_reorder(c, grow, 6)); /* more beams than rows */
  kvc_kv st = tu_view(c, 3);
  CHECK_SHAPE(st.key, 6, NH, 8, DK);
  const int64_t src[6] = {3, 1, 3, 1, 1, 3};
  CHECK_TOKENS_ROWS(st, TU_LIST(0, 1, 2, 3, 4, -1, -1, -1), 8, src);
  kvc_cache_destroy(c);
}

/* kvc_cache_reorder or kvc_cache_batch_select_indices: an operation taking a list of batch rows. */
typedef kvc_error* (*rows_op)(kvc_cache* cache, const int64_t* rows, size_t count);

/* op (named `name`) refuses each of the two lists of n rows with KVC_ERROR_OUT_OF_RANGE, and c stays as it was. */
static void check_rows_out_of_range(kvc_cache* c, rows_op op, const char* name, const int64_t* bad1,
                                    const int64_t* bad2, size_t n) {
  CHECK_UNCHANGED_BY(c, tu_err(op(c, bad1, n), KVC_ERROR_OUT_OF_RANGE, __FILE__, __LINE__, name);
                     tu_err(op(c, bad2, n), KVC_ERROR_OUT_OF_RANGE, __FILE__, __LINE__, name));
}

static void test_reorder_out_of_range(void) {
  kvc_cache* c = filled(all_kinds(), 6, 3);
  REQUIRE(c != NULL);
  const int64_t bad1[3] = {0, 3, 1}, bad2[3] = {0, -1, 1};
  check_rows_out_of_range(c, kvc_cache_reorder, "kvc_cache_reorder", bad1, bad2, 3);
  kvc_cache_destroy(c);
}

/* An identity permutation leaves contents (and storage) untouched. */
static void test_reorder_identity(void) {
  kvc_cache* c = filled(all_kinds(), 6, 3);
  REQUIRE(c != NULL);
  const void* keys[6];
  for (uint32_t i = 0; i < 6; i++) keys[i] = tu_view(c, i).key.data;
  const int64_t id[3] = {0, 1, 2};
  CHECK_UNCHANGED_BY(c, CHECK_OK(kvc_cache_reorder(c, id, 3)));
  for (uint32_t i = 0; i < 6; i++) CHECK_EQ_PTR(tu_view(c, i).key.data, keys[i]);
  kvc_cache_destroy(c);
}

static uint64_t rng_state = 12345;
static int64_t rnd(int64_t n) {
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (int64_t)((rng_state >> 33) % (uint64_t)n);
}

/*
 * Random beams (permutations with cycles, repeats, identities with one change)
 * on layers whose stores have moved (long decoding first): row b always
 * holds what the composition of all reorders says.
 */
static void test_reorder_random(void) {
  enum { BATCH = 7, FIRST = 5, DECODE = 150 };
  const kvc_layer_options* l = all_kinds();
  kvc_layer_options big[6];
  for (int i = 0; i < 6; i++) {
    big[i] = l[i];
    if (big[i].max_cache_len) big[i].max_cache_len = 200;
  }
  kvc_cache* c = tu_custom_cache(6, big);
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 6; i++) {
    REQUIRE_OK(tu_update_tokens(c, i, BATCH, NH, FIRST, DK, DV, 0, NULL, NULL));
    for (int s = 0; s < DECODE; s++) REQUIRE_OK(tu_update_tokens(c, i, BATCH, NH, 1, DK, DV, FIRST + s, NULL, NULL));
  }
  int64_t src[BATCH], beam[BATCH], next[BATCH];
  for (int b = 0; b < BATCH; b++) src[b] = b;
  for (int it = 0; it < 60; it++) {
    int kind = it % 3;
    for (int b = 0; b < BATCH; b++) beam[b] = b;
    if (kind == 0) {
      for (int b = BATCH - 1; b > 0; b--) {
        int64_t j = rnd(b + 1), t = beam[b];
        beam[b] = beam[j];
        beam[j] = t;
      }
    } else if (kind == 1) {
      for (int b = 0; b < BATCH; b++) beam[b] = rnd(BATCH);
    } else {
      beam[rnd(BATCH)] = rnd(BATCH);
    }
    REQUIRE_OK(kvc_cache_reorder(c, beam, BATCH));
    for (int b = 0; b < BATCH; b++) next[b] = src[beam[b]];
    memcpy(src, next, sizeof src);
    for (uint32_t i = 0; i < 6; i++) {
      model m = model_new(big[i].kind, big[i].window, big[i].max_cache_len);
      int64_t want[256];
      int64_t n = model_stored(&m, FIRST + DECODE, want);
      kvc_kv st = tu_view(c, i);
      if (!CHECK_TOKENS_ROWS(st, want, n, src)) {
        fprintf(stderr, "    (layer %u, iteration %d)\n", i, it);
        return;
      }
    }
  }
  /* then beams that change the batch: 7 -> 4 -> 9 rows */
  const int64_t shrink[4] = {6, 2, 2, 0}, grow[9] = {3, 0, 1, 2, 3, 3, 0, 1, 2};
  int64_t rows4[4], rows9[9];
  for (int b = 0; b < 4; b++) rows4[b] = src[shrink[b]];
  for (int b = 0; b < 9; b++) rows9[b] = rows4[grow[b]];
  REQUIRE_OK(kvc_cache_reorder(c, shrink, 4));
  REQUIRE_OK(kvc_cache_reorder(c, grow, 9));
  for (uint32_t i = 0; i < 6; i++) {
    model m = model_new(big[i].kind, big[i].window, big[i].max_cache_len);
    int64_t want[256];
    int64_t n = model_stored(&m, FIRST + DECODE, want);
    kvc_kv st = tu_view(c, i);
    CHECK_SHAPE(st.key, 9, NH, n, DK);
    CHECK_TOKENS_ROWS(st, want, n, rows9);
  }
  /* and decoding goes on with the new batch */
  for (uint32_t i = 0; i < 6; i++) CHECK_OK(tu_update_tokens(c, i, 9, NH, 1, DK, DV, FIRST + DECODE, NULL, NULL));
  kvc_cache_destroy(c);
}

static const kvc_layer_options* dynamic_kinds(void) { return all_kinds(); } /* the first three */

static void test_repeat_interleave(void) {
  kvc_cache* c = filled(dynamic_kinds(), 3, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 3));
  const int64_t rows[6] = {0, 0, 0, 1, 1, 1};
  check_rows(c, 3, 6, rows);
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 1));
  check_rows(c, 3, 6, rows);
  CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_batch_repeat_interleave(c, 0), KVC_ERROR_INVALID_ARGUMENT));
  kvc_cache_destroy(c);
}

static void test_select_indices(void) {
  kvc_cache* c = filled(dynamic_kinds(), 3, 4);
  REQUIRE(c != NULL);
  const int64_t idx[3] = {3, 0, 3};
  REQUIRE_OK(kvc_cache_batch_select_indices(c, idx, 3));
  check_rows(c, 3, 3, idx);
  const int64_t bad[1] = {3};       /* the batch is now 3 */
  const int64_t negative[1] = {-1}; /* no Python-style wrap-around */
  check_rows_out_of_range(c, kvc_cache_batch_select_indices, "kvc_cache_batch_select_indices", bad, negative, 1);
  kvc_cache_destroy(c);
}

/* Static kinds have no batch_repeat_interleave / batch_select_indices, and a mixed cache refuses them whole. */
static void test_batch_ops_static_unsupported(void) {
  kvc_cache* c = filled(all_kinds(), 6, 2);
  REQUIRE(c != NULL);
  const int64_t idx[1] = {1};
  CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_batch_repeat_interleave(c, 2), KVC_ERROR_UNSUPPORTED);
                     CHECK_ERR(kvc_cache_batch_select_indices(c, idx, 1), KVC_ERROR_UNSUPPORTED));
  kvc_cache_destroy(c);
}

static void test_split_and_stack(void) {
  kvc_cache* c = filled(all_kinds(), 6, 5);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  kvc_cache* parts[4] = {NULL, NULL, NULL, NULL};
  size_t count = 99;
  CHECK_ERR(kvc_cache_batch_split(c, 5, 2, parts, 2, &count), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_U64(count, 99);
  CHECK(parts[0] == NULL && parts[1] == NULL);
  CHECK_ERR(kvc_cache_batch_split(c, 4, 2, parts, 4, &count), KVC_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(kvc_cache_batch_split(c, 5, 2, parts, 4, &count));
  REQUIRE_EQ_I64(count, 3);
  CHECK(parts[3] == NULL);
  const int64_t rows0[2] = {0, 1}, rows1[2] = {2, 3}, rows2[1] = {4};
  check_rows(parts[0], 6, 2, rows0);
  check_rows(parts[1], 6, 2, rows1);
  check_rows(parts[2], 6, 1, rows2);
  for (uint32_t i = 0; i < 6; i++) {
    kvc_layer_info a = tu_info(c, i), b = tu_info(parts[2], i);
    CHECK_EQ_I64(b.kind, a.kind);
    CHECK_EQ_I64(b.window, a.window);
    CHECK_EQ_I64(b.capacity, a.capacity);
    CHECK_EQ_I64(b.records_past, a.records_past);
    CHECK_EQ_I64(b.seq_length, a.seq_length);
  }

  kvc_cache* stacked = NULL;
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 3, &stacked));
  CHECK_CACHES_EQUAL_CONTENTS(c, stacked);

  /* splits that no longer agree on stored lengths cannot be stacked */
  REQUIRE_OK(tu_update_tokens(parts[1], 0, 2, NH, 1, DK, DV, NT, NULL, NULL));
  kvc_cache* bad = (kvc_cache*)&count; /* a sentinel: must stay untouched */
  CHECK_FAILS(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 3, &bad));
  CHECK_EQ_PTR(bad, &count);
  for (int i = 0; i < 3; i++) kvc_cache_destroy(parts[i]);
  TU_DESTROY(stacked, c);
}

/* Batch operations skip layers that hold no tokens: those keep their batch size (transformers' rule). */
static void test_batch_ops_skip_empty_layers(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                                 tu_layer(KVC_LAYER_STATIC, 0, 4));
  REQUIRE(c != NULL);
  kvc_init_options io = tu_init_options(3, NH, DK, DV, KVC_DTYPE_FLOAT32);
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  REQUIRE_OK(tu_update_tokens(c, 0, 3, NH, 2, DK, DV, 0, NULL, NULL));
  const int64_t beam[2] = {2, 0};
  REQUIRE_OK(kvc_cache_reorder(c, beam, 2));
  CHECK_EQ_I64(tu_info(c, 0).batch_size, 2);
  CHECK_EQ_I64(tu_info(c, 1).batch_size, 3);
  CHECK_EQ_I64(tu_info(c, 2).batch_size, 3);
  kvc_kv st = tu_view(c, 0);
  CHECK_TOKENS_ROWS(st, TU_LIST(0, 1), 2, beam);
  kvc_cache_destroy(c);

  kvc_layer_options d[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 3, 0)};
  c = tu_custom_cache(2, d);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  REQUIRE_OK(tu_update_tokens(c, 1, 3, NH, 2, DK, DV, 0, NULL, NULL));
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 2));
  CHECK_EQ_I64(tu_info(c, 0).batch_size, 3);
  CHECK_EQ_I64(tu_info(c, 1).batch_size, 6);
  kvc_cache_destroy(c);
}

/* split_size at least the batch gives one split; one split stacks back to itself. */
static void test_split_edges(void) {
  kvc_cache* c = filled(all_kinds(), 6, 3);
  REQUIRE(c != NULL);
  kvc_cache* parts[3] = {NULL, NULL, NULL};
  size_t count = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, 3, 5, parts, 3, &count));
  REQUIRE_EQ_I64(count, 1);
  kvc_cache* back = NULL;
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 1, &back));
  tu_snapshot a, b;
  snapshot(c, &a);
  snapshot(back, &b);
  CHECK_SNAPSHOT_EQUAL_CONTENTS(&a, &b);
  snapshot_free(&b);
  TU_DESTROY(back, parts[0]);
  REQUIRE_OK(kvc_cache_batch_split(c, 3, 1, parts, 3, &count));
  REQUIRE_EQ_I64(count, 3);
  for (int64_t i = 0; i < 3; i++) check_rows(parts[i], 6, 1, &i);
  /* the splits are independent caches: changing one leaves the source alone */
  REQUIRE_OK(kvc_cache_reset(parts[1]));
  snapshot(c, &b);
  CHECK_SNAPSHOT_EQUAL(&a, &b);
  snapshot_free(&a);
  snapshot_free(&b);
  for (int i = 0; i < 3; i++) kvc_cache_destroy(parts[i]);
  kvc_cache_destroy(c);
}

/* batch_size reports the initialized static layers only. */
static void test_batch_size(void) {
  int64_t bs = -9;
  kvc_cache* c = filled(dynamic_kinds(), 3, 3);
  REQUIRE(c != NULL);
  CHECK_OK(kvc_cache_batch_size(c, &bs));
  CHECK_EQ_I64(bs, -1);
  kvc_cache_destroy(c);

  kvc_layer_options l[3] = {tu_layer(KVC_LAYER_STATIC, 0, 4), tu_layer(KVC_LAYER_STATIC_SLIDING, 2, 4),
                            tu_layer(KVC_LAYER_DYNAMIC, 0, 0)};
  c = tu_custom_cache(3, l);
  REQUIRE(c != NULL);
  CHECK_OK(kvc_cache_batch_size(c, &bs));
  CHECK_EQ_I64(bs, -1);
  REQUIRE_OK(tu_update_tokens(c, 0, 3, NH, 1, DK, DV, 0, NULL, NULL));
  REQUIRE_OK(tu_update_tokens(c, 2, 7, NH, 1, DK, DV, 0, NULL, NULL));
  CHECK_OK(kvc_cache_batch_size(c, &bs));
  CHECK_EQ_I64(bs, 3);
  REQUIRE_OK(tu_update_tokens(c, 1, 2, NH, 1, DK, DV, 0, NULL, NULL));
  bs = -9;
  CHECK_ERR(kvc_cache_batch_size(c, &bs), KVC_ERROR_INVALID_STATE);
  CHECK_EQ_I64(bs, -9);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_reorder_every_kind);
  TU_RUN(test_reorder_changes_batch);
  TU_RUN(test_reorder_out_of_range);
  TU_RUN(test_reorder_identity);
  TU_RUN(test_reorder_random);
  TU_RUN(test_repeat_interleave);
  TU_RUN(test_select_indices);
  TU_RUN(test_batch_ops_static_unsupported);
  TU_RUN(test_split_and_stack);
  TU_RUN(test_split_edges);
  TU_RUN(test_batch_ops_skip_empty_layers);
  TU_RUN(test_batch_size);
  return tu_finish();
}
