/*
 * test_internal_tier_frame.c: the value framing of docs/tiers.md
 * (core/tier/frame.c): a sealed value opens with its own key, size and
 * layer count, and fails for every other key, size or layer count, every
 * single-byte change (each byte flipped in turn) and every truncation.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tier/tier_internal.h"

static kvc_tier_key key_of(uint8_t seed, uint32_t group) {
  kvc_tier_key k;
  memset(&k, 0, sizeof k);
  for (int i = 0; i < KVC_BLOCK_HASH_SIZE; i++) {
    k.fingerprint[i] = (uint8_t)(seed + i);
    k.block_hash[i] = (uint8_t)(seed * 7 + i * 3);
  }
  k.group = group;
  return k;
}

static uint8_t* sealed(const kvc_tier_key* k, size_t payload, uint32_t layers) {
  uint8_t* v = malloc(kvci_tier_frame_size(payload));
  uint64_t s = 99;
  for (size_t i = 0; i < payload; i++) v[KVCI_TIER_HEADER_SIZE + i] = (uint8_t)tu_xorshift32(&s);
  kvci_tier_frame_seal(v, k, payload, layers);
  return v;
}

static void test_round_trip_and_layout(void) {
  kvc_tier_key k = key_of(1, 2);
  uint8_t* v = sealed(&k, 100, 3);
  REQUIRE(v != NULL);
  size_t n = kvci_tier_frame_size(100);
  CHECK_EQ_U64(n, 96 + 100 + 4);
  CHECK_EQ_PTR(kvci_tier_frame_open(v, n, &k, 100, 3), v + 96);
  CHECK(!memcmp(v, "KVTB", 4));
  CHECK_EQ_U64(v[4], 1); /* version 1, little-endian */
  CHECK(!memcmp(v + 8, k.fingerprint, 32));
  CHECK(!memcmp(v + 40, k.block_hash, 32));
  CHECK_EQ_U64(v[72], 2);  /* group */
  CHECK_EQ_U64(v[80], 100); /* payload length */
  CHECK_EQ_U64(v[88], 3);  /* layers */
  free(v);
}

static void test_other_key_size_layers_miss(void) {
  kvc_tier_key k = key_of(1, 2), other_hash = k, other_fp = k, other_group = key_of(1, 3);
  other_hash.block_hash[31] ^= 1;
  other_fp.fingerprint[0] ^= 0x80;
  uint8_t* v = sealed(&k, 64, 2);
  size_t n = kvci_tier_frame_size(64);
  CHECK_EQ_PTR(kvci_tier_frame_open(v, n, &other_hash, 64, 2), NULL);
  CHECK_EQ_PTR(kvci_tier_frame_open(v, n, &other_fp, 64, 2), NULL);
  CHECK_EQ_PTR(kvci_tier_frame_open(v, n, &other_group, 64, 2), NULL);
  CHECK_EQ_PTR(kvci_tier_frame_open(v, n, &k, 64, 1), NULL);
  CHECK_EQ_PTR(kvci_tier_frame_open(v, n, &k, 60, 2), NULL);
  CHECK_EQ_PTR(kvci_tier_frame_open(NULL, n, &k, 64, 2), NULL);
  free(v);
}

static void test_every_byte_flip_and_truncation_misses(void) {
  kvc_tier_key k = key_of(5, 0);
  size_t payload = 300, n = kvci_tier_frame_size(payload);
  uint8_t* v = sealed(&k, payload, 4);
  long opened = 0;
  for (size_t i = 0; i < n; i++)
    for (int bit = 0; bit < 8; bit++) {
      v[i] ^= (uint8_t)(1u << bit);
      if (kvci_tier_frame_open(v, n, &k, payload, 4)) opened++;
      v[i] ^= (uint8_t)(1u << bit);
    }
  CHECK_EQ_I64(opened, 0);
  for (size_t len = 0; len < n; len++)
    if (kvci_tier_frame_open(v, len, &k, payload, 4)) opened++;
  CHECK_EQ_I64(opened, 0);
  CHECK(kvci_tier_frame_open(v, n, &k, payload, 4) != NULL); /* and the original still opens */
  free(v);
}

int main(void) {
  TU_RUN(test_round_trip_and_layout);
  TU_RUN(test_other_key_size_layers_miss);
  TU_RUN(test_every_byte_flip_and_truncation_misses);
  return tu_finish();
}
