/*
 * EncoderDecoderCache (docs/semantics.md, 'Encoder-decoder caches'): the is_updated protocol of
 * cross-attention, which operations reach which of the two caches, and the
 * dynamic-only batch operations.
 */
#include "test_util.h"

#define NH 2
#define DK 3
#define DV 4
#define ENC 5 /* encoder tokens, numbered from 100 */

/* update_cross(layer) with tokens first..first+n-1 on `batch` rows; the returned K/V into out (may be NULL). */
static kvc_error* update_cross_range(kvc_encoder_decoder_cache* ed, uint32_t layer, int64_t batch, int64_t first,
                                     int64_t n, kvc_kv* out) {
  tu_tensor k, v;
  tu_tensor_tokens(&k, batch, NH, n, DK, first, 0);
  tu_tensor_tokens(&v, batch, NH, n, DV, first, 1);
  kvc_error* e = kvc_encoder_decoder_cache_update_cross(ed, layer, &k.t, &v.t, out);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return e;
}

/* update_cross(layer) with encoder tokens 100..100+ENC-1 on `batch` rows. */
static kvc_error* update_cross_tokens(kvc_encoder_decoder_cache* ed, uint32_t layer, int64_t batch) {
  return update_cross_range(ed, layer, batch, 100, ENC, NULL);
}

/* A pair of lazy dynamic caches; self holds `self_tokens` on layers 0 and 1. */
static kvc_encoder_decoder_cache* make_pair(int64_t batch, int64_t self_tokens, int fill_cross) {
  kvc_cache* self = tu_lazy_cache();
  kvc_cache* cross = tu_lazy_cache();
  if (!self || !cross) return NULL;
  kvc_encoder_decoder_cache* ed = NULL;
  if (!CHECK_OK(kvc_encoder_decoder_cache_create(self, cross, &ed))) {
    TU_DESTROY(self, cross);
    return NULL;
  }
  for (uint32_t i = 0; i < 2 && self_tokens > 0; i++)
    CHECK_OK(tu_update_tokens(self, i, batch, NH, self_tokens, DK, DV, 0, NULL, NULL));
  for (uint32_t i = 0; i < 2 && fill_cross; i++) CHECK_OK(update_cross_tokens(ed, i, batch));
  return ed;
}

static int32_t updated(const kvc_encoder_decoder_cache* ed, uint32_t layer) {
  int32_t f = -9;
  CHECK_OK(kvc_encoder_decoder_cache_is_updated(ed, layer, &f));
  return f;
}

static void test_is_updated_protocol(void) {
  kvc_encoder_decoder_cache* ed = make_pair(1, 0, 0);
  REQUIRE(ed != NULL);
  kvc_cache* cross = kvc_encoder_decoder_cache_cross_attention(ed);
  CHECK_EQ_I64(updated(ed, 0), 0);
  kvc_kv out;
  REQUIRE_OK(update_cross_range(ed, 0, 1, 100, ENC, &out));
  CHECK_KV_SEQ(out, 100, 101, 102, 103, 104);
  CHECK_EQ_I64(updated(ed, 0), 1);
  CHECK_EQ_I64(updated(ed, 1), 0);
  CHECK_EQ_I64(updated(ed, 7), 0);
  /* once updated, the stored K/V are reused: NULL inputs, or new ones that are ignored */
  REQUIRE_OK(kvc_encoder_decoder_cache_update_cross(ed, 0, NULL, NULL, &out));
  CHECK_KV_SEQ(out, 100, 101, 102, 103, 104);
  REQUIRE_OK(update_cross_range(ed, 0, 1, 200, 2, &out));
  CHECK_KV_SEQ(out, 100, 101, 102, 103, 104);
  CHECK_EQ_I64(tu_seq(cross, 0), ENC);
  REQUIRE_OK(kvc_encoder_decoder_cache_update_cross(ed, 0, NULL, NULL, NULL));
  /* a layer not yet updated needs its K/V */
  CHECK_FAILS(kvc_encoder_decoder_cache_update_cross(ed, 1, NULL, NULL, &out));
  CHECK_EQ_I64(updated(ed, 1), 0);
  REQUIRE_OK(update_cross_range(ed, 1, 1, 200, 2, &out));
  CHECK_KV_SEQ(out, 200, 201);
  CHECK_EQ_I64(updated(ed, 1), 1);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* is_updated starts as "the cross layer holds tokens". */
static void test_initial_is_updated(void) {
  tu_tensor k[2], v[2];
  kvc_tensor ka[2], va[2];
  for (int i = 0; i < 2; i++) {
    tu_tensor_tokens(&k[i], 1, NH, ENC, DK, 100, 0);
    tu_tensor_tokens(&v[i], 1, NH, ENC, DV, 100, 1);
    ka[i] = k[i].t;
    va[i] = v[i].t;
  }
  kvc_cache* cross = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                                     tu_layer(KVC_LAYER_STATIC, 0, 8));
  REQUIRE(cross != NULL);
  REQUIRE_OK(kvc_cache_update(cross, 0, &ka[0], &va[0], NULL, NULL));
  REQUIRE_OK(kvc_cache_update(cross, 2, &ka[1], &va[1], NULL, NULL));
  kvc_encoder_decoder_cache* ed = NULL;
  kvc_cache* self = tu_lazy_cache();
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &ed));
  CHECK_EQ_I64(updated(ed, 0), 1);
  CHECK_EQ_I64(updated(ed, 1), 0);
  CHECK_EQ_I64(updated(ed, 2), 1);
  CHECK_EQ_I64(updated(ed, 3), 0);
  CHECK_EQ_PTR(kvc_encoder_decoder_cache_self_attention(ed), self);
  CHECK_EQ_PTR(kvc_encoder_decoder_cache_cross_attention(ed), cross);
  kvc_encoder_decoder_cache_destroy(ed);

  cross = NULL;
  REQUIRE_OK(kvc_cache_create_from_tensors(NULL, 2, ka, va, &cross));
  self = tu_lazy_cache();
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &ed));
  CHECK_EQ_I64(updated(ed, 0), 1);
  CHECK_EQ_I64(updated(ed, 1), 1);
  kvc_encoder_decoder_cache_destroy(ed);
  tu_tensors_free(k, v, 2);
}

/* The same handle twice is refused and ownership stays with the caller. */
static void test_create_distinct(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  kvc_encoder_decoder_cache* ed = NULL;
  CHECK_ERR(kvc_encoder_decoder_cache_create(c, c, &ed), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(ed == NULL);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 0, NULL, NULL)); /* still alive and ours */
  kvc_cache_destroy(c);
  kvc_encoder_decoder_cache_destroy(NULL);
  CHECK(kvc_encoder_decoder_cache_self_attention(NULL) == NULL);
  CHECK(kvc_encoder_decoder_cache_cross_attention(NULL) == NULL);
}

static void test_crop_only_self(void) {
  kvc_encoder_decoder_cache* ed = make_pair(2, 6, 1);
  REQUIRE(ed != NULL);
  REQUIRE_OK(kvc_encoder_decoder_cache_crop(ed, -2));
  kvc_cache* self = kvc_encoder_decoder_cache_self_attention(ed);
  kvc_cache* cross = kvc_encoder_decoder_cache_cross_attention(ed);
  for (uint32_t i = 0; i < 2; i++) {
    kvc_kv st = tu_view(self, i);
    CHECK_KV_SEQ(st, 0, 1, 2, 3);
    st = tu_view(cross, i);
    CHECK_KV_SEQ(st, 100, 101, 102, 103, 104);
    CHECK_EQ_I64(updated(ed, i), 1);
  }
  REQUIRE_OK(kvc_encoder_decoder_cache_crop(ed, 2));
  kvc_kv st = tu_view(self, 0);
  CHECK_KV_SEQ(st, 0, 1);
  st = tu_view(cross, 0);
  CHECK_KV_SEQ(st, 100, 101, 102, 103, 104);
  kvc_encoder_decoder_cache_destroy(ed);
}

static void test_reorder_both(void) {
  kvc_encoder_decoder_cache* ed = make_pair(3, 4, 1);
  REQUIRE(ed != NULL);
  const int64_t beam[3] = {2, 2, 0};
  REQUIRE_OK(kvc_encoder_decoder_cache_reorder(ed, beam, 3));
  kvc_kv st = tu_view(kvc_encoder_decoder_cache_self_attention(ed), 1);
  CHECK_TOKENS_ROWS(st, TU_LIST(0, 1, 2, 3), 4, beam);
  st = tu_view(kvc_encoder_decoder_cache_cross_attention(ed), 1);
  CHECK_TOKENS_ROWS(st, TU_LIST(100, 101, 102, 103, 104), 5, beam);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* Reorder works for static pairs too (transformers' generate with a static cache and beams). */
static void test_reorder_static_pair(void) {
  kvc_layer_options l = tu_layer(KVC_LAYER_STATIC, 0, 6);
  kvc_cache* self = tu_custom_cache(1, &l);
  kvc_cache* cross = tu_custom_cache(1, &l);
  REQUIRE(self && cross);
  REQUIRE_OK(tu_update_tokens(self, 0, 2, NH, 2, DK, DV, 0, NULL, NULL));
  REQUIRE_OK(tu_update_tokens(cross, 0, 2, NH, 5, DK, DV, 100, NULL, NULL));
  kvc_encoder_decoder_cache* ed = NULL;
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &ed));
  const int64_t beam[2] = {1, 0};
  REQUIRE_OK(kvc_encoder_decoder_cache_reorder(ed, beam, 2));
  kvc_kv st = tu_view(self, 0);
  CHECK_TOKENS_ROWS(st, TU_LIST(0, 1, -1, -1, -1, -1), 6, beam);
  st = tu_view(cross, 0);
  CHECK_TOKENS_ROWS(st, TU_LIST(100, 101, 102, 103, 104, -1), 6, beam);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* A static cross cache sized to the encoder output (what generate builds with a static cache). */
static void test_static_cross_cache(void) {
  kvc_layer_options l[2] = {tu_layer(KVC_LAYER_STATIC, 0, ENC), tu_layer(KVC_LAYER_STATIC, 0, ENC)};
  kvc_cache* cross = tu_custom_cache(2, l);
  kvc_cache* self = tu_custom_cache(2, l);
  REQUIRE(cross && self);
  kvc_encoder_decoder_cache* ed = NULL;
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &ed));
  CHECK_EQ_I64(updated(ed, 0), 0);
  CHECK_EQ_I64(updated(ed, 1), 0);
  kvc_kv out;
  REQUIRE_OK(update_cross_range(ed, 1, 1, 100, ENC, &out));
  CHECK_KV_SEQ(out, 100, 101, 102, 103, 104);
  /* a second write would overflow the static layer: the protocol never writes again */
  REQUIRE_OK(update_cross_range(ed, 1, 1, 100, ENC, &out));
  CHECK_KV_SEQ(out, 100, 101, 102, 103, 104);
  CHECK_EQ_I64(tu_seq(cross, 1), ENC);
  CHECK_EQ_I64(updated(ed, 0), 0);
  REQUIRE_OK(kvc_encoder_decoder_cache_reset(ed));
  CHECK_EQ_I64(updated(ed, 1), 0);
  REQUIRE_OK(update_cross_range(ed, 1, 1, 100, ENC, &out));
  CHECK_KV_SEQ(out, 100, 101, 102, 103, 104);
  kvc_encoder_decoder_cache_destroy(ed);
}

static void test_batch_ops_dynamic(void) {
  kvc_encoder_decoder_cache* ed = make_pair(2, 3, 1);
  REQUIRE(ed != NULL);
  REQUIRE_OK(kvc_encoder_decoder_cache_batch_repeat_interleave(ed, 2));
  const int64_t rep[4] = {0, 0, 1, 1};
  kvc_kv st = tu_view(kvc_encoder_decoder_cache_self_attention(ed), 0);
  CHECK_TOKENS_ROWS(st, TU_LIST(0, 1, 2), 3, rep);
  st = tu_view(kvc_encoder_decoder_cache_cross_attention(ed), 0);
  CHECK_TOKENS_ROWS(st, TU_LIST(100, 101, 102, 103, 104), 5, rep);
  const int64_t sel[2] = {3, 0};
  REQUIRE_OK(kvc_encoder_decoder_cache_batch_select_indices(ed, sel, 2));
  const int64_t src[2] = {1, 0};
  st = tu_view(kvc_encoder_decoder_cache_self_attention(ed), 1);
  CHECK_TOKENS_ROWS(st, TU_LIST(0, 1, 2), 3, src);
  st = tu_view(kvc_encoder_decoder_cache_cross_attention(ed), 1);
  CHECK_TOKENS_ROWS(st, TU_LIST(100, 101, 102, 103, 104), 5, src);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* crop and the batch operations need both caches dynamic; a refusal changes nothing. */
static void test_non_dynamic_refused(void) {
  for (int static_side = 0; static_side < 2; static_side++) {
    kvc_layer_options l = tu_layer(KVC_LAYER_STATIC, 0, 8);
    kvc_cache* st_cache = tu_custom_cache(1, &l);
    kvc_cache* dyn = tu_lazy_cache();
    REQUIRE(st_cache && dyn);
    REQUIRE_OK(tu_update_tokens(st_cache, 0, 2, NH, 3, DK, DV, 0, NULL, NULL));
    REQUIRE_OK(tu_update_tokens(dyn, 0, 2, NH, 3, DK, DV, 0, NULL, NULL));
    kvc_encoder_decoder_cache* ed = NULL;
    if (static_side == 0)
      REQUIRE_OK(kvc_encoder_decoder_cache_create(st_cache, dyn, &ed));
    else
      REQUIRE_OK(kvc_encoder_decoder_cache_create(dyn, st_cache, &ed));
    const int64_t sel[1] = {1};
    kvc_encoder_decoder_cache* parts[2] = {NULL, NULL};
    size_t count = 77;
    CHECK_ED_UNCHANGED_BY(ed, CHECK_ERR(kvc_encoder_decoder_cache_crop(ed, -1), KVC_ERROR_UNSUPPORTED);
                          CHECK_ERR(kvc_encoder_decoder_cache_batch_repeat_interleave(ed, 2), KVC_ERROR_UNSUPPORTED);
                          CHECK_ERR(kvc_encoder_decoder_cache_batch_select_indices(ed, sel, 1), KVC_ERROR_UNSUPPORTED);
                          CHECK_ERR(kvc_encoder_decoder_cache_batch_split(ed, 2, 1, parts, 2, &count),
                                    KVC_ERROR_UNSUPPORTED));
    CHECK(parts[0] == NULL && count == 77);
    kvc_encoder_decoder_cache_destroy(ed);
  }
}

static void test_split_and_stack(void) {
  kvc_encoder_decoder_cache* ed = make_pair(4, 3, 0);
  REQUIRE(ed != NULL);
  REQUIRE_OK(update_cross_tokens(ed, 0, 4)); /* layer 1 not updated */
  kvc_encoder_decoder_cache* parts[3] = {NULL, NULL, NULL};
  size_t count = 0;
  REQUIRE_OK(kvc_encoder_decoder_cache_batch_split(ed, 4, 2, parts, 3, &count));
  REQUIRE_EQ_I64(count, 2);
  for (int p = 0; p < 2; p++) {
    const int64_t rows[2] = {2 * p, 2 * p + 1};
    kvc_kv st = tu_view(kvc_encoder_decoder_cache_self_attention(parts[p]), 1);
    CHECK_TOKENS_ROWS(st, TU_LIST(0, 1, 2), 3, rows);
    st = tu_view(kvc_encoder_decoder_cache_cross_attention(parts[p]), 0);
    CHECK_TOKENS_ROWS(st, TU_LIST(100, 101, 102, 103, 104), 5, rows);
    CHECK_EQ_I64(updated(parts[p], 0), 1);
    CHECK_EQ_I64(updated(parts[p], 1), 0);
  }
  kvc_encoder_decoder_cache* stacked = NULL;
  REQUIRE_OK(kvc_encoder_decoder_cache_from_batch_splits((const kvc_encoder_decoder_cache* const*)parts, 2, &stacked));
  CHECK_EDS_EQUAL_CONTENTS(ed, stacked);
  kvc_encoder_decoder_cache* made[4] = {parts[0], parts[1], stacked, ed};
  for (int i = 0; i < 4; i++) kvc_encoder_decoder_cache_destroy(made[i]);
}

static void test_reset_clears_is_updated(void) {
  kvc_encoder_decoder_cache* ed = make_pair(1, 4, 1);
  REQUIRE(ed != NULL);
  REQUIRE_OK(kvc_encoder_decoder_cache_reset(ed));
  for (uint32_t i = 0; i < 2; i++) {
    CHECK_EQ_I64(updated(ed, i), 0);
    CHECK_EQ_I64(tu_seq(kvc_encoder_decoder_cache_self_attention(ed), i), 0);
    CHECK_EQ_I64(tu_seq(kvc_encoder_decoder_cache_cross_attention(ed), i), 0);
  }
  /* the next request computes its cross K/V again */
  kvc_kv out;
  REQUIRE_OK(update_cross_range(ed, 0, 1, 300, 3, &out));
  CHECK_KV_SEQ(out, 300, 301, 302);
  CHECK_EQ_I64(updated(ed, 0), 1);
  kvc_encoder_decoder_cache_destroy(ed);
}

/* What test_clone_deep does to the clone: update self and cross, crop, reorder. */
static void mutate_clone(kvc_encoder_decoder_cache* d) {
  REQUIRE_OK(tu_update_tokens(kvc_encoder_decoder_cache_self_attention(d), 0, 2, NH, 1, DK, DV, 4, NULL, NULL));
  REQUIRE_OK(update_cross_tokens(d, 0, 2));
  REQUIRE_OK(kvc_encoder_decoder_cache_crop(d, -3));
  const int64_t beam[2] = {1, 1};
  REQUIRE_OK(kvc_encoder_decoder_cache_reorder(d, beam, 2));
}

static void test_clone_deep(void) {
  kvc_encoder_decoder_cache* ed = make_pair(2, 4, 0);
  REQUIRE(ed != NULL);
  REQUIRE_OK(update_cross_tokens(ed, 1, 2));
  kvc_encoder_decoder_cache* d = NULL;
  REQUIRE_OK(kvc_encoder_decoder_cache_clone(ed, &d));
  CHECK_EDS_EQUAL_CONTENTS(ed, d);
  CHECK(kvc_encoder_decoder_cache_self_attention(d) != kvc_encoder_decoder_cache_self_attention(ed));
  /* the original stays as it was through everything done to the clone, its reset and its end */
  CHECK_ED_UNCHANGED_BY(ed, mutate_clone(d));
  CHECK_ED_UNCHANGED_BY(ed, CHECK_OK(kvc_encoder_decoder_cache_reset(d)));
  CHECK_ED_UNCHANGED_BY(ed, kvc_encoder_decoder_cache_destroy(d));
  kvc_encoder_decoder_cache_destroy(ed);
}

int main(void) {
  TU_RUN(test_is_updated_protocol);
  TU_RUN(test_initial_is_updated);
  TU_RUN(test_create_distinct);
  TU_RUN(test_crop_only_self);
  TU_RUN(test_reorder_both);
  TU_RUN(test_reorder_static_pair);
  TU_RUN(test_static_cross_cache);
  TU_RUN(test_batch_ops_dynamic);
  TU_RUN(test_non_dynamic_refused);
  TU_RUN(test_split_and_stack);
  TU_RUN(test_reset_clears_is_updated);
  TU_RUN(test_clone_deep);
  return tu_finish();
}
