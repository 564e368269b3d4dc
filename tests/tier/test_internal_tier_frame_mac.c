/*
 * test_internal_tier_frame_mac.c: an authenticated tier's frames
 * (core/tier/frame_mac.c): version 2, the HMAC-SHA256 of header and payload
 * in place of the CRC; they open in a tier with the same key only, fail for
 * every single-bit change, every truncation, another key, another block key
 * and a keyless tier, and a keyless tier's frames fail in a keyed tier; the
 * pool reuses a sealed value exactly for tiers of the same key.
 */
#include <stdlib.h>
#include <string.h>

#include "test_util.h"
#include "tier/tier_internal.h"

static size_t nothing_put(void* ctx, const kvc_tier_key* k, const void* const* v, const size_t* s, size_t n) {
  (void)ctx, (void)k, (void)v, (void)s, (void)n;
  return 0;
}
static size_t nothing_got(void* ctx, const kvc_tier_key* k, void* const* v, size_t c, size_t* s, size_t n) {
  (void)ctx, (void)k, (void)v, (void)c, (void)s, (void)n;
  return 0;
}

/* A tier with no store and the given key (len 0: none). */
static kvc_tier* tier_with(const char* key, size_t len) {
  static const kvc_tier_ops OPS = {sizeof(kvc_tier_ops), nothing_put, nothing_got, NULL, NULL};
  kvc_tier* t = NULL;
  kvc_error* e = kvc_tier_create(&OPS, NULL, "mac", &t);
  kvc_error_destroy(e);
  if (t) kvci_tier_auth_set(t, (const uint8_t*)key, len);
  return t;
}

static kvc_tier_key key_of(uint8_t seed) {
  kvc_tier_key k;
  memset(&k, 0, sizeof k);
  for (int i = 0; i < KVC_BLOCK_HASH_SIZE; i++) k.fingerprint[i] = (uint8_t)(seed + i), k.block_hash[i] = (uint8_t)i;
  return k;
}

/* A value of `payload` random bytes sealed for `t`, in a buffer of the largest size. */
static uint8_t* sealed(const kvc_tier* t, const kvc_tier_key* k, size_t payload) {
  uint8_t* v = malloc(kvci_tier_frame_size_max(payload));
  uint64_t s = 7;
  for (size_t i = 0; i < payload; i++) v[KVCI_TIER_HEADER_SIZE + i] = (uint8_t)tu_xorshift32(&s);
  kvci_tier_value_seal(t, v, k, payload, 3);
  return v;
}

static void test_layout_and_modes(void) {
  kvc_tier *a = tier_with("sixteen-byte-key", 16), *a2 = tier_with("sixteen-byte-key", 16);
  kvc_tier *b = tier_with("sixteen-byte-kez", 16), *none = tier_with(NULL, 0), *none2 = tier_with(NULL, 0);
  REQUIRE(a && a2 && b && none && none2);
  kvc_tier_key k = key_of(1);
  size_t payload = 200, n = kvci_tier_value_size(a, payload);
  CHECK_EQ_U64(n, 96 + 200 + 32);
  CHECK_EQ_U64(kvci_tier_value_size(none, payload), 96 + 200 + 4);
  uint8_t* v = sealed(a, &k, payload);
  CHECK_EQ_U64(v[4], 2);
  uint8_t mac[32];
  kvci_hmac_sha256("sixteen-byte-key", 16, v, 96 + payload, mac);
  CHECK(!memcmp(v + 96 + payload, mac, 32)); /* the trailer is the HMAC of header and payload, as documented */
  CHECK_EQ_PTR(kvci_tier_value_open(a, v, n, &k, payload, 3), v + 96);
  CHECK_EQ_PTR(kvci_tier_value_open(a2, v, n, &k, payload, 3), v + 96); /* the same key, another tier */
  CHECK_EQ_PTR(kvci_tier_value_open(b, v, n, &k, payload, 3), NULL);
  CHECK_EQ_PTR(kvci_tier_value_open(none, v, n, &k, payload, 3), NULL);
  CHECK_EQ_PTR(kvci_tier_value_open(none, v, n - 28, &k, payload, 3), NULL); /* cut to a keyless size */
  kvc_tier_key other = key_of(1);
  other.block_hash[5] ^= 1;
  CHECK_EQ_PTR(kvci_tier_value_open(a, v, n, &other, payload, 3), NULL);
  CHECK_EQ_PTR(kvci_tier_value_open(a, v, n, &k, payload, 2), NULL);
  CHECK_EQ_PTR(kvci_tier_value_open(a, NULL, n, &k, payload, 3), NULL);
  free(v);
  v = sealed(none, &k, payload); /* keyless: version 1, CRC */
  CHECK_EQ_U64(v[4], 1);
  CHECK(kvci_tier_value_open(none, v, 96 + payload + 4, &k, payload, 3) != NULL);
  CHECK_EQ_PTR(kvci_tier_value_open(a, v, 96 + payload + 4, &k, payload, 3), NULL);
  CHECK_EQ_PTR(kvci_tier_value_open(a, v, n, &k, payload, 3), NULL);
  free(v);
  CHECK(kvci_tier_same_seal(a, a2));
  CHECK(kvci_tier_same_seal(none, none2));
  CHECK(!kvci_tier_same_seal(a, b));
  CHECK(!kvci_tier_same_seal(a, none));
  CHECK(!kvci_tier_same_seal(none, a));
  kvc_tier_destroy(a), kvc_tier_destroy(a2), kvc_tier_destroy(b), kvc_tier_destroy(none), kvc_tier_destroy(none2);
}

static void test_every_bit_and_truncation_fails(void) {
  kvc_tier* a = tier_with("0123456789abcdef0123", 20);
  REQUIRE(a != NULL);
  kvc_tier_key k = key_of(9);
  size_t payload = 150, n = kvci_tier_value_size(a, payload);
  uint8_t* v = sealed(a, &k, payload);
  long opened = 0;
  for (size_t i = 0; i < n; i++)
    for (int bit = 0; bit < 8; bit++) {
      v[i] ^= (uint8_t)(1u << bit);
      opened += kvci_tier_value_open(a, v, n, &k, payload, 3) != NULL;
      v[i] ^= (uint8_t)(1u << bit);
    }
  for (size_t len = 0; len < n; len++) opened += kvci_tier_value_open(a, v, len, &k, payload, 3) != NULL;
  CHECK_EQ_I64(opened, 0);
  CHECK(kvci_tier_value_open(a, v, n, &k, payload, 3) != NULL);
  free(v);
  kvc_tier_destroy(a);
}

int main(void) {
  TU_RUN(test_layout_and_modes);
  TU_RUN(test_every_bit_and_truncation_fails);
  return tu_finish();
}
