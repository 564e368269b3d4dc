/*
 * core/pool/events.c: the pool's event queue (kvc_pool_events_pull).
 *
 * A ring of event_capacity entries filled by the pool's operations and
 * drained by the caller. Pull-based, so a server forwards events to its
 * router at its own pace; when the ring is full the oldest event goes, and
 * the ids (consecutive per pool) show the gap to whoever pulls.
 */
#include <string.h>

#include "pool_internal.h"
#include "tier_worker.h"

void kvci_pool_event_push(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t block,
                          const uint8_t* hash, const uint8_t* parent, uint32_t num_tokens) {
  if (!pool->event_cap) return; /* events off: ids are not spent either */
  if (pool->event_count == pool->event_cap) {
    pool->event_head = (pool->event_head + 1) % pool->event_cap;
    pool->event_count--;
  }
  kvc_pool_event* e = &pool->events[(pool->event_head + pool->event_count) % pool->event_cap];
  memset(e, 0, sizeof(*e));
  e->id = ++pool->next_event_id;
  e->kind = kind;
  e->group = group;
  e->block_id = block;
  e->num_tokens = num_tokens;
  if (hash) memcpy(e->block_hash, hash, KVC_BLOCK_HASH_SIZE);
  if (parent) memcpy(e->parent_hash, parent, KVC_BLOCK_HASH_SIZE);
  pool->event_count++;
}

kvc_error* kvc_pool_events_pull(kvc_pool* pool, kvc_pool_event* events, size_t capacity, size_t* count) {
  static const char* FN = "kvc_pool_events_pull";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (!count) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: count is NULL; pass where to store the number pulled", FN);
  if (!events && capacity)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: events is NULL but capacity is %zu; pass an array of capacity "
                    "entries (or capacity 0)", FN, capacity);
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
