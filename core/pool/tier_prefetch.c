/*
 * core/pool/tier_prefetch.c: a match's tier lookups started early and
 * collected later (kvc_pool_prefetch_start, _collect; kvcache/tier.h).
 *
 * Start hashes the prompt's chain of every group on the caller's thread (the
 * sequence's salt and extra keys are read now) and queues, per group, one
 * lookup job of the blocks memory lacks at that moment, in chain order. The
 * worker asks the tiers, nearest first, and verifies every value there, so
 * the network and the checksum are off the step. Collect waits for what is
 * left of its deadline, copies the verified payloads into fresh cached
 * blocks (a block cached meanwhile is taken as it is), and then matches from
 * memory alone: the tiers were asked already, and asking again would put the
 * round trip back on the step. A job not done in time is abandoned: the
 * worker frees it when its lookups return.
 */
#define _DEFAULT_SOURCE 1 /* clock_gettime, pthread_condattr_setclock (POSIX 2008) */
#include <stdlib.h>

#include "tier/tier_internal.h"
#include "tier_worker.h"

/* One group's part: the job and where each of its keys sits in the chain (for the parent of a STORED event). */
typedef struct prefetch_group {
  kvci_tier_job* job;
  uint8_t (*chain)[KVC_BLOCK_HASH_SIZE];
  uint64_t* index;
} prefetch_group;

struct kvc_pool_prefetch {
  kvc_pool* pool;
  kvc_pool_prefetch *prev, *next; /* the pool's list (kvc_pool_destroy frees what is left) */
  uint8_t root[KVC_BLOCK_HASH_SIZE];
  uint32_t adapter;               /* the sequence's, for the STORED events of what it installs */
  int32_t* tokens;                /* a copy: the caller's array may be gone at the collect */
  size_t num_tokens;
  prefetch_group* groups;         /* num_groups entries; NULL: nothing was started (no worker) */
  int collected;
};

static void group_free(kvc_pool* p, prefetch_group* g, int abandon) {
  if (g->job) {
    if (abandon && p->tier_worker)
      kvci_tier_worker_abandon(p, g->job);
    else
      kvci_tier_job_free(p, g->job); /* done, or the worker is gone (it finished every job before it left) */
  }
  free(g->chain);
  free(g->index);
  memset(g, 0, sizeof(*g));
}

static void prefetch_free(kvc_pool_prefetch* f) {
  kvc_pool* p = f->pool;
  int pending = 0;
  for (uint32_t g = 0; f->groups && g < p->num_groups; g++) {
    pending |= f->groups[g].job != NULL;
    group_free(p, &f->groups[g], 1);
  }
  if (pending && !f->collected) kvci_tier_worker_count_prefetch(p, 0, 0, 1);
  if (f->prev) f->prev->next = f->next; else p->prefetches = f->next;
  if (f->next) f->next->prev = f->prev;
  free(f->groups);
  free(f->tokens);
  free(f);
}

void kvci_pool_prefetches_free(kvc_pool* pool) {
  while (pool->prefetches) prefetch_free(pool->prefetches);
}

/* Queues group gi's lookups: the blocks of the chain to `limit` that memory lacks now, up to one staging batch. */
static void start_group(kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, uint64_t limit, uint32_t gi,
                        prefetch_group* pg) {
  const kvci_pool_group* g = &p->groups[gi];
  uint64_t n = limit / g->block_size;
  if (!n) return;
  pg->chain = malloc((size_t)n * sizeof(*pg->chain));
  pg->index = malloc((size_t)n * sizeof(*pg->index));
  if (!pg->chain || !pg->index) return;
  kvci_pool_chain(s, tokens, g->block_size, 0, n, pg->chain);
  size_t most = kvci_pool_stage_batch(kvci_tier_frame_size_max(kvci_pool_block_payload(p, gi))), count = 0;
  for (uint64_t i = 0; i < n && count < most; i++)
    if (!kvci_pool_map_find(g, pg->chain[i])) pg->index[count++] = i;
  int full;
  if (!count || !(pg->job = kvci_tier_worker_job(p, 1, gi, count, &full))) return; /* a full queue: none */
  for (size_t k = 0; k < count; k++) kvci_pool_tier_key(p, gi, pg->chain[pg->index[k]], &pg->job->keys[k]);
  kvci_tier_worker_submit(p, pg->job);
}

/* A recurrent group's checkpoint is fetched by the match itself (tier_fetch.c): a prefetch of such a pool starts
   nothing, and its collect is a match that asks the tiers. */
static int has_recurrent_group(const kvc_pool* p) {
  for (uint32_t g = 0; g < p->num_groups; g++)
    if (kvci_pool_is_recurrent(&p->groups[g])) return 1;
  return 0;
}

kvc_error* kvc_pool_prefetch_start(kvc_pool_sequence* s, const int32_t* tokens, size_t num_tokens,
                                   kvc_pool_prefetch** out) {
  static const char* FN = "kvc_pool_prefetch_start";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), FN);
  if (s && !out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_error* e = kvci_pool_check_match(FN, s, tokens, num_tokens);
  if (e) return e;
  kvc_pool* p = s->pool;
  kvci_tier_worker_reap(p);
  kvc_pool_prefetch* f = calloc(1, sizeof(*f));
  if (!f) return kvci_err_oom();
  f->pool = p;
  memcpy(f->root, s->root, sizeof(f->root));
  f->adapter = s->adapter;
  f->num_tokens = num_tokens;
  if (num_tokens && !(f->tokens = malloc(num_tokens * sizeof(int32_t)))) {
    free(f);
    return kvci_err_oom();
  }
  if (num_tokens) memcpy(f->tokens, tokens, num_tokens * sizeof(int32_t));
  uint64_t limit = num_tokens ? num_tokens - 1 : 0; /* as a match: the last token is always computed */
  if (p->tier_worker && p->prefix_caching && p->num_tiers && limit && !has_recurrent_group(p)) {
    if (!(f->groups = calloc(p->num_groups, sizeof(*f->groups)))) {
      free(f->tokens);
      free(f);
      return kvci_err_oom();
    }
    for (uint32_t gi = 0; gi < p->num_groups; gi++) start_group(p, s, tokens, limit, gi, &f->groups[gi]);
    kvci_tier_worker_count_prefetch(p, 1, 0, 0);
  }
  f->next = p->prefetches;
  if (f->next) f->next->prev = f;
  p->prefetches = f;
  *out = f;
  return NULL;
}

/* Copies a done job's verified payloads into fresh cached blocks of its group (STORED events, as a fetch). */
static void install(kvc_pool* p, uint32_t gi, const kvc_pool_prefetch* f, const prefetch_group* pg) {
  const kvci_tier_job* j = pg->job;
  kvci_pool_group* g = &p->groups[gi];
  size_t n = j->found ? j->found : 1;
  uint32_t* held = malloc(n * sizeof(*held));   /* every block of the run in memory now: held until the end */
  uint32_t* fresh = malloc(n * sizeof(*fresh)); /* of which taken here, to be filled */
  size_t* which = malloc(n * sizeof(*which));   /* each fresh block's key */
  const uint8_t** in = malloc(n * sizeof(*in));
  size_t nh = 0, nf = 0;
  for (size_t k = 0; held && fresh && which && in && k < j->found; k++) {
    uint32_t b = kvci_pool_map_find(g, j->keys[k].block_hash);
    if (b) {
      kvci_pool_block_ref(g, b); /* cached meanwhile: kept as it is, and held so that taking cannot evict it */
    } else {
      if (!kvci_pool_available(g)) break;
      b = kvci_pool_block_take(p, gi);
      fresh[nf] = b;
      which[nf] = k;
      in[nf++] = j->payloads[k];
    }
    held[nh++] = b;
  }
  if (nf && !kvci_pool_stage_bounce(p, gi, fresh, nf, (uint8_t* const*)in, 0))
    for (size_t k = 0; k < nf; k++) {
      uint64_t i = pg->index[which[k]];
      kvci_pool_block_cache_chain(p, gi, fresh[k], pg->chain, f->root, f->adapter, f->tokens, i);
    }
  for (size_t k = nh; k-- > 0;) kvci_pool_block_release(g, held[k]); /* uncached ones go back to the free list */
  free(held);
  free(fresh);
  free(which);
  free(in);
}

kvc_error* kvc_pool_prefetch_collect(kvc_pool_prefetch* f, kvc_pool_sequence* s, uint32_t timeout_ms,
                                     uint64_t* matched_tokens) {
  static const char* FN = "kvc_pool_prefetch_collect";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(f ? f->pool : NULL), FN);
  if (!f) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: prefetch is NULL", FN);
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  if (s->pool != f->pool)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is of another pool than the prefetch; collect into a "
                    "sequence of the pool the prefetch was started on", FN);
  if (!matched_tokens) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: matched_tokens is NULL", FN);
  if (f->collected)
    return kvci_err(KVC_ERROR_INVALID_STATE, "%s: the prefetch was collected already; start another", FN);
  kvc_error* e = kvci_pool_check_match(FN, s, f->tokens, f->num_tokens);
  if (e) return e;
  kvc_pool* p = f->pool;
  if (!f->groups) { /* nothing started: the match asks the tiers itself, as kvc_pool_match_prefix */
    e = kvci_pool_match_prefix_checked(FN, s, f->tokens, f->num_tokens, matched_tokens, 1);
    if (!e) f->collected = 1;
    return e;
  }
  kvci_tier_worker_reap(p); /* blocks the worker stored since: evictable again before taking any */
  struct timespec until;
  kvci_deadline_in(&until, timeout_ms);
  int late = 0;
  for (uint32_t gi = 0; gi < p->num_groups; gi++) {
    prefetch_group* pg = &f->groups[gi];
    if (!pg->job) continue;
    /* Without a worker (stopped since the start) every job is done: the worker finished them before it left. */
    if (!p->tier_worker || kvci_tier_worker_wait(p, pg->job, &until))
      install(p, gi, f, pg);
    else {
      pg->job = NULL; /* abandoned: the worker's now */
      late = 1;
    }
    group_free(p, pg, 0);
  }
  kvci_tier_worker_count_prefetch(p, 0, late, 0);
  f->collected = 1;
  return kvci_pool_match_prefix_checked(FN, s, f->tokens, f->num_tokens, matched_tokens, 0);
}

void kvc_pool_prefetch_destroy(kvc_pool_prefetch* f) {
  KVCI_GUARD_EXCLUSIVE_WAIT(kvci_guard_of(f ? f->pool : NULL), "kvc_pool_prefetch_destroy");
  if (f) prefetch_free(f);
}
