/*
 * tests/pool/test_pool_reserve_batch.c: kvc_pool_reserve_batch and
 * kvc_pool_commit_batch. A batch does what the same reserves and commits
 * one by one do (slots, lengths, tables, counters, cached blocks); a batch
 * that runs out of blocks stops at the first sequence that does not fit,
 * exactly where kvc_pool_blocks_needed says, leaves it and the later ones
 * alone and marks their slots -1; bad arguments are refused with nothing
 * reserved and the out-parameters untouched.
 */
#include "pool_test.h"

static const pt_group GROUPS[] = {{KVC_POOL_GROUP_FULL, 2, 12, 0}, {KVC_POOL_GROUP_SLIDING, 2, 12, 3}};
static const uint32_t LAYER_GROUP[] = {0, 1};
#define NG 2
#define NS 3

typedef struct pool_state {
  kvc_pool_stats stats[NG];
  uint64_t length[NS], committed[NS];
  int32_t rows[NS][NG][16];
} pool_state;

static void take(pool_state* s, kvc_pool* p, kvc_pool_sequence* const* seqs) {
  memset(s, 0, sizeof *s);
  for (uint32_t g = 0; g < NG; g++) s->stats[g] = pt_stats(p, g);
  for (int i = 0; i < NS; i++) {
    s->length[i] = kvc_pool_sequence_length(seqs[i]);
    s->committed[i] = kvc_pool_sequence_committed(seqs[i]);
    for (uint32_t g = 0; g < NG; g++) pt_row(p, seqs[i], g, s->rows[i][g], 16);
  }
}

static kvc_pool* make_pool(kvc_pool_sequence** seqs) {
  kvc_pool* p = NULL;
  if (!CHECK_OK(pt_pool(&p, GROUPS, NG, LAYER_GROUP, 2, KVC_POOL_LAYOUT_NHD, 0, 1))) return NULL;
  for (int i = 0; i < NS; i++) CHECK_OK(kvc_pool_sequence_create(p, NULL, &seqs[i]));
  return p;
}

static void test_batch_equals_one_by_one(void) {
  kvc_pool_sequence *a[NS], *b[NS];
  kvc_pool* one = make_pool(a);
  kvc_pool* batch = make_pool(b);
  REQUIRE(one && batch);
  int32_t tokens[16];
  for (int i = 0; i < 16; i++) tokens[i] = 40 + i;
  /* A prefill of 3, 0 (this sequence waits) and 4 tokens, then steps of one token each. */
  uint64_t counts[4][NS] = {{3, 0, 4}, {1, 3, 1}, {1, 1, 1}, {1, 1, 1}};
  for (int step = 0; step < 4; step++) {
    uint64_t total = 0;
    for (int i = 0; i < NS; i++) total += counts[step][i];
    int64_t want[NG * 16], got[NG * 16], slots[NG * 16];
    size_t at = 0;
    for (int i = 0; i < NS; i++) {
      size_t n = (size_t)counts[step][i];
      if (!n) continue;
      REQUIRE_OK(kvc_pool_reserve(a[i], tokens + at, n, slots));
      for (int g = 0; g < NG; g++) memcpy(want + g * total + at, slots + g * n, n * sizeof(int64_t));
      at += n;
    }
    size_t reserved = 99;
    REQUIRE_OK(kvc_pool_reserve_batch(batch, b, NS, tokens, counts[step], got, &reserved));
    CHECK_EQ_U64(reserved, NS);
    for (uint64_t i = 0; i < NG * total; i++) CHECK_EQ_I64(got[i], want[i]);
    for (int i = 0; i < NS; i++) REQUIRE_OK(kvc_pool_commit(a[i]));
    REQUIRE_OK(kvc_pool_commit_batch(batch, b, NS));
    pool_state x, y;
    take(&x, one, a);
    take(&y, batch, b);
    CHECK(memcmp(&x, &y, sizeof x) == 0);
  }
  CHECK_EQ_U64(pt_stats(batch, 0).used_blocks, 3 + 3 + 4); /* 6, 5 and 7 tokens */
  kvc_pool_destroy(one);
  kvc_pool_destroy(batch);
}

/* 11 usable blocks per group. Sequence 0 takes 2 blocks, sequence 1 asks for 10 (too many once 0 has its
   two), sequence 2 asks for 1, which would fit: the batch stops at sequence 1 anyway. */
static void test_stops_at_the_first_sequence_that_does_not_fit(void) {
  kvc_pool_sequence* s[NS];
  kvc_pool* p = make_pool(s);
  REQUIRE(p);
  int32_t tokens[32] = {0};
  uint64_t counts[NS] = {4, 20, 2};
  uint64_t need[NG];
  const kvc_pool_sequence* first_two[2] = {s[0], s[1]};
  REQUIRE_OK(kvc_pool_blocks_needed(p, first_two, counts, 1, need));
  CHECK(need[0] <= pt_stats(p, 0).free_blocks);
  REQUIRE_OK(kvc_pool_blocks_needed(p, first_two, counts, 2, need));
  CHECK(need[0] > pt_stats(p, 0).free_blocks); /* admission control predicts the stop */
  pool_state before;
  take(&before, p, s);
  int64_t slots[NG * 26];
  size_t reserved = 99;
  REQUIRE_OK(kvc_pool_reserve_batch(p, s, NS, tokens, counts, slots, &reserved));
  CHECK_EQ_U64(reserved, 1);
  CHECK_EQ_U64(kvc_pool_sequence_length(s[0]), 4);
  CHECK_EQ_U64(kvc_pool_sequence_length(s[1]), 0);
  CHECK_EQ_U64(kvc_pool_sequence_length(s[2]), 0);
  CHECK_EQ_U64(pt_stats(p, 0).used_blocks, 2);
  for (int g = 0; g < NG; g++) {
    CHECK_EQ_I64(slots[g * 26 + 0], 2);
    CHECK_EQ_I64(slots[g * 26 + 3], 5);
    for (int i = 4; i < 26; i++) CHECK_EQ_I64(slots[g * 26 + i], -1); /* unreserved: skipped by a write */
  }
  /* The mapping as it is goes to a write of the whole batch: sequence 0's tokens land, the rest is skipped. */
  CHECK_OK(pt_write(p, 2, slots, 0, 26));
  CHECK_EQ_I64(pt_gather_mismatches(s[0], 0), 0);
  kvc_pool_destroy(p);
}

static void test_refusals_reserve_nothing(void) {
  kvc_pool_sequence *s[NS], *stranger_seq[NS];
  kvc_pool* p = make_pool(s);
  kvc_pool* other = make_pool(stranger_seq);
  REQUIRE(p && other);
  int32_t tokens[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  uint64_t counts[NS] = {2, 1, 2};
  REQUIRE_OK(kvc_pool_reserve(s[0], tokens, 1, (int64_t[NG]){0})); /* something to keep */
  pool_state before, now;
  take(&before, p, s);
  int64_t slots[NG * 8];
  for (int i = 0; i < NG * 8; i++) slots[i] = 77;
  size_t reserved = 99;
  kvc_pool_sequence* list[NS] = {s[0], s[1], s[2]};
#define BATCH_REFUSED(call, code, what)      \
  do {                                       \
    CHECK_REFUSED(call, code, what);         \
    take(&now, p, s);                        \
    CHECK(memcmp(&now, &before, sizeof now) == 0); \
    CHECK_EQ_U64(reserved, 99);              \
    CHECK_EQ_I64(slots[0], 77);              \
  } while (0)
  BATCH_REFUSED(kvc_pool_reserve_batch(NULL, list, NS, tokens, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "pool is NULL");
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, counts, slots, NULL), KVC_ERROR_INVALID_ARGUMENT,
                "num_reserved is NULL");
  BATCH_REFUSED(kvc_pool_reserve_batch(p, NULL, NS, tokens, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "sequences is NULL");
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, NULL, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "num_tokens is NULL");
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, NULL, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "tokens is NULL");
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, counts, NULL, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "slot_mapping is NULL");
  tokens[4] = -3;
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "tokens[4] is -3");
  tokens[4] = 5;
  list[2] = s[0];
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "sequences[2] is sequences[0] again");
  list[2] = stranger_seq[0];
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "sequences[2] belongs to another pool");
  list[2] = NULL;
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, counts, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "sequences[2] is NULL");
  list[2] = s[2];
  uint64_t huge[NS] = {1, (UINT64_C(1) << 40) + 1, 1};
  BATCH_REFUSED(kvc_pool_reserve_batch(p, list, NS, tokens, huge, slots, &reserved), KVC_ERROR_INVALID_ARGUMENT,
                "num_tokens[1] is 1099511627777");
  BATCH_REFUSED(kvc_pool_commit_batch(NULL, list, NS), KVC_ERROR_INVALID_ARGUMENT, "pool is NULL");
  BATCH_REFUSED(kvc_pool_commit_batch(p, NULL, NS), KVC_ERROR_INVALID_ARGUMENT, "sequences is NULL");
  list[1] = stranger_seq[1];
  BATCH_REFUSED(kvc_pool_commit_batch(p, list, NS), KVC_ERROR_INVALID_ARGUMENT, "sequences[1] belongs to another pool");
  list[1] = s[1];
#undef BATCH_REFUSED
  /* The same list works once corrected; an empty batch is a success with nothing reserved. */
  CHECK_OK(kvc_pool_reserve_batch(p, list, NS, tokens, counts, slots, &reserved));
  CHECK_EQ_U64(reserved, NS);
  CHECK_OK(kvc_pool_reserve_batch(p, list, 0, NULL, NULL, NULL, &reserved));
  CHECK_EQ_U64(reserved, 0);
  CHECK_OK(kvc_pool_commit_batch(p, list, NS));
  CHECK_EQ_U64(kvc_pool_sequence_committed(s[0]), 3);
  kvc_pool_destroy(other);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_batch_equals_one_by_one);
  TU_RUN(test_stops_at_the_first_sequence_that_does_not_fit);
  TU_RUN(test_refusals_reserve_nothing);
  return tu_finish();
}
