/*
 * core/pool/block_alloc.c: the life of a block in its group.
 *
 * A usable block (1 .. num_blocks - 1) is in exactly one of four states:
 *   free            ref 0, not cached: on the free list
 *   cached          ref 0, cached, not pinned: on the LRU list (evictable)
 *   pinned          ref 0, cached, pinned: on no list, never evicted
 *   used            ref >= 1 (cached or not, pinned or not)
 * Taking a block prefers the free list (no cached data is lost) and then
 * evicts the least recently released cached block (vLLM's rule; a sequence
 * releases its blocks last first, so a prompt's tail goes before its head,
 * which more requests share). The cache key is (group, hash): every group
 * has its own map, since groups of different block sizes have different
 * chains and even groups of one size hold different bytes.
 *
 * The free list and the LRU belong to the group's budget. In a shared budget
 * (budget.c) they are the pool's: a block freed by one group may be taken by
 * another, and the LRU head evicted for any group may be any group's block,
 * so eviction works on the block's own group (its map, counters and event).
 */
#include "pool_internal.h"

static uint32_t map_slot(const kvci_pool_group* g, const uint8_t hash[KVC_BLOCK_HASH_SIZE]) {
  uint32_t h;
  memcpy(&h, hash, sizeof h); /* SHA-256 bytes are uniform: the first four are a fine bucket index */
  return h & g->map_mask;
}

uint32_t kvci_pool_map_find(const kvci_pool_group* g, const uint8_t hash[KVC_BLOCK_HASH_SIZE]) {
  for (uint32_t i = map_slot(g, hash);; i = (i + 1) & g->map_mask) {
    uint32_t b = g->map[i];
    if (!b) return 0;
    if (!memcmp(g->blocks[b].hash, hash, KVC_BLOCK_HASH_SIZE)) return b;
  }
}

static void map_insert(kvci_pool_group* g, uint32_t block) {
  uint32_t i = map_slot(g, g->blocks[block].hash);
  while (g->map[i]) i = (i + 1) & g->map_mask;
  g->map[i] = block;
}

/* Linear probing's deletion by backward shift: no tombstones, so lookups stay short however long the pool runs. */
static void map_remove(kvci_pool_group* g, uint32_t block) {
  uint32_t i = map_slot(g, g->blocks[block].hash);
  while (g->map[i] != block) i = (i + 1) & g->map_mask;
  for (uint32_t j = (i + 1) & g->map_mask; g->map[j]; j = (j + 1) & g->map_mask) {
    uint32_t home = map_slot(g, g->blocks[g->map[j]].hash);
    /* Entry j may move to the hole at i when its home is not in (i, j] (cyclically). */
    int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!stays) {
      g->map[i] = g->map[j];
      i = j;
    }
  }
  g->map[i] = 0;
}

static void lru_unlink(kvci_pool_group* g, uint32_t b) {
  kvci_pool_budget* u = g->budget;
  kvci_pool_block* x = &u->blocks[b];
  if (x->prev != KVCI_NIL) u->blocks[x->prev].next = x->next; else u->lru_head = x->next;
  if (x->next != KVCI_NIL) u->blocks[x->next].prev = x->prev; else u->lru_tail = x->prev;
  x->prev = x->next = KVCI_NIL;
  u->n_lru--;
  g->n_lru--;
}

static void lru_push_recent(kvci_pool_group* g, uint32_t b) {
  kvci_pool_budget* u = g->budget;
  kvci_pool_block* x = &u->blocks[b];
  x->prev = u->lru_tail;
  x->next = KVCI_NIL;
  if (u->lru_tail != KVCI_NIL) u->blocks[u->lru_tail].next = b; else u->lru_head = b;
  u->lru_tail = b;
  u->n_lru++;
  g->n_lru++;
}

static void free_push(kvci_pool_group* g, uint32_t b) {
  kvci_pool_budget* u = g->budget;
  u->blocks[b].next = u->free_head;
  u->blocks[b].prev = KVCI_NIL;
  u->free_head = b;
  u->n_free++;
}

uint32_t kvci_pool_block_take(kvc_pool* pool, uint32_t group) {
  kvci_pool_group* g = &pool->groups[group];
  kvci_pool_budget* u = g->budget;
  uint32_t b = u->free_head;
  if (b != KVCI_NIL) {
    u->free_head = u->blocks[b].next;
    u->n_free--;
  } else {
    b = u->lru_head; /* the caller checked kvci_pool_available */
    kvci_pool_block* x = &u->blocks[b];
    uint32_t owner = x->group; /* another group's, in a shared budget */
    kvci_pool_group* o = &pool->groups[owner];
    if (pool->evict_tiers) kvci_pool_tiers_evicting(pool, owner, b);
    lru_unlink(o, b);
    map_remove(o, b);
    x->cached = 0;
    o->evictions++;
    kvci_pool_event_push(pool, KVC_POOL_EVENT_BLOCK_REMOVED, owner, b, x->hash, NULL, NULL, 0);
  }
  kvci_pool_block* x = &u->blocks[b];
  x->prev = x->next = KVCI_NIL;
  x->ref = 1;
  x->group = group;
  g->n_used++;
  return b;
}

void kvci_pool_block_ref(kvci_pool_group* g, uint32_t block) {
  kvci_pool_block* x = &g->blocks[block];
  if (x->ref++ == 0) {
    if (!x->pinned) lru_unlink(g, block); /* an unreferenced block reached by a hash is cached */
    g->n_used++;
  }
}

void kvci_pool_block_release(kvci_pool_group* g, uint32_t block) {
  kvci_pool_block* x = &g->blocks[block];
  if (--x->ref) return;
  g->n_used--;
  g->released++;
  if (!x->cached)
    free_push(g, block);
  else if (!x->pinned)
    lru_push_recent(g, block);
}

/* Caches `block` under `hash`; 0 when the hash is cached already (the block stays uncached). No event. */
static int block_cache_quietly(kvci_pool_group* g, uint32_t block, const uint8_t* hash) {
  kvci_pool_block* x = &g->blocks[block];
  /* Two sequences that computed the same block without sharing it: the first one cached stays the key's block. */
  if (x->cached || kvci_pool_map_find(g, hash)) return 0;
  memcpy(x->hash, hash, KVC_BLOCK_HASH_SIZE);
  x->cached = 1;
  map_insert(g, block);
  if (!x->ref) lru_push_recent(g, block); /* a recurrent checkpoint: nobody holds it */
  return 1;
}

int kvci_pool_block_cache(kvc_pool* pool, uint32_t group, uint32_t block, const kvc_pool_sequence* s,
                          const int32_t* tokens, uint64_t index) {
  const uint8_t* hash = s->groups[group].hashes[index];
  if (!block_cache_quietly(&pool->groups[group], block, hash)) return 0;
  kvci_pool_event_push(pool, KVC_POOL_EVENT_BLOCK_STORED, group, block, hash, s, tokens, index);
  return 1;
}

int kvci_pool_block_cache_chain(kvc_pool* pool, uint32_t group, uint32_t block, const uint8_t (*chain)[KVC_BLOCK_HASH_SIZE],
                                const uint8_t* root, uint32_t adapter, const int32_t* tokens, uint64_t index) {
  if (!block_cache_quietly(&pool->groups[group], block, chain[index])) return 0;
  kvci_pool_event_push_chain(pool, KVC_POOL_EVENT_BLOCK_STORED, group, block, chain[index],
                             index ? chain[index - 1] : root, index > 0, adapter,
                             tokens + index * pool->groups[group].block_size);
  return 1;
}

void kvci_pool_block_evict_quietly(kvci_pool_group* g, uint32_t block) {
  kvci_pool_block* x = &g->blocks[block];
  lru_unlink(g, block);
  map_remove(g, block);
  x->cached = 0;
  free_push(g, block);
}

void kvci_pool_evict_all_quietly(kvc_pool* pool) {
  for (uint32_t gi = 0; gi < pool->num_groups; gi++) {
    kvci_pool_budget* u = pool->groups[gi].budget;
    while (u->lru_head != KVCI_NIL) {
      uint32_t b = u->lru_head;
      kvci_pool_block_evict_quietly(&pool->groups[u->blocks[b].group], b);
    }
  }
}

void kvci_pool_block_touch(kvci_pool_group* g, uint32_t block) {
  lru_unlink(g, block);
  lru_push_recent(g, block);
}

void kvci_pool_block_set_pinned(kvci_pool_group* g, uint32_t block, int pinned) {
  kvci_pool_block* x = &g->blocks[block];
  if (x->pinned == (pinned != 0)) return;
  x->pinned = (uint8_t)(pinned != 0);
  if (pinned) {
    g->n_pinned++;
    if (!x->ref) lru_unlink(g, block);
  } else {
    g->n_pinned--;
    if (!x->ref) lru_push_recent(g, block);
  }
}
