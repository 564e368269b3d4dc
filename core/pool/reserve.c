/*
 * core/pool/reserve.c: kvc_pool_reserve and kvc_pool_blocks_needed.
 *
 * Both run one plan per group: the blocks a window gives back (sliding and
 * chunked groups: those wholly before the first position the next computed
 * token attends to, judged from the committed length, so a prefill's own
 * early tokens keep their blocks until they are committed), a copy of the
 * last block when it is shared or cached (copy-on-write), and the new
 * blocks. Every release happens before any take, so a reserve succeeds
 * exactly when take - gain <= free + evictable, which is what
 * kvc_pool_blocks_needed reports: admission control and reserve agree.
 * A reserve gives back every group's window blocks before any group takes,
 * so with a shared budget (one for all groups) a group's takes may use what
 * another group's window gave back: the check is then the running total,
 * over the groups in order, of take - gain on that one budget (window gains
 * first), and blocks_needed runs the sequences' plans in the reserves'
 * order (sequence by sequence, group by group) on that one total.
 * kvc_pool_reserve_batch (reserve_batch.c) runs the same reserve per
 * sequence.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool_internal.h"

#define MAX_TOKENS (UINT64_C(1) << 40)

uint64_t kvci_pool_window_start(const kvci_pool_group* g, uint64_t committed) {
  uint64_t w = (uint64_t)g->window;
  if (g->kind == KVC_POOL_GROUP_SLIDING) return committed + 1 > w ? committed + 1 - w : 0;
  if (g->kind == KVC_POOL_GROUP_CHUNKED) return committed / w * w;
  return 0;
}

typedef struct group_plan {
  uint64_t take;   /* blocks taken from free + evictable */
  uint64_t gain;   /* blocks the releases make available first */
  uint64_t window; /* of which the window's (given back before any group takes) */
} group_plan;

/* The window's first block still needed, bounded by the table. */
static uint64_t window_first(const kvci_pool_group* g, const kvc_pool_sequence* s, const kvci_pool_seq_group* sg) {
  uint64_t first = kvci_pool_window_start(g, s->committed) / g->block_size;
  return first < sg->num_blocks ? first : sg->num_blocks;
}

/* Whether the sequence's last block is partial and must be copied before it is written. */
static int needs_copy(const kvci_pool_group* g, const kvc_pool_sequence* s, const kvci_pool_seq_group* sg,
                      uint32_t released_before) {
  if (!(s->length % g->block_size)) return 0;
  uint32_t last = sg->table[s->length / g->block_size];
  return last && (g->blocks[last].ref - released_before > 1 || g->blocks[last].cached);
}

/*
 * The plan of reserving n more tokens for s in group gi. `released` (NULL, or
 * per block of the group) counts the references that sequences planned
 * before this one release, so that shared blocks are judged as they will be
 * when this sequence's turn comes; the plan adds its own releases to it.
 */
static group_plan plan_group(const kvc_pool* p, const kvc_pool_sequence* s, uint32_t gi, uint64_t n,
                             uint32_t* released) {
  const kvci_pool_group* g = &p->groups[gi];
  const kvci_pool_seq_group* sg = &s->groups[gi];
  group_plan plan = {0, 0, 0};
  if (kvci_pool_is_recurrent(g)) {
    plan.take = sg->live ? 0 : 1;
    return plan;
  }
  uint64_t first = window_first(g, s, sg);
  for (uint64_t i = sg->window_from; i < first; i++) {
    uint32_t b = sg->table[i];
    if (!b) continue;
    plan.gain += (uint64_t)kvci_pool_release_gains(g, b, released ? released[b] : 0);
    if (released) released[b]++;
  }
  plan.window = plan.gain;
  if (s->length % g->block_size) {
    uint32_t last = sg->table[s->length / g->block_size];
    uint32_t before = released && last ? released[last] : 0;
    if (needs_copy(g, s, sg, before)) {
      plan.take++;
      plan.gain += (uint64_t)kvci_pool_release_gains(g, last, before);
      if (released) released[last]++;
    }
  }
  plan.take += kvci_pool_blocks_for(s->length + n, g->block_size) - sg->num_blocks;
  return plan;
}

/* The blocks that left group gi's window go back. */
static void apply_window(kvc_pool* p, kvc_pool_sequence* s, uint32_t gi) {
  kvci_pool_group* g = &p->groups[gi];
  kvci_pool_seq_group* sg = &s->groups[gi];
  if (kvci_pool_is_recurrent(g)) return;
  uint64_t first = window_first(g, s, sg);
  for (uint64_t i = sg->window_from; i < first; i++) {
    if (sg->table[i]) kvci_pool_block_release(g, sg->table[i]);
    sg->table[i] = 0;
  }
  if (first > sg->window_from) sg->window_from = first;
}

/* Group gi's takes: a recurrent live slot, or the copy-on-write copy and the new blocks. */
static void apply_takes(kvc_pool* p, kvc_pool_sequence* s, uint32_t gi, uint64_t n) {
  kvci_pool_group* g = &p->groups[gi];
  kvci_pool_seq_group* sg = &s->groups[gi];
  if (kvci_pool_is_recurrent(g)) {
    if (!sg->live) {
      sg->live = kvci_pool_block_take(p, gi);
      kvci_pool_restore(p, gi, 0, sg->live); /* a slot may hold an evicted checkpoint: a new state is zero */
    }
    return;
  }
  if (needs_copy(g, s, sg, 0)) {
    uint32_t* last = &sg->table[s->length / g->block_size];
    /* Released before the take: when nothing else is available the take evicts this very block, whose bytes
       are then already in place (no copy). */
    uint32_t old = *last;
    kvci_pool_block_release(g, old);
    uint32_t b = kvci_pool_block_take(p, gi);
    if (b != old) kvci_pool_copy_block(p, gi, old, b);
    *last = b;
  }
  uint64_t need = kvci_pool_blocks_for(s->length + n, g->block_size);
  while (sg->num_blocks < need) sg->table[sg->num_blocks++] = kvci_pool_block_take(p, gi);
}

static kvc_error* oom(const char* fn, const kvc_pool* p, uint32_t gi, uint64_t need) {
  const kvci_pool_group* g = &p->groups[gi];
  if (p->shared)
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: with group %u the groups need %" PRIu64 " more blocks of their "
                    "shared budget but %" PRIu64 " are available (%" PRIu64 " free, %" PRIu64 " cached evictable, of "
                    "%u); nothing changed", fn, gi, need, kvci_pool_available(g), g->budget->n_free,
                    g->budget->n_lru, g->num_blocks - 1);
  return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: group %u needs %" PRIu64 " more %s but %" PRIu64 " are available (%"
                  PRIu64 " free, %" PRIu64 " cached evictable, %" PRIu64 " in use, %" PRIu64 " pinned, of %u); nothing "
                  "changed", fn, gi, need, kvci_pool_is_recurrent(g) ? "state slots" : "blocks",
                  kvci_pool_available(g), g->budget->n_free, g->n_lru, g->n_used, g->n_pinned, g->num_blocks - 1);
}

kvc_error* kvci_pool_reserve_checked(const char* fn, kvc_pool_sequence* s, const int32_t* tokens, size_t num_tokens,
                                     int64_t* slot_mapping, size_t row_stride) {
  kvc_pool* p = s->pool;
  int64_t balance = 0; /* a shared budget: the windows' gains, then take - gain of the groups so far */
  for (uint32_t g = 0; p->shared && g < p->num_groups; g++)
    balance -= (int64_t)plan_group(p, s, g, num_tokens, NULL).window;
  for (uint32_t g = 0; g < p->num_groups; g++) {
    group_plan plan = plan_group(p, s, g, num_tokens, NULL);
    uint64_t avail = kvci_pool_available(&p->groups[g]);
    if (!p->shared && plan.take > plan.gain + avail) return oom(fn, p, g, plan.take - plan.gain);
    balance += (int64_t)plan.take - (int64_t)(plan.gain - plan.window);
    if (p->shared && balance > 0 && (uint64_t)balance > avail) return oom(fn, p, g, (uint64_t)balance);
  }
  if (kvci_pool_seq_grow(s, s->length + num_tokens)) return kvci_err_oom();
  for (uint32_t g = 0; g < p->num_groups; g++) apply_window(p, s, g);
  for (uint32_t g = 0; g < p->num_groups; g++) apply_takes(p, s, g, num_tokens);
  memcpy(s->tokens + s->length, tokens, num_tokens * sizeof(int32_t));
  for (uint32_t g = 0; g < p->num_groups; g++) {
    const kvci_pool_group* grp = &p->groups[g];
    int64_t* out = slot_mapping + (size_t)g * row_stride;
    for (size_t i = 0; i < num_tokens; i++) {
      uint64_t pos = s->length + i, bs = grp->block_size;
      out[i] = kvci_pool_is_recurrent(grp) ? -1 : (int64_t)(s->groups[g].table[pos / bs] * bs + pos % bs);
    }
  }
  s->length += num_tokens;
  return NULL;
}

kvc_error* kvci_pool_check_reserve_length(const char* fn, int64_t index, const kvc_pool_sequence* s, uint64_t n) {
  if (n <= MAX_TOKENS - s->length) return NULL;
  char buf[48];
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is %" PRIu64 "; a sequence holds at most 2^40 tokens (it has %"
                  PRIu64 ")", fn, kvci_arg_name(buf, "num_tokens", index), n, s->length);
}

kvc_error* kvc_pool_reserve(kvc_pool_sequence* s, const int32_t* tokens, size_t num_tokens, int64_t* slot_mapping) {
  static const char* FN = "kvc_pool_reserve";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), FN);
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  if (!num_tokens) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_tokens is 0; reserve at least one token", FN);
  if (!slot_mapping)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot_mapping is NULL; pass num_groups * num_tokens entries", FN);
  kvc_error* e = kvci_pool_check_tokens(FN, tokens, num_tokens);
  if (!e) e = kvci_pool_check_reserve_length(FN, -1, s, num_tokens);
  if (!e) e = kvci_pool_refusal(FN, s->pool);
  if (!e) e = kvci_pool_reserve_checked(FN, s, tokens, num_tokens, slot_mapping, num_tokens);
  /* A failed copy-on-write copy leaves the new block with unknown bytes. */
  return e ? e : kvci_pool_result(FN, s->pool, NULL);
}

kvc_error* kvc_pool_blocks_needed(const kvc_pool* pool, const kvc_pool_sequence* const* sequences,
                                  const uint64_t* new_tokens, size_t num_sequences, uint64_t* blocks_needed) {
  static const char* FN = "kvc_pool_blocks_needed";
  KVCI_GUARD_SHARED(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (!blocks_needed)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: blocks_needed is NULL; pass num_groups (%u) entries", FN,
                    pool->num_groups);
  if (num_sequences && (!sequences || !new_tokens))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but num_sequences is %zu", FN,
                    sequences ? "new_tokens" : "sequences", num_sequences);
  for (size_t i = 0; i < num_sequences; i++) {
    if (!sequences[i]) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] is NULL", FN, i);
    if (sequences[i]->pool != pool)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] belongs to another pool", FN, i);
    if (new_tokens[i] > MAX_TOKENS - sequences[i]->length)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: new_tokens[%zu] is %" PRIu64 "; a sequence holds at most 2^40 "
                      "tokens", FN, i, new_tokens[i]);
  }
  uint32_t most = 0;
  for (uint32_t g = 0; g < pool->num_groups; g++)
    if (pool->groups[g].num_blocks > most) most = pool->groups[g].num_blocks;
  uint32_t* released = num_sequences > 1 ? (uint32_t*)malloc(most * sizeof(uint32_t)) : NULL;
  if (num_sequences > 1 && !released) return kvci_err_oom();
  if (pool->shared) {
    /* One budget: the plans in the reserves' order on one running total (block ids are pool-wide). */
    if (released) memset(released, 0, most * sizeof(uint32_t));
    int64_t balance = 0, highest = 0;
    group_plan stack[8];
    group_plan* plans = pool->num_groups <= 8 ? stack : (group_plan*)malloc(pool->num_groups * sizeof(*plans));
    if (!plans) {
      free(released);
      return kvci_err_oom();
    }
    for (size_t i = 0; i < num_sequences; i++) {
      if (!new_tokens[i]) continue;
      for (uint32_t g = 0; g < pool->num_groups; g++) {
        plans[g] = plan_group(pool, sequences[i], g, new_tokens[i], released);
        balance -= (int64_t)plans[g].window;
      }
      for (uint32_t g = 0; g < pool->num_groups; g++) {
        balance += (int64_t)plans[g].take - (int64_t)(plans[g].gain - plans[g].window);
        if (balance > highest) highest = balance;
      }
    }
    if (plans != stack) free(plans);
    for (uint32_t g = 0; g < pool->num_groups; g++) blocks_needed[g] = (uint64_t)highest;
    free(released);
    return NULL;
  }
  for (uint32_t g = 0; g < pool->num_groups; g++) {
    if (released) memset(released, 0, pool->groups[g].num_blocks * sizeof(uint32_t));
    /*
     * The reserves run one after another, each releasing before it takes, so
     * a sequence early in the order cannot use the blocks a later one gives
     * back: what the batch needs is the highest running balance of takes
     * over gains, not the balance at the end.
     */
    int64_t balance = 0, highest = 0;
    for (size_t i = 0; i < num_sequences; i++) {
      if (!new_tokens[i]) continue; /* not reserved this step: it changes nothing */
      group_plan plan = plan_group(pool, sequences[i], g, new_tokens[i], released);
      balance += (int64_t)plan.take - (int64_t)plan.gain;
      if (balance > highest) highest = balance;
    }
    blocks_needed[g] = (uint64_t)highest;
  }
  free(released);
  return NULL;
}
