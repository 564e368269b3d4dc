/*
 * test_tier_custom_store.c: a program's own store under a pool
 * (kvc_tier_create with kvc_tier_ops): a commit stores its blocks in one
 * put_many, a match asks the run in one get_many, every single-byte flip of
 * a stored value makes the match miss (counted corrupt, the pool
 * unchanged), and a hybrid pool's recurrent checkpoint goes through a
 * store that cannot answer exists_many.
 */
#include "tier_hybrid.h" /* first: it sets the feature macros */

#include "memory_store.h"

enum { PROMPT = 17 };

static void test_batches_and_every_flip(void) {
  kvc_pool* p = NULL;
  ms_store* m;
  REQUIRE_OK(ms_pool(16, "memory", &p, &m));
  kvc_tier* t = kvc_pool_tier(p, 0);
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, 1);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(pt_step(p, 1, 2, s, tok, PROMPT));
  CHECK_EQ_U64(m->count, 4);
  CHECK_EQ_U64(m->put_calls, 1); /* one batch for the commit's four blocks */
  kvc_pool_sequence_destroy(s);
  REQUIRE_OK(kvc_pool_clear_cache(p));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, tok, PROMPT, &matched));
  CHECK_EQ_U64(matched, 16);
  CHECK_EQ_U64(m->get_calls, 1); /* the whole run in one lookup */
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  kvc_pool_sequence_destroy(s);
  /* Every byte of the first block's value flipped in turn: a miss counted corrupt, the pool unchanged. */
  long opened = 0, bytes = (long)m->sizes[0];
  uint64_t corrupt_before = tt_stats(t).corrupt;
  for (m->flip = 0; m->flip < bytes; m->flip++) {
    REQUIRE_OK(kvc_pool_clear_cache(p));
    REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
    REQUIRE_OK(kvc_pool_match_prefix(s, tok, PROMPT, &matched));
    opened += matched != 0;
    kvc_pool_sequence_destroy(s);
    if (pt_stats(p, 0).free_blocks != 15) opened++; /* nothing taken stays taken */
  }
  CHECK_EQ_I64(opened, 0);
  CHECK_EQ_U64(tt_stats(t).corrupt - corrupt_before, (uint64_t)bytes);
  kvc_pool_destroy(p);
}

/* A store without exists_many: the farthest boundary is asked of get_many directly (one state read). */
static void test_recurrent_checkpoint_without_exists(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(th_pool(&p, 8));
  ms_store* m;
  kvc_tier* t = NULL;
  REQUIRE_OK(ms_tier("memory", &t, &m));
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT));
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, 1);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(th_step(p, s, tok, 8));
  CHECK_EQ_U64(m->count, 3); /* two attention blocks, the checkpoint at 8 */
  CHECK_EQ_U64(m->put_calls, 2); /* one per group */
  kvc_pool_sequence_destroy(s);
  REQUIRE_OK(kvc_pool_clear_cache(p));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, tok, 9, &matched));
  CHECK_EQ_U64(matched, 8);
  CHECK_EQ_U64(m->get_calls, 2); /* the attention run, then the checkpoint at 8 */
  CHECK_EQ_I64(th_state_mismatches(s, 8), 0);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_batches_and_every_flip);
  TU_RUN(test_recurrent_checkpoint_without_exists);
  return tu_finish();
}
