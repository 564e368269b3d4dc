/*
 * tests/tier/tier_hybrid.h: a hybrid model's pool for the tier tests: group
 * 0 full attention, group 1 recurrent (Mamba), both of 4-token blocks;
 * layer 0 attention, layer 1 recurrent (tests/pool/pool_test.h's shapes).
 * A step writes the attention K/V (pt_value) and leaves the recurrent state
 * a value that depends on the number of tokens seen, as a model's scan
 * would, so that a restored state tells which boundary it came from.
 */
#ifndef KVC_TESTS_TIER_HYBRID_H
#define KVC_TESTS_TIER_HYBRID_H

#include "tier_test.h"

#define TH_BLOCK 4

static TU_UNUSED kvc_error* th_pool(kvc_pool** out, uint32_t state_slots) {
  const pt_group g[2] = {{KVC_POOL_GROUP_FULL, TH_BLOCK, 16, 0}, {KVC_POOL_GROUP_RECURRENT, TH_BLOCK, state_slots, 0}};
  const uint32_t layers[2] = {0, 1};
  return pt_pool(out, g, 2, layers, 2, KVC_POOL_LAYOUT_NHD, 64, 1);
}

/* Element i of the conv (which 0) or SSM (which 1) state after `tokens` tokens. */
static TU_UNUSED float th_state(uint64_t tokens, int which, size_t i) {
  return (float)(tokens * 1000 + (uint64_t)which * 500 + i) + 0.25f;
}

static size_t th_elems(const kvc_tensor* t) {
  size_t n = 1;
  for (int32_t d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
  return n;
}

/* Reserves, writes and commits the next `n` tokens of `s` (ids from tokens[length..]). */
static TU_UNUSED kvc_error* th_step(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, int64_t n) {
  int64_t* slots = (int64_t*)malloc((size_t)(2 * n) * sizeof(int64_t));
  int64_t first = (int64_t)kvc_pool_sequence_length(s);
  kvc_error* e = kvc_pool_reserve(s, tokens + first, (size_t)n, slots);
  if (!e) e = pt_write(p, 2, slots, first, n); /* layer 1's entries are skipped: a recurrent layer has no K/V */
  kvc_tensor st[2];
  if (!e) e = kvc_pool_recurrent_state(s, 1, &st[0], &st[1]);
  for (int w = 0; !e && w < 2; w++)
    for (size_t i = 0; i < th_elems(&st[w]); i++) ((float*)st[w].data)[i] = th_state((uint64_t)(first + n), w, i);
  if (!e) e = kvc_pool_commit(s);
  free(slots);
  return e;
}

/* Elements of s's live recurrent state that differ from the state after `tokens` tokens; -1 when it has none. */
static TU_UNUSED long th_state_mismatches(kvc_pool_sequence* s, uint64_t tokens) {
  kvc_tensor st[2];
  kvc_error* e = kvc_pool_recurrent_state(s, 1, &st[0], &st[1]);
  if (e) {
    kvc_error_destroy(e);
    return -1;
  }
  long bad = 0;
  for (int w = 0; w < 2; w++)
    for (size_t i = 0; i < th_elems(&st[w]); i++) bad += ((float*)st[w].data)[i] != th_state(tokens, w, i);
  return bad;
}

#endif /* KVC_TESTS_TIER_HYBRID_H */
