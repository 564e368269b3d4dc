/*
 * core/tier/redis/redis_key.c: the key of a block,
 *   <prefix><fingerprint, 64 lowercase hex>:<group, decimal>:<block hash, 64 lowercase hex>
 * Hex rather than binary: keys stay printable in redis-cli and in logs, at
 * 64 bytes more per key than binary, next to values of hundreds of KiB. No
 * hash tag: Redis Cluster hashes the whole key, so each block gets its own
 * slot and one model's blocks spread over every node (docs/tiers.md).
 */
#include <stdio.h>
#include <string.h>

#include "redis_internal.h"

#define HASH_HEX (2 * KVC_BLOCK_HASH_SIZE)

size_t kvci_redis_key_bytes(const kvci_redis_tier* t) {
  return strlen(t->prefix) + HASH_HEX + 1 + 10 + 1 + HASH_HEX;
}

static char* hex(char* out, const uint8_t* bytes, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    *out++ = digits[bytes[i] >> 4];
    *out++ = digits[bytes[i] & 15];
  }
  return out;
}

void kvci_redis_format_key(const kvci_redis_tier* t, const kvc_tier_key* key, char* out, uint16_t* len) {
  char* p = out;
  size_t plen = strlen(t->prefix);
  memcpy(p, t->prefix, plen);
  p = hex(p + plen, key->fingerprint, KVC_BLOCK_HASH_SIZE);
  p += sprintf(p, ":%u:", (unsigned)key->group);
  p = hex(p, key->block_hash, KVC_BLOCK_HASH_SIZE);
  *len = (uint16_t)(p - out);
}
