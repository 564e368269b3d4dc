/*
 * core/tier/frame.c: the value of a block in a tier (docs/tiers.md).
 *
 * A value carries its own key, so a store that returns another key's value
 * (a hash collision in a store's own index, a file renamed by hand, a Redis
 * key reused by another deployment) is a miss, and a CRC-32C over
 * everything before it, so a torn or flipped value is a miss: every
 * single-byte change fails one of the checks (tests/tier/test_tier_frame.c
 * flips each byte). The payload is the block's K/V of every layer of its
 * group in the pool's layout, in the order docs/tiers.md gives.
 */
#include <string.h>

#include "../persist/crc32c.h"
#include "tier_internal.h"

static void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t* p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void kvci_tier_key_encode(const kvc_tier_key* key, uint8_t out[KVCI_TIER_KEY_SIZE]) {
  memcpy(out, key->fingerprint, KVC_BLOCK_HASH_SIZE);
  memcpy(out + 32, key->block_hash, KVC_BLOCK_HASH_SIZE);
  put_u32(out + 64, key->group);
  put_u32(out + 68, key->reserved);
}

void kvci_tier_frame_header(uint8_t h[KVCI_TIER_HEADER_SIZE], uint32_t version, const kvc_tier_key* key,
                            size_t payload, uint32_t num_layers) {
  memcpy(h, KVCI_TIER_FRAME_MAGIC, 4);
  put_u32(h + 4, version);
  kvci_tier_key_encode(key, h + 8);
  put_u64(h + 80, payload);
  put_u32(h + 88, num_layers);
  put_u32(h + 92, 0);
}

void kvci_tier_frame_seal(uint8_t* out, const kvc_tier_key* key, size_t payload, uint32_t num_layers) {
  kvci_tier_frame_header(out, KVCI_TIER_FRAME_VERSION, key, payload, num_layers);
  put_u32(out + KVCI_TIER_HEADER_SIZE + payload, kvci_crc32c_update(0, out, KVCI_TIER_HEADER_SIZE + payload));
}

const uint8_t* kvci_tier_frame_open(const uint8_t* value, size_t size, const kvc_tier_key* key, size_t payload,
                                    uint32_t num_layers) {
  if (!value || size != kvci_tier_frame_size(payload)) return NULL;
  uint8_t want[KVCI_TIER_HEADER_SIZE];
  kvci_tier_frame_header(want, KVCI_TIER_FRAME_VERSION, key, payload, num_layers);
  if (memcmp(value, want, sizeof want)) return NULL;
  const uint8_t* crc = value + KVCI_TIER_HEADER_SIZE + payload;
  if (get_u32(crc) != kvci_crc32c_update(0, value, KVCI_TIER_HEADER_SIZE + payload)) return NULL;
  return value + KVCI_TIER_HEADER_SIZE;
}
