/*
 * test_quantized_batch.c: beam search and the other batch operations on
 * QUANTIZED layers after flushes, against a full-precision reference of what
 * the layer returned, to which the same operation is applied. transformers
 * up to 5.22 reordered only the residual (docs/semantics.md, 'Edge cases', item 13); a reference
 * built that way is shown to disagree, so these tests would catch that bug.
 * Also split, stack and clone.
 */
#include "test_quantized.h"

#define F32 KVC_DTYPE_FLOAT32

enum { B = 4, H = 2, D = 8 };

/* The settings the operations are tried with: row-local groups, groups across rows, and the incremental mode. */
static const tq_setting SETTINGS[] = {
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 3},  /* per token: rows move with their groups */
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, -1, -1, 8, 3}, /* H*S % 8 != 0: groups cross rows */
    {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 2, 0, 1, 8, 3},    /* strided keys: every group crosses rows */
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, -1, 4, 3},
    {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 4, 1, 0, 2, 2},
};
#define NSETTINGS (sizeof SETTINGS / sizeof SETTINGS[0])

/* A cache after a prefill of 5 and `steps` one-token steps; its layer view is what the next update builds on.
 * The inputs come from *rng, started at `seed` and left where they stop, for the steps that follow. */
static kvc_cache* grown(const tq_setting* s, int steps, uint64_t seed, tq_rng* rng) {
  rng->s = seed;
  kvc_cache* c = tq_cache(s, 1);
  if (!c) return NULL;
  if (!CHECK_OK(tq_update(c, 0, F32, B, H, 5, D, D, rng, NULL, NULL, NULL))) return c;
  for (int i = 0; i < steps; i++) CHECK_OK(tq_update(c, 0, F32, B, H, 1, D, D, rng, NULL, NULL, NULL));
  return c;
}

static void ref_view(tq_ref* r, const kvc_cache* c) {
  kvc_kv kv = tu_view(c, 0);
  tq_ref_from_kv(r, &kv);
}

/* A new reference holding the cache's layer view. */
static tq_ref viewed(const kvc_cache* c) {
  kvc_kv kv = tu_view(c, 0);
  return tq_ref_of_kv(&kv);
}

/* Given the same `steps` one-token updates (rng copied for each), `second` returns what `first` does. */
static void expect_same_steps(kvc_cache* first, kvc_cache* second, const tq_rng* rng, int steps) {
  tq_rng a = *rng, b = *rng;
  for (int step = 0; step < steps; step++) {
    kvc_kv x, y;
    if (!CHECK_OK(tq_update(first, 0, F32, B, H, 1, D, D, &a, NULL, NULL, &x)) ||
        !CHECK_OK(tq_update(second, 0, F32, B, H, 1, D, D, &b, NULL, NULL, &y)))
      return;
    tq_ref want = tq_ref_of_kv(&x);
    CHECK(tq_equal(&y, &want, 0));
    tq_ref_free(&want);
  }
}

/*
 * After a batch operation that made `ref` of the history, the cache's view
 * and its next updates agree with it: in transformers mode every update
 * returns the history plus the new token; in incremental mode the tokens the
 * update quantizes change, the others must not.
 */
static void expect_follows(kvc_cache* c, const tq_setting* s, tq_ref* ref, tq_rng* rng, int steps) {
  kvc_kv view = tu_view(c, 0);
  CHECK(tq_equal(&view, ref, 0));
  for (int i = 0; i < steps; i++) {
    int64_t q = tq_quantized(c, 0);
    float k[2 * B * H * D], v[2 * B * H * D];
    kvc_kv out;
    if (!CHECK_OK(tq_update(c, 0, F32, ref->b, H, 1, D, D, rng, k, v, &out))) return;
    tq_ref_append(ref, k, v, 1);
    if (s->mode == KVC_QUANT_MODE_TRANSFORMERS) {
      CHECK(tq_equal(&out, ref, 0));
    } else {
      tq_ref got, want;
      memset(&got, 0, sizeof got);
      tq_ref_from_kv(&got, &out);
      tq_ref_crop(&got, q);
      want = *ref;
      int same = 1;
      for (int64_t b = 0; b < ref->b * H; b++)
        for (int64_t t = 0; t < q; t++)
          for (int64_t e = 0; e < D; e++)
            same &= got.k[(b * q + t) * D + e] == want.k[(b * ref->s + t) * D + e] &&
                    got.v[(b * q + t) * D + e] == want.v[(b * ref->s + t) * D + e];
      CHECK(same);
      tq_ref_free(&got);
    }
    kvc_kv next = tu_view(c, 0); /* after a flush: the dequantization of what was returned */
    tq_ref_from_kv(ref, &next);
  }
}

/* Beam search: reorder after flushes equals reordering the whole returned history, never only the residual. */
static void test_reorder_after_flushes(void) {
  static const int64_t idx[B] = {2, 2, 0, 1};
  for (size_t i = 0; i < NSETTINGS; i++) {
    tq_rng rng;
    kvc_cache* c = grown(&SETTINGS[i], 5, 100 + i, &rng);
    REQUIRE(c);
    int64_t q = tq_quantized(c, 0);
    CHECK(q > 0 && q < tu_seq(c, 0)); /* a quantized part and a residual */
    tq_ref ref = viewed(c), residual_only = viewed(c);
    REQUIRE_OK(kvc_cache_reorder(c, idx, B));
    tq_ref_rows(&ref, idx, B);
    tq_ref_rows_from(&residual_only, idx, q);
    kvc_kv view = tu_view(c, 0);
    CHECK(!tq_equal(&view, &residual_only, 1)); /* the quirk would be caught */
    expect_follows(c, &SETTINGS[i], &ref, &rng, 4);
    tq_ref_free(&ref);
    tq_ref_free(&residual_only);
    kvc_cache_destroy(c);
  }
}

/* select and repeat-interleave (contrastive search) act on the quantized history too. */
static void test_select_and_repeat(void) {
  static const int64_t pick[4] = {3, 0, 3, 1}; /* four rows: quanto's axis -1 groups must divide batch*heads*seq */
  for (size_t i = 0; i < NSETTINGS; i++) {
    tq_rng rng;
    kvc_cache* c = grown(&SETTINGS[i], 4, 200 + i, &rng);
    REQUIRE(c);
    tq_ref ref = viewed(c);
    REQUIRE_OK(kvc_cache_batch_select_indices(c, pick, 4));
    tq_ref_rows(&ref, pick, 4);
    expect_follows(c, &SETTINGS[i], &ref, &rng, 3);

    ref_view(&ref, c);
    REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 2));
    const int64_t rep[8] = {0, 0, 1, 1, 2, 2, 3, 3};
    tq_ref_rows(&ref, rep, 8);
    CHECK_EQ_I64(tu_info(c, 0).batch_size, 8);
    expect_follows(c, &SETTINGS[i], &ref, &rng, 3);
    tq_ref_free(&ref);
    kvc_cache_destroy(c);
  }
}

/*
 * In transformers mode a flush after a reorder quantizes the reordered
 * dequantized history, exactly as a fresh layer would quantize that tensor
 * given at once (transformers 5.23 applies its deferred reorder the same way).
 */
static void test_flush_after_reorder(void) {
  static const int64_t idx[B] = {3, 1, 1, 0};
  for (size_t i = 0; i < 3; i++) {
    tq_rng rng;
    kvc_cache* c = grown(&SETTINGS[i], 4, 300 + i, &rng);
    REQUIRE(c);
    REQUIRE_OK(kvc_cache_reorder(c, idx, B));
    /* Step until the next flush, then the fresh cache gets what that flush quantized, as its prefill. */
    kvc_kv out;
    int64_t before = tq_quantized(c, 0);
    do {
      REQUIRE_OK(tq_update(c, 0, F32, B, H, 1, D, D, &rng, NULL, NULL, &out));
    } while (tq_quantized(c, 0) == before);
    tq_ref flushed = tq_ref_of_kv(&out);
    kvc_cache* fresh = tq_cache(&SETTINGS[i], 1);
    REQUIRE(fresh);
    tu_tensor k, v;
    tu_tensor_make(&k, F32, B, H, flushed.s, D, flushed.k);
    tu_tensor_make(&v, F32, B, H, flushed.s, D, flushed.v);
    REQUIRE_OK(kvc_cache_update(fresh, 0, &k.t, &v.t, NULL, NULL));
    expect_same_steps(fresh, c, &rng, 1);
    tq_ref_free(&flushed);
    tu_tensor_free(&k);
    tu_tensor_free(&v);
    TU_DESTROY(fresh, c);
  }
}

/* Split rows and stack them back: the stacked cache continues exactly as the original would. */
static void test_split_and_stack(void) {
  for (size_t i = 0; i < NSETTINGS; i++) {
    tq_rng rng;
    kvc_cache* c = grown(&SETTINGS[i], 5, 400 + i, &rng);
    REQUIRE(c);
    tq_ref ref = viewed(c), part;
    memset(&part, 0, sizeof part);
    kvc_cache* splits[2] = {NULL, NULL};
    size_t count = 0;
    REQUIRE_OK(kvc_cache_batch_split(c, B, 2, splits, 2, &count));
    REQUIRE(count == 2);
    for (int s = 0; s < 2; s++) {
      kvc_kv whole = tu_view(c, 0);
      tq_ref_from_kv(&part, &whole);
      const int64_t rows[2] = {2 * s, 2 * s + 1};
      tq_ref_rows(&part, rows, 2);
      kvc_kv view = tu_view(splits[s], 0);
      CHECK(tq_equal(&view, &part, 0));
      CHECK_EQ_I64(tq_quantized(splits[s], 0), tq_quantized(c, 0));
      tq_ref_free(&part);
    }
    kvc_cache* stacked = NULL;
    REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)splits, 2, &stacked));
    kvc_memory_info m1 = tu_memory(c), m2 = tu_memory(stacked);
    CHECK_EQ_U64(m2.bytes_quantized, m1.bytes_quantized);
    expect_same_steps(c, stacked, &rng, 5);
    tq_ref_free(&ref);
    TU_DESTROY(stacked, splits[0], splits[1], c);
  }
}

/* Splits that no longer agree on their quantized tokens cannot be stacked. */
static void test_stack_refuses_diverged_splits(void) {
  tq_rng rng;
  kvc_cache* c = grown(&SETTINGS[3], 2, 500, &rng);
  REQUIRE(c);
  kvc_cache* splits[2] = {NULL, NULL};
  size_t count = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, B, 2, splits, 2, &count));
  REQUIRE(count == 2);
  /* The same length, another share of quantized tokens: one split cut in its residual only (its 4 quantized
     tokens stay), the other emptied and refilled (4 tokens are under residual_length + a block). */
  REQUIRE_OK(kvc_cache_crop(splits[0], -3));
  REQUIRE_OK(kvc_cache_crop(splits[1], -7));
  REQUIRE_OK(tq_update(splits[1], 0, F32, 2, H, 4, D, D, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tu_seq(splits[1], 0), tu_seq(splits[0], 0));
  CHECK(tq_quantized(splits[1], 0) != tq_quantized(splits[0], 0));
  kvc_cache* stacked = NULL;
  CHECK_ERR(kvc_cache_from_batch_splits((const kvc_cache* const*)splits, 2, &stacked), KVC_ERROR_INVALID_STATE);
  CHECK(stacked == NULL);
  TU_DESTROY(splits[0], splits[1], c);
}

/* A clone is deep: both continue identically, and changing one leaves the other alone. */
static void test_clone(void) {
  for (size_t i = 0; i < NSETTINGS; i++) {
    tq_rng rng;
    kvc_cache* c = grown(&SETTINGS[i], 4, 600 + i, &rng);
    REQUIRE(c);
    kvc_cache* d = NULL;
    REQUIRE_OK(kvc_cache_clone(c, &d));
    CHECK_EQ_U64(tu_memory(d).bytes_quantized, tu_memory(c).bytes_quantized);
    CHECK_EQ_I64(tq_quantized(d, 0), tq_quantized(c, 0));
    tq_ref before = viewed(c);
    expect_same_steps(c, d, &rng, 5);
    kvc_cache* e = NULL;
    REQUIRE_OK(kvc_cache_clone(c, &e));
    REQUIRE_OK(kvc_cache_reset(e));
    CHECK_EQ_I64(tu_seq(c, 0), 14);
    kvc_cache_destroy(e);
    tq_ref_free(&before);
    TU_DESTROY(d, c);
  }
}

int main(void) {
  TU_RUN(test_reorder_after_flushes);
  TU_RUN(test_select_and_repeat);
  TU_RUN(test_flush_after_reorder);
  TU_RUN(test_split_and_stack);
  TU_RUN(test_stack_refuses_diverged_splits);
  TU_RUN(test_clone);
  return tu_finish();
}
