/*
 * core/pool/prefix.c: the hash chain (kvc_pool_commit) and its use
 * (kvc_pool_match_prefix).
 *
 * A block's key is its chain hash (docs/block-hash.md): the root from the
 * pool's seed and the sequence's salt, then one SHA-256 per full block over
 * its parent, its tokens and its extra keys (the sequence's adapter key and
 * the multimodal items the block overlaps). Only committed full blocks are hashed, so a
 * cached block's bytes are final. A match must be a whole number of blocks
 * of every group and present in every group (for a sliding or chunked group,
 * the blocks the next token attends to; for a recurrent group, a checkpoint
 * at its end): the longest such prefix, as vLLM's hybrid allocator finds it.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool/block_hash.h"
#include "pool_internal.h"

void kvci_pool_chain(kvc_pool_sequence* s, const int32_t* tokens, uint32_t block_size, uint64_t first,
                     uint64_t count, uint8_t (*out)[KVC_BLOCK_HASH_SIZE]) {
  for (uint64_t i = first; i < first + count; i++) {
    uint64_t start = i * block_size;
    uint32_t extra_len;
    const uint8_t* extra = kvci_pool_extra_block(s->extra, start, start + block_size, &extra_len);
    /* Unchecked: token ids were checked (>= 0) when they entered the sequence. */
    s->pool->block_hash(i ? out[i - 1] : s->root, tokens + start, block_size, extra, extra_len, out[i]);
  }
}

void kvci_pool_commit_checked(kvc_pool_sequence* s) {
  kvc_pool* p = s->pool;
  if (s->committed == s->length) return;
  s->committed = s->length;
  if (!p->prefix_caching) return;
  for (uint32_t g = 0; g < p->num_groups; g++) {
    kvci_pool_seq_group* sg = &s->groups[g];
    const kvci_pool_group* grp = &p->groups[g];
    uint64_t full = s->committed / grp->block_size;
    if (full <= sg->hashed) continue;
    kvci_pool_chain(s, s->tokens, grp->block_size, sg->hashed, full - sg->hashed, sg->hashes);
    if (!kvci_pool_is_recurrent(grp)) {
      for (uint64_t i = sg->hashed; i < full; i++)
        if (sg->table[i] && kvci_pool_block_cache(p, g, sg->table[i], s, s->tokens, i) &&
            p->commit_tiers)
          kvci_pool_tiers_committed(p, g, sg->table[i]);
    }
    sg->hashed = full;
    if (kvci_pool_is_recurrent(grp) && s->committed % grp->block_size == 0) kvci_pool_checkpoint(p, s, g);
  }
  if (p->pending_count) kvci_pool_tiers_flush(p);
}

kvc_error* kvc_pool_commit(kvc_pool_sequence* s) {
  static const char* FN = "kvc_pool_commit";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), FN);
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  kvc_error* e = kvci_pool_refusal(FN, s->pool);
  if (e) return e;
  kvci_pool_commit_checked(s);
  /* A failed checkpoint copy leaves a cached state with unknown bytes. */
  return kvci_pool_result(FN, s->pool, NULL);
}

/* Whether a match of L tokens holds in group gi (whose chain is computed that far). */
static int group_matches(const kvc_pool* p, const kvc_pool_sequence* s, uint32_t gi, uint64_t L) {
  const kvci_pool_group* g = &p->groups[gi];
  const kvci_pool_seq_group* sg = &s->groups[gi];
  if (kvci_pool_is_recurrent(g)) return kvci_pool_map_find(g, sg->hashes[L / g->block_size - 1]) != 0;
  for (uint64_t i = kvci_pool_window_start(g, L) / g->block_size; i < L / g->block_size; i++)
    if (!kvci_pool_map_find(g, sg->hashes[i])) return 0;
  return 1;
}

static uint64_t gcd64(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

uint64_t kvci_pool_match_step(const kvc_pool* p, uint64_t cap) {
  uint64_t step = 1;
  for (uint32_t gi = 0; gi < p->num_groups && step <= cap; gi++)
    step = step / gcd64(step, p->groups[gi].block_size) * p->groups[gi].block_size;
  return step;
}

/* The longest match: computes the chains it needs into the sequence's (invisible until hashed is set) arrays. */
static uint64_t longest_match(const kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint64_t limit) {
  /* Full groups first: each caps the match at its first miss, and their chains stop there. */
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    const kvci_pool_group* g = &p->groups[gi];
    if (!kvci_pool_keeps_all(g)) continue;
    kvci_pool_seq_group* sg = &s->groups[gi];
    uint64_t hit = 0, n = limit / g->block_size;
    while (hit < n) {
      kvci_pool_chain(s, tokens, g->block_size, hit, 1, sg->hashes);
      if (!kvci_pool_map_find(g, sg->hashes[hit])) break;
      hit++;
    }
    if (hit * g->block_size < limit) limit = hit * g->block_size;
  }
  uint64_t step = 1;
  for (uint32_t gi = 0; gi < p->num_groups && step <= limit; gi++) {
    const kvci_pool_group* g = &p->groups[gi];
    step = step / kvci_pool_gcd(step, g->block_size) * g->block_size;
    if (!kvci_pool_keeps_all(g))
      kvci_pool_chain(s, tokens, g->block_size, 0, limit / g->block_size, s->groups[gi].hashes);
  }
  if (step > limit) return 0;
  for (uint64_t L = limit / step * step; L; L -= step) {
    int ok = 1;
    for (uint32_t gi = 0; ok && gi < p->num_groups; gi++) ok = group_matches(p, s, gi, L);
    if (ok) return L;
  }
  return 0;
}

/*
 * A recurrent group restores its checkpoint into a live slot: one must be available once the match holds its
 * blocks (the evictable ones it attaches are no longer available: the checkpoints, and in a shared budget every
 * group's matched blocks).
 */
typedef struct match_at {
  const kvc_pool* p;
  const kvc_pool_sequence* s;
  uint64_t L;
} match_at;

static uint64_t live_need(const void* arg, uint32_t gi, uint64_t* lost) {
  const match_at* m = (const match_at*)arg;
  const kvci_pool_group* g = &m->p->groups[gi];
  const kvci_pool_seq_group* sg = &m->s->groups[gi];
  int rec = kvci_pool_is_recurrent(g);
  uint64_t n = m->L / g->block_size, first = rec ? n - 1 : kvci_pool_window_start(g, m->L) / g->block_size;
  for (uint64_t i = first; i < n; i++) {
    const kvci_pool_block* b = &g->blocks[kvci_pool_map_find(g, sg->hashes[i])];
    *lost += !b->ref && !b->pinned;
  }
  return rec && !sg->live;
}

static kvc_error* check_live_slots(const char* fn, const kvc_pool* p, const kvc_pool_sequence* s, uint64_t L) {
  match_at m = {p, s, L};
  return kvci_pool_budget_check(fn, p, live_need, &m, "for the live states restored from the matched checkpoints");
}

kvc_error* kvc_pool_match_prefix(kvc_pool_sequence* s, const int32_t* tokens, size_t num_tokens,
                                 uint64_t* matched_tokens) {
  static const char* FN = "kvc_pool_match_prefix";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), FN);
  return kvci_pool_match_prefix_checked(FN, s, tokens, num_tokens, matched_tokens, 1);
}

kvc_error* kvci_pool_check_match(const char* FN, const kvc_pool_sequence* s, const int32_t* tokens,
                                 size_t num_tokens) {
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  kvc_error* e = kvci_pool_check_tokens(FN, tokens, num_tokens);
  if (e) return e;
  if (s->length)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the sequence holds %" PRIu64 " tokens; match a prefix into an "
                    "empty sequence (a new request)", FN, s->length);
  if (num_tokens > (UINT64_C(1) << 40))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_tokens is %zu; a sequence holds at most 2^40 tokens", FN,
                    num_tokens);
  return kvci_pool_refusal(FN, s->pool);
}

kvc_error* kvci_pool_match_prefix_checked(const char* FN, kvc_pool_sequence* s, const int32_t* tokens,
                                          size_t num_tokens, uint64_t* matched_tokens, int ask_tiers) {
  if (s && !matched_tokens) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: matched_tokens is NULL", FN);
  kvc_error* e = kvci_pool_check_match(FN, s, tokens, num_tokens);
  if (e) return e;
  kvc_pool* p = s->pool;
  uint64_t limit = num_tokens ? num_tokens - 1 : 0; /* the last token is always computed: its logits are needed */
  if (kvci_pool_seq_grow(s, limit)) return kvci_err_oom();
  uint64_t L = p->prefix_caching ? longest_match(p, s, tokens, limit) : 0;
  /* The tiers continue where memory stops; what they add is then in memory, so the same rule finds it. */
  if (ask_tiers && p->prefix_caching && p->num_tiers && L < limit && kvci_pool_tiers_fetch(p, s, tokens, limit, L))
    L = longest_match(p, s, tokens, limit);
  if (L && (e = check_live_slots(FN, p, s, L))) return e;
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    kvci_pool_group* g = &p->groups[gi];
    kvci_pool_seq_group* sg = &s->groups[gi];
    uint64_t n = L / g->block_size;
    g->prefix_queries += limit / g->block_size;
    g->prefix_hits += n;
    if (!L) continue;
    sg->hashed = n;
    if (kvci_pool_is_recurrent(g)) {
      /* Held while live slots are taken (below), so that taking cannot evict it. */
      kvci_pool_block_ref(g, kvci_pool_map_find(g, sg->hashes[n - 1]));
      continue;
    }
    uint64_t first = kvci_pool_window_start(g, L) / g->block_size;
    for (uint64_t i = 0; i < n; i++) {
      uint32_t b = i < first ? 0 : kvci_pool_map_find(g, sg->hashes[i]);
      if (b) kvci_pool_block_ref(g, b);
      sg->table[i] = b;
    }
    sg->num_blocks = n;
    sg->window_from = first < n ? first : n;
  }
  /* Every matched block is held before a live slot is taken: in a shared budget a take may evict any group's. */
  for (uint32_t gi = 0; L && gi < p->num_groups; gi++) {
    kvci_pool_group* g = &p->groups[gi];
    kvci_pool_seq_group* sg = &s->groups[gi];
    if (!kvci_pool_is_recurrent(g)) continue;
    uint32_t ck = kvci_pool_map_find(g, sg->hashes[L / g->block_size - 1]);
    if (!sg->live) sg->live = kvci_pool_block_take(p, gi);
    kvci_pool_restore(p, gi, ck, sg->live);
    kvci_pool_block_release(g, ck); /* back at the LRU's recent end: it was just used */
  }
  if (L) memcpy(s->tokens, tokens, L * sizeof(int32_t));
  s->length = s->committed = L;
  *matched_tokens = L;
  return kvci_pool_result(FN, p, NULL); /* a restored recurrent state holds unknown bytes */
}
