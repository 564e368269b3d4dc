/*
 * core/tier/disk_index.h: the disk tier's index of its files in memory:
 * key -> file size, in least-recently-used order (access times are kept
 * here, not in the file system: atime is often off, and a read must not
 * cost a metadata write). A restarted process rebuilds it by scanning the
 * directory, oldest modification time first.
 */
#ifndef KVC_CORE_TIER_DISK_INDEX_H
#define KVC_CORE_TIER_DISK_INDEX_H

#include <stdint.h>

#include "tier_internal.h"

typedef struct kvci_disk_entry {
  uint8_t key[KVCI_TIER_KEY_SIZE];
  uint64_t bytes;
  uint32_t prev, next; /* LRU links; next is also the free list's link */
  uint8_t used;
} kvci_disk_entry;

typedef struct kvci_disk_index {
  kvci_disk_entry* entries;
  uint32_t num_entries, cap, free_head;
  uint32_t lru_head, lru_tail; /* head: least recently used */
  uint32_t* slots;             /* entry index + 1, 0 = empty; linear probing */
  uint32_t slot_mask;
  uint32_t count;
  uint64_t bytes;              /* sum of the entries' sizes */
} kvci_disk_index;

void kvci_disk_index_free(kvci_disk_index* ix);
/* The entry of `key`, or UINT32_MAX. */
uint32_t kvci_disk_index_find(const kvci_disk_index* ix, const uint8_t key[KVCI_TIER_KEY_SIZE]);
/* Adds `key` (absent) at the recent end; -1 when out of memory. */
int kvci_disk_index_add(kvci_disk_index* ix, const uint8_t key[KVCI_TIER_KEY_SIZE], uint64_t bytes);
/* Moves an entry to the recent end. */
void kvci_disk_index_touch(kvci_disk_index* ix, uint32_t entry);
/* Removes an entry. */
void kvci_disk_index_remove(kvci_disk_index* ix, uint32_t entry);

#endif /* KVC_CORE_TIER_DISK_INDEX_H */
