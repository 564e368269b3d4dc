/*
 * core/pool/sequence.c: sequences of a pool: create, destroy, lengths, fork,
 * truncate (speculative decoding's rollback) and pin.
 *
 * A sequence holds its token ids (the block hashes are computed from them),
 * and per group a block table and the hash chain of its committed full
 * blocks. The chain is kept even where a sliding window freed the block: a
 * later block's hash needs its parent.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool_internal.h"

kvc_error* kvci_pool_check_tokens(const char* fn, const int32_t* tokens, size_t num_tokens) {
  if (!tokens && num_tokens)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tokens is NULL but num_tokens is %zu", fn, num_tokens);
  for (size_t i = 0; i < num_tokens; i++)
    if (tokens[i] < 0)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tokens[%zu] is %d; token ids must be >= 0", fn, i,
                      (int)tokens[i]);
  return NULL;
}

static int grow(void** p, uint64_t* cap, uint64_t need, size_t elem) {
  if (need <= *cap) return 0;
  uint64_t n = *cap ? *cap : 4;
  while (n < need) n *= 2;
  if (n > SIZE_MAX / elem) return -1;
  void* q = realloc(*p, (size_t)n * elem);
  if (!q) return -1;
  *p = q;
  *cap = n;
  return 0;
}

int kvci_pool_seq_grow(kvc_pool_sequence* s, uint64_t tokens) {
  if (grow((void**)&s->tokens, &s->token_cap, tokens, sizeof(int32_t))) return -1;
  for (uint32_t g = 0; g < s->pool->num_groups; g++) {
    kvci_pool_seq_group* sg = &s->groups[g];
    uint32_t bs = s->pool->groups[g].block_size;
    if (grow((void**)&sg->table, &sg->table_cap, kvci_pool_blocks_for(tokens, bs), sizeof(uint32_t)) ||
        grow((void**)&sg->hashes, &sg->hash_cap, tokens / bs, KVC_BLOCK_HASH_SIZE))
      return -1;
  }
  return 0;
}

void kvci_pool_seq_drop_blocks(kvc_pool_sequence* s, uint32_t group, uint64_t from) {
  kvci_pool_seq_group* sg = &s->groups[group];
  kvci_pool_group* g = &s->pool->groups[group];
  while (sg->num_blocks > from) {
    uint32_t b = sg->table[--sg->num_blocks];
    if (b) kvci_pool_block_release(g, b);
  }
  if (sg->window_from > from) sg->window_from = from;
}

static kvc_pool_sequence* seq_new(kvc_pool* pool) {
  kvc_pool_sequence* s = (kvc_pool_sequence*)calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->groups = (kvci_pool_seq_group*)calloc(pool->num_groups, sizeof(*s->groups));
  if (!s->groups) {
    free(s);
    return NULL;
  }
  s->pool = pool;
  return s;
}

static void seq_free(kvc_pool_sequence* s) {
  for (uint32_t g = 0; g < s->pool->num_groups; g++) {
    free(s->groups[g].table);
    free(s->groups[g].hashes);
  }
  free(s->groups);
  free(s->tokens);
  kvci_pool_extra_free(s->extra);
  free(s);
}

static void seq_link(kvc_pool_sequence* s) {
  kvc_pool* p = s->pool;
  s->next = p->sequences;
  if (p->sequences) p->sequences->prev = s;
  p->sequences = s;
}

kvc_error* kvc_pool_sequence_create(kvc_pool* pool, const kvc_pool_sequence_options* options,
                                    kvc_pool_sequence** out) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), "kvc_pool_sequence_create");
  return kvci_pool_sequence_create(pool, options, out);
}

kvc_error* kvci_pool_sequence_create(kvc_pool* pool, const kvc_pool_sequence_options* options,
                                     kvc_pool_sequence** out) {
  static const char* FN = "kvc_pool_sequence_create";
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_pool_sequence_options o = KVC_POOL_SEQUENCE_OPTIONS_INIT;
  if (options) {
    kvc_error* e = kvci_read_pool_sequence_options(FN, "options", options, &o);
    if (e) return e;
    if (!o.salt && o.salt_len)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->salt is NULL but salt_len is %zu", FN, o.salt_len);
  }
  int vllm = pool->hash_mode == KVC_POOL_HASH_VLLM_SHA256_CBOR;
  kvci_pool_extra* extra;
  kvc_error* e = kvci_pool_extra_read(FN, &o, vllm, &extra);
  if (e) return e;
  kvc_pool_sequence* s = seq_new(pool);
  if (!s) {
    kvci_pool_extra_free(extra);
    return kvci_err_oom();
  }
  s->extra = extra;
  int64_t adapter = kvci_pool_adapter_intern(pool, o.adapter_key, o.adapter_key_len, o.adapter_id);
  if (adapter < 0) {
    seq_free(s);
    return kvci_err_oom();
  }
  s->adapter = (uint32_t)adapter;
  /* vLLM's chains all start at NONE_HASH: its cache salt is an extra key of the first block instead. */
  if (vllm)
    memcpy(s->root, pool->vllm_root, KVC_BLOCK_HASH_SIZE);
  else
    e = kvc_block_hash_root(pool->seed, pool->seed_len, o.salt, o.salt_len, s->root);
  if (e) {
    seq_free(s);
    return e;
  }
  seq_link(s);
  *out = s;
  return NULL;
}

int kvci_pool_sequence_has_extra_keys(const kvc_pool_sequence* s) { return s->extra != NULL; }

void kvc_pool_sequence_destroy(kvc_pool_sequence* s) {
  /* No error to refuse with: it waits for the other call. */
  KVCI_GUARD_EXCLUSIVE_WAIT(kvci_guard_of(s ? s->pool : NULL), "kvc_pool_sequence_destroy");
  kvci_pool_sequence_free(s);
}

void kvci_pool_sequence_free(kvc_pool_sequence* s) {
  if (!s) return;
  kvc_pool* p = s->pool;
  for (uint32_t g = 0; g < p->num_groups; g++) {
    kvci_pool_seq_drop_blocks(s, g, 0);
    if (s->groups[g].live) kvci_pool_block_release(&p->groups[g], s->groups[g].live);
  }
  if (s->prev) s->prev->next = s->next; else p->sequences = s->next;
  if (s->next) s->next->prev = s->prev;
  seq_free(s);
}

uint64_t kvc_pool_sequence_length(const kvc_pool_sequence* s) {
  KVCI_GUARD_SHARED_WAIT(kvci_guard_of(s ? s->pool : NULL));
  return s ? s->length : 0;
}

uint64_t kvc_pool_sequence_committed(const kvc_pool_sequence* s) {
  KVCI_GUARD_SHARED_WAIT(kvci_guard_of(s ? s->pool : NULL));
  return s ? s->committed : 0;
}

kvci_guard* kvci_sequence_guard(const kvc_pool_sequence* s) { return kvci_guard_of(s ? s->pool : NULL); }

/* A fork takes a live state slot in each recurrent group where the source has one. */
static uint64_t fork_need(const void* src, uint32_t g, uint64_t* lost) {
  (void)lost;
  return ((const kvc_pool_sequence*)src)->groups[g].live != 0;
}

kvc_error* kvc_pool_fork(const kvc_pool_sequence* src, kvc_pool_sequence** out) {
  static const char* FN = "kvc_pool_fork";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(src ? src->pool : NULL), FN);
  if (!src) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_pool* p = src->pool;
  kvc_error* poisoned = kvci_pool_refusal(FN, p);
  if (poisoned) return poisoned;
  kvc_error* short_of_slots = kvci_pool_budget_check(FN, p, fork_need, src, "for the fork's live states");
  if (short_of_slots) return short_of_slots;
  kvc_pool_sequence* s = seq_new(p);
  int extra_oom = 0;
  if (s) s->extra = kvci_pool_extra_copy(src->extra, &extra_oom); /* its blocks to come hash as src's would */
  if (!s || extra_oom || kvci_pool_seq_grow(s, src->length)) {
    if (s) seq_free(s);
    return kvci_err_oom();
  }
  memcpy(s->root, src->root, sizeof s->root);
  s->adapter = src->adapter;
  if (src->length) memcpy(s->tokens, src->tokens, src->length * sizeof(int32_t));
  s->length = src->length;
  s->committed = src->committed;
  for (uint32_t g = 0; g < p->num_groups; g++) {
    const kvci_pool_seq_group* a = &src->groups[g];
    kvci_pool_seq_group* b = &s->groups[g];
    if (a->num_blocks) memcpy(b->table, a->table, a->num_blocks * sizeof(uint32_t));
    if (a->hashed) memcpy(b->hashes, a->hashes, a->hashed * (size_t)KVC_BLOCK_HASH_SIZE);
    b->num_blocks = a->num_blocks;
    b->window_from = a->window_from;
    b->hashed = a->hashed;
    for (uint64_t i = 0; i < b->num_blocks; i++)
      if (b->table[i]) kvci_pool_block_ref(&p->groups[g], b->table[i]);
    if (a->live) {
      b->live = kvci_pool_block_take(p, g);
      kvci_pool_restore(p, g, a->live, b->live);
    }
  }
  seq_link(s);
  if (p->fault.fresh) { /* the fork's live state holds unknown bytes: it goes, and the pool has lost nothing */
    kvci_pool_sequence_free(s); /* the guard is held: the public destroy would wait for it */
    return kvci_fault_discard(FN, &p->fault, p->backend, "no fork was made; the pool is unchanged");
  }
  *out = s;
  return NULL;
}

/* Truncation's checks for one group; *restore receives the checkpoint a recurrent group restores (0: zeroes). */
static kvc_error* check_truncate(const kvc_pool_sequence* s, uint32_t gi, uint64_t n, uint32_t* restore) {
  static const char* FN = "kvc_pool_truncate";
  const kvc_pool* p = s->pool;
  const kvci_pool_group* g = &p->groups[gi];
  const kvci_pool_seq_group* sg = &s->groups[gi];
  uint64_t committed = s->committed < n ? s->committed : n;
  if (kvci_pool_is_recurrent(g)) {
    *restore = 0;
    if (!sg->live || n == 0) return NULL; /* no state yet, or back to the initial (zero) state */
    uint64_t k = n / g->block_size;
    if (n % g->block_size == 0 && k <= sg->hashed && (*restore = kvci_pool_map_find(g, sg->hashes[k - 1])))
      return NULL;
    return kvci_err(KVC_ERROR_INVALID_STATE, "%s: num_tokens is %" PRIu64 " but recurrent group %u has no checkpoint "
                    "there (checkpoints are at committed multiples of its block size %u, while cached); the live "
                    "state cannot be rolled back, nothing changed", FN, n, gi, g->block_size);
  }
  if (kvci_pool_keeps_all(g)) return NULL;
  uint64_t first = kvci_pool_window_start(g, committed) / g->block_size;
  uint64_t end = kvci_pool_blocks_for(n, g->block_size);
  for (uint64_t i = first; i < end; i++)
    if (!sg->table[i])
      return kvci_err(KVC_ERROR_INVALID_STATE, "%s: num_tokens is %" PRIu64 " but group %u already gave back the "
                      "block of token %" PRIu64 " (it left the window), which the next token attends to; nothing "
                      "changed", FN, n, gi, i * g->block_size);
  return NULL;
}

kvc_error* kvc_pool_truncate(kvc_pool_sequence* s, uint64_t num_tokens) {
  static const char* FN = "kvc_pool_truncate";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), FN);
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  if (num_tokens > s->length)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: num_tokens is %" PRIu64 " but the sequence holds %" PRIu64
                    " tokens; truncate keeps a prefix", FN, num_tokens, s->length);
  if (num_tokens == s->length) return NULL;
  kvc_pool* p = s->pool;
  kvc_error* poisoned = kvci_pool_refusal(FN, p);
  if (poisoned) return poisoned;
  uint32_t restore_stack[8];
  uint32_t* restore = p->num_groups <= 8 ? restore_stack : (uint32_t*)malloc(p->num_groups * sizeof(uint32_t));
  if (!restore) return kvci_err_oom();
  kvc_error* e = NULL;
  for (uint32_t g = 0; !e && g < p->num_groups; g++) e = check_truncate(s, g, num_tokens, &restore[g]);
  if (!e) {
    for (uint32_t g = 0; g < p->num_groups; g++) {
      kvci_pool_seq_group* sg = &s->groups[g];
      uint32_t bs = p->groups[g].block_size;
      if (sg->hashed > num_tokens / bs) sg->hashed = num_tokens / bs;
      if (kvci_pool_is_recurrent(&p->groups[g])) {
        if (sg->live) kvci_pool_restore(p, g, restore[g], sg->live);
      } else {
        kvci_pool_seq_drop_blocks(s, g, kvci_pool_blocks_for(num_tokens, bs));
      }
    }
    s->length = num_tokens;
    if (s->committed > num_tokens) s->committed = num_tokens;
  }
  if (restore != restore_stack) free(restore);
  return kvci_pool_result(FN, p, e); /* a restored recurrent state holds unknown bytes */
}

kvc_error* kvc_pool_sequence_pin(kvc_pool_sequence* s) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), "kvc_pool_sequence_pin");
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "kvc_pool_sequence_pin: sequence is NULL");
  kvc_pool* p = s->pool;
  /* By hash rather than by table: this reaches the blocks a window gave back and recurrent checkpoints too. */
  for (uint32_t g = 0; g < p->num_groups; g++) {
    kvci_pool_group* grp = &p->groups[g];
    for (uint64_t i = 0; i < s->groups[g].hashed; i++) {
      uint32_t b = kvci_pool_map_find(grp, s->groups[g].hashes[i]);
      if (b) kvci_pool_block_set_pinned(grp, b, 1);
    }
  }
  return NULL;
}
