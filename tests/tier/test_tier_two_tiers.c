/*
 * test_tier_two_tiers.c: a pool with two disk tiers. Evicted blocks go to
 * both; a later match finds them all in the first and never asks the
 * second; with the first tier's files removed, the second has them.
 */
#include "tier_test.h" /* first: it sets the feature macros */

enum { N = 16, PROMPT = 17 }; /* 4 blocks of 4 tokens are computed; a match of 17 tokens can take all 4 */

static void test_first_tier_answers_first(void) {
  char da[512], db[512];
  REQUIRE(tt_tempdir(da, sizeof da, "two-a"));
  REQUIRE(tt_tempdir(db, sizeof db, "two-b"));
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 5, KVC_POOL_LAYOUT_NHD)); /* 4 usable blocks */
  kvc_tier* a = tt_disk(da, 0);
  kvc_tier* b = tt_disk(db, 0);
  REQUIRE(a && b);
  REQUIRE_OK(kvc_pool_add_tier(p, a, KVC_TIER_WRITE_ON_EVICT));
  REQUIRE_OK(kvc_pool_add_tier(p, b, KVC_TIER_WRITE_ON_EVICT));
  int32_t x[PROMPT], y[PROMPT];
  tt_prompt(x, PROMPT, 1);
  tt_prompt(y, PROMPT, 5000);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(tt_commit_prompt(p, N, &s)); /* x's first N tokens */
  kvc_pool_sequence_destroy(s);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(pt_step(p, 1, 2, s, y, N)); /* evicts x's 4 blocks: to both tiers */
  kvc_pool_sequence_destroy(s);
  CHECK_EQ_U64(tt_stats(a).puts, 4);
  CHECK_EQ_U64(tt_stats(b).puts, 4);
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, x, PROMPT, &matched));
  CHECK_EQ_U64(matched, N);
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  CHECK_EQ_U64(tt_stats(a).hits, 4);
  CHECK_EQ_U64(tt_stats(b).gets, 0); /* the first tier had every block: the second is not asked */
  kvc_pool_sequence_destroy(s);
  /* y's blocks are on both tiers now (x's made room); the first tier loses its files: the second answers. */
  tt_rmtree(da);
  REQUIRE(mkdir(da, 0700) == 0);
  uint64_t b_hits = tt_stats(b).hits;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, y, PROMPT, &matched));
  CHECK_EQ_U64(matched, N);
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  CHECK_EQ_U64(tt_stats(b).hits - b_hits, 4);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
  tt_rmtree(da);
  tt_rmtree(db);
}

int main(void) {
  TU_RUN(test_first_tier_answers_first);
  return tu_finish();
}
