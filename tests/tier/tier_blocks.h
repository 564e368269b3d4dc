/*
 * tests/tier/tier_blocks.h: blocks by key for the key-level tests (disk and
 * Redis): TB_N keys, each with a TB_PAYLOAD-byte payload whose every byte
 * depends on the block and its position, and the arrays the calls take.
 * The including test defines TB_N and TB_PAYLOAD first.
 */
#ifndef KVC_TESTS_TIER_BLOCKS_H
#define KVC_TESTS_TIER_BLOCKS_H

#include <stdio.h>
#include <string.h>

#include "kvcache.h"

typedef struct tb_blocks {
  kvc_tier_key keys[TB_N];
  uint8_t data[TB_N][TB_PAYLOAD], read[TB_N][TB_PAYLOAD];
  const void* in[TB_N];
  void* out[TB_N];
  uint8_t found[TB_N];
} tb_blocks;

/* Keys of model `model` (its fingerprint), groups 0 and 1 in turn; read[] and found[] poisoned. */
static inline void tb_make(tb_blocks* b, uint8_t model) {
  for (uint32_t i = 0; i < TB_N; i++) {
    kvc_tier_key* k = &b->keys[i];
    memset(k, 0, sizeof *k);
    for (int x = 0; x < KVC_BLOCK_HASH_SIZE; x++) {
      k->fingerprint[x] = (uint8_t)(model ^ x);
      k->block_hash[x] = (uint8_t)(i * 31 + x * 3 + model);
    }
    k->group = i % 2;
    for (size_t x = 0; x < TB_PAYLOAD; x++) b->data[i][x] = (uint8_t)(i * 7 + x * 13 + (x >> 8));
    b->in[i] = b->data[i];
    b->out[i] = b->read[i];
  }
  memset(b->read, 0xEE, sizeof b->read);
  memset(b->found, 7, sizeof b->found);
}

/* After a get of every key: 1 when found[] is 1 at exactly the `n` blocks `stored` and each of those came back
 * byte for byte; else 0, each block that differs printed. */
static inline int tb_got_exactly(const tb_blocks* b, const int* stored, size_t n) {
  int ok = 1;
  for (int i = 0; i < TB_N; i++) {
    int want = 0;
    for (size_t j = 0; j < n; j++) want |= stored[j] == i;
    if (b->found[i] != want) {
      fprintf(stderr, "  block %d: found is %u, expected %d\n", i, (unsigned)b->found[i], want);
      ok = 0;
    } else if (want && memcmp(b->read[i], b->data[i], TB_PAYLOAD) != 0) {
      fprintf(stderr, "  block %d: its bytes differ\n", i);
      ok = 0;
    }
  }
  return ok;
}

#endif /* KVC_TESTS_TIER_BLOCKS_H */
