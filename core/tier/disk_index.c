/*
 * core/tier/disk_index.c: the disk tier's in-memory index (disk_index.h):
 * entries in an array with a free list, an open-addressed map over them
 * (keys are SHA-256 output: their bytes are a fine bucket index) and an
 * LRU list through them.
 */
#include <stdlib.h>
#include <string.h>

#include "disk_index.h"

#define NIL UINT32_MAX

void kvci_disk_index_free(kvci_disk_index* ix) {
  free(ix->entries);
  free(ix->slots);
  memset(ix, 0, sizeof *ix);
}

/* The block hash's first bytes (the fingerprint is the same for all keys of a pool). */
static uint32_t home(const kvci_disk_index* ix, const uint8_t key[KVCI_TIER_KEY_SIZE]) {
  uint32_t h;
  memcpy(&h, key + 32, sizeof h);
  return h & ix->slot_mask;
}

uint32_t kvci_disk_index_find(const kvci_disk_index* ix, const uint8_t key[KVCI_TIER_KEY_SIZE]) {
  if (!ix->slots) return NIL;
  for (uint32_t i = home(ix, key);; i = (i + 1) & ix->slot_mask) {
    uint32_t e = ix->slots[i];
    if (!e) return NIL;
    if (!memcmp(ix->entries[e - 1].key, key, KVCI_TIER_KEY_SIZE)) return e - 1;
  }
}

static void slot_insert(kvci_disk_index* ix, uint32_t entry) {
  uint32_t i = home(ix, ix->entries[entry].key);
  while (ix->slots[i]) i = (i + 1) & ix->slot_mask;
  ix->slots[i] = entry + 1;
}

/* Keeps the map at most half full: doubles it and reinserts. */
static int grow_slots(kvci_disk_index* ix) {
  uint32_t n = ix->slots ? 2 * (ix->slot_mask + 1) : 1024;
  if (ix->slots && 2 * (ix->count + 1) <= ix->slot_mask + 1) return 0;
  uint32_t* slots = calloc(n, sizeof(uint32_t));
  if (!slots) return -1;
  free(ix->slots);
  ix->slots = slots;
  ix->slot_mask = n - 1;
  for (uint32_t e = 0; e < ix->num_entries; e++)
    if (ix->entries[e].used) slot_insert(ix, e);
  return 0;
}

static void lru_unlink(kvci_disk_index* ix, uint32_t e) {
  kvci_disk_entry* x = &ix->entries[e];
  if (x->prev != NIL) ix->entries[x->prev].next = x->next; else ix->lru_head = x->next;
  if (x->next != NIL) ix->entries[x->next].prev = x->prev; else ix->lru_tail = x->prev;
}

static void lru_push(kvci_disk_index* ix, uint32_t e) {
  kvci_disk_entry* x = &ix->entries[e];
  x->prev = ix->lru_tail;
  x->next = NIL;
  if (ix->lru_tail != NIL) ix->entries[ix->lru_tail].next = e; else ix->lru_head = e;
  ix->lru_tail = e;
}

int kvci_disk_index_add(kvci_disk_index* ix, const uint8_t key[KVCI_TIER_KEY_SIZE], uint64_t bytes) {
  if (!ix->entries) ix->lru_head = ix->lru_tail = ix->free_head = NIL;
  if (grow_slots(ix)) return -1;
  uint32_t e = ix->free_head;
  if (e != NIL) {
    ix->free_head = ix->entries[e].next;
  } else {
    if (ix->num_entries == ix->cap) {
      uint32_t cap = ix->cap ? 2 * ix->cap : 256;
      kvci_disk_entry* grown = realloc(ix->entries, cap * sizeof(*grown));
      if (!grown) return -1;
      ix->entries = grown;
      ix->cap = cap;
    }
    e = ix->num_entries++;
  }
  kvci_disk_entry* x = &ix->entries[e];
  memcpy(x->key, key, KVCI_TIER_KEY_SIZE);
  x->bytes = bytes;
  x->used = 1;
  slot_insert(ix, e);
  lru_push(ix, e);
  ix->count++;
  ix->bytes += bytes;
  return 0;
}

void kvci_disk_index_touch(kvci_disk_index* ix, uint32_t e) {
  lru_unlink(ix, e);
  lru_push(ix, e);
}

void kvci_disk_index_remove(kvci_disk_index* ix, uint32_t e) {
  kvci_disk_entry* x = &ix->entries[e];
  lru_unlink(ix, e);
  /* Deletion by backward shift, as the pool's map does: no tombstones. */
  uint32_t i = home(ix, x->key);
  while (ix->slots[i] != e + 1) i = (i + 1) & ix->slot_mask;
  for (uint32_t j = (i + 1) & ix->slot_mask; ix->slots[j]; j = (j + 1) & ix->slot_mask) {
    uint32_t h = home(ix, ix->entries[ix->slots[j] - 1].key);
    int stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
    if (!stays) {
      ix->slots[i] = ix->slots[j];
      i = j;
    }
  }
  ix->slots[i] = 0;
  ix->count--;
  ix->bytes -= x->bytes;
  x->used = 0;
  x->next = ix->free_head;
  ix->free_head = e;
}
