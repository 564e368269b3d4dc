/*
 * core/pool/events.c: the pool's event queue (kvc_pool_events_pull; the
 * vLLM wire form is events_vllm.c).
 *
 * A ring of event_cap entries filled by the pool's operations and
 * drained by the caller. Pull-based, so a server forwards events to its
 * router at its own pace; when the ring is full the oldest event goes, and
 * the ids (consecutive per pool) show the gap to whoever pulls. Beside each
 * entry the ring keeps what routers need and kvc_pool_event has no room
 * for: a STORED block's tokens (in a preallocated array of event_cap times
 * the largest block size, so pushing never allocates), whether it starts a
 * chain, and its sequence's adapter.
 */
#include <stdlib.h>
#include <string.h>

#include "pool_internal.h"
#include "tier_worker.h"

int kvci_pool_events_init(kvc_pool* pool) {
  if (!pool->event_cap) return 0;
  uint32_t stride = 1;
  for (uint32_t g = 0; g < pool->num_groups; g++)
    if (pool->groups[g].block_size > stride) stride = pool->groups[g].block_size;
  pool->event_token_stride = stride;
  pool->event_more = (kvci_pool_event_more*)calloc(pool->event_cap, sizeof(*pool->event_more));
  pool->event_tokens = (int32_t*)malloc((size_t)pool->event_cap * stride * sizeof(int32_t));
  return pool->event_more && pool->event_tokens ? 0 : -1;
}

void kvci_pool_events_free(kvc_pool* pool) {
  for (uint32_t i = 0; i < pool->num_adapters; i++) free(pool->adapters[i].key);
  free(pool->adapters);
  free(pool->event_more);
  free(pool->event_tokens);
  free(pool->events);
}

int64_t kvci_pool_adapter_intern(kvc_pool* pool, const void* key, size_t key_len, int64_t id) {
  if (!key_len && !id) return 0;
  for (uint32_t i = 0; i < pool->num_adapters; i++) {
    const kvci_pool_adapter* a = &pool->adapters[i];
    if (a->id == id && a->key_len == key_len && (!key_len || !memcmp(a->key, key, key_len))) return i + 1;
  }
  if (pool->num_adapters == pool->adapters_cap) {
    uint32_t cap = pool->adapters_cap ? 2 * pool->adapters_cap : 4;
    kvci_pool_adapter* grown = (kvci_pool_adapter*)realloc(pool->adapters, cap * sizeof(*grown));
    if (!grown) return -1;
    pool->adapters = grown;
    pool->adapters_cap = cap;
  }
  uint8_t* copy = (uint8_t*)malloc(key_len ? key_len : 1);
  if (!copy) return -1;
  if (key_len) memcpy(copy, key, key_len);
  pool->adapters[pool->num_adapters] = (kvci_pool_adapter){copy, (uint32_t)key_len, id};
  return ++pool->num_adapters;
}

void kvci_pool_event_push(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t block,
                          const uint8_t* hash, const kvc_pool_sequence* s, const int32_t* tokens, uint64_t index) {
  if (!s) {
    kvci_pool_event_push_chain(pool, kind, group, block, hash, NULL, 0, 0, NULL);
    return;
  }
  uint32_t bs = pool->groups[group].block_size;
  kvci_pool_event_push_chain(pool, kind, group, block, hash, index ? s->groups[group].hashes[index - 1] : s->root,
                             index > 0, s->adapter, tokens + index * bs);
}

void kvci_pool_event_push_tier(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t tier,
                               const uint8_t* hash, uint32_t num_tokens) {
  kvci_pool_event_push_chain(pool, kind, group, tier, hash, NULL, 0, 0, NULL);
  if (pool->event_count) pool->events[(pool->event_head + pool->event_count - 1) % pool->event_cap].num_tokens = num_tokens;
}

void kvci_pool_event_push_chain(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t block,
                                const uint8_t* hash, const uint8_t* parent, int has_parent, uint32_t adapter,
                                const int32_t* block_tokens) {
  if (!pool->event_cap) return; /* events off: ids are not spent either */
  if (pool->event_count == pool->event_cap) {
    pool->event_head = (pool->event_head + 1) % pool->event_cap;
    pool->event_count--;
  }
  uint32_t at = (pool->event_head + pool->event_count) % pool->event_cap;
  kvc_pool_event* e = &pool->events[at];
  memset(e, 0, sizeof(*e));
  e->id = ++pool->next_event_id;
  e->kind = kind;
  e->group = group;
  e->block_id = block;
  if (hash) memcpy(e->block_hash, hash, KVC_BLOCK_HASH_SIZE);
  kvci_pool_event_more* m = &pool->event_more[at];
  *m = (kvci_pool_event_more){0, 0};
  if (parent) {
    uint32_t bs = pool->groups[group].block_size;
    e->num_tokens = bs;
    memcpy(e->parent_hash, parent, KVC_BLOCK_HASH_SIZE);
    memcpy(pool->event_tokens + (size_t)at * pool->event_token_stride, block_tokens, bs * sizeof(int32_t));
    m->has_parent = (uint8_t)(has_parent != 0);
    m->adapter = adapter;
  }
  pool->event_count++;
}

kvc_error* kvci_pool_check_pull(const char* fn, const kvc_pool* pool, const void* count, const char* count_name,
                                const char* count_what, const void* buf, const char* buf_name, size_t capacity,
                                const char* buf_what) {
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", fn);
  if (!count)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass where to store %s", fn, count_name, count_what);
  if (!buf && capacity)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but capacity is %zu; pass %s", fn, buf_name, capacity,
                    buf_what);
  return NULL;
}

kvc_error* kvc_pool_events_pull(kvc_pool* pool, kvc_pool_event* events, size_t capacity, size_t* count) {
  static const char* FN = "kvc_pool_events_pull";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  kvc_error* e = kvci_pool_check_pull(FN, pool, count, "count", "the number pulled", events, "events", capacity,
                                      "an array of capacity entries (or capacity 0)");
  if (e) return e;
  kvci_tier_worker_events(pool); /* what the tier worker did since the last pull */
  size_t n = pool->event_count < capacity ? pool->event_count : capacity;
  for (size_t i = 0; i < n; i++) events[i] = pool->events[(pool->event_head + i) % pool->event_cap];
  if (n) {
    pool->event_head = (uint32_t)((pool->event_head + n) % pool->event_cap);
    pool->event_count -= (uint32_t)n;
  }
  *count = n;
  return NULL;
}
