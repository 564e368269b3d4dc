/*
 * core/tier/frame_mac.c: the value of a block in a given tier, keyless or
 * authenticated (docs/tiers.md, 'Authenticated tiers').
 *
 * Without a key a frame's CRC-32C catches accidents only: anyone who can
 * write the store can recompute it, so the tier trusts its writers. With a
 * key the frame's version is 2 and its trailer is HMAC-SHA256(key, header ||
 * payload) in place of the CRC; the header holds the block's full key
 * (fingerprint, group, block hash), the payload length and the layer count,
 * so a value moved under another key, or forged without the key, does not
 * verify. The two modes never open each other's frames: the version and the
 * size differ, so a tier whose key was added or removed misses instead of
 * serving bytes it cannot vouch for.
 */
#include <string.h>

#include "../persist/crc32c.h"
#include "tier_internal.h"

kvc_error* kvci_tier_auth_check(const char* fn, const char* arg, const uint8_t* key, size_t len) {
  if (!key && !len) return NULL;
  if (!key)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but %s_len is %zu; give the key's bytes, or NULL "
                    "and 0 for a tier without a key", fn, arg, arg, len);
  if (len < KVC_TIER_AUTH_KEY_MIN || len > KVC_TIER_AUTH_KEY_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s_len is %zu; an authentication key is %d to %d bytes "
                    "(KVC_TIER_AUTH_KEY_MIN to KVC_TIER_AUTH_KEY_MAX: at least 128 random bits), or NULL and 0 for "
                    "a tier without a key", fn, arg, len, KVC_TIER_AUTH_KEY_MIN, KVC_TIER_AUTH_KEY_MAX);
  return NULL;
}

void kvci_tier_auth_set(kvc_tier* t, const uint8_t* key, size_t len) {
  kvci_hmac_sha256_key_wipe(&t->auth.key);
  t->auth.keyed = len != 0;
  if (len) kvci_hmac_sha256_key_init(&t->auth.key, key, len);
}

kvc_error* kvc_tier_set_auth_key(kvc_tier* tier, const uint8_t* key, size_t key_len) {
  static const char* FN = "kvc_tier_set_auth_key";
  if (!tier) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tier is NULL", FN);
  if (tier->owner)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tier '%s' was given to a pool already; set its key before "
                    "kvc_pool_add_tier (a pool's values must not change key under it)", FN, tier->name);
  kvc_error* e = kvci_tier_auth_check(FN, "key", key, key_len);
  if (e) return e;
  kvci_tier_auth_set(tier, key, key_len);
  return NULL;
}

size_t kvci_tier_value_size(const kvc_tier* t, size_t payload) {
  return t->auth.keyed ? kvci_tier_frame_size_max(payload) : kvci_tier_frame_size(payload);
}

/* The MAC of a version-2 frame: over its header and payload. */
static void frame_mac(const kvc_tier* t, const uint8_t* frame, size_t payload, uint8_t out[KVCI_TIER_MAC_SIZE]) {
  kvci_hmac_sha256_ctx h;
  kvci_hmac_sha256_init(&h, &t->auth.key);
  kvci_hmac_sha256_update(&h, frame, KVCI_TIER_HEADER_SIZE + payload);
  kvci_hmac_sha256_final(&h, out);
}

void kvci_tier_value_seal(const kvc_tier* t, uint8_t* out, const kvc_tier_key* key, size_t payload,
                          uint32_t num_layers) {
  if (!t->auth.keyed) {
    kvci_tier_frame_seal(out, key, payload, num_layers);
    return;
  }
  kvci_tier_frame_header(out, KVCI_TIER_FRAME_VERSION_MAC, key, payload, num_layers);
  frame_mac(t, out, payload, out + KVCI_TIER_HEADER_SIZE + payload);
}

void kvci_tier_check_begin(kvci_tier_check* c, const kvc_tier* t, size_t payload) {
  c->tier = t;
  c->left = KVCI_TIER_HEADER_SIZE + payload;
  c->crc = 0;
  if (t->auth.keyed) kvci_hmac_sha256_init(&c->mac, &t->auth.key);
}

void kvci_tier_check_update(kvci_tier_check* c, const void* bytes, size_t len) {
  if (len > c->left) len = c->left;
  c->left -= len;
  if (c->tier->auth.keyed)
    kvci_hmac_sha256_update(&c->mac, bytes, len);
  else
    c->crc = kvci_crc32c_update(c->crc, bytes, len);
}

int kvci_tier_check_end(kvci_tier_check* c, const uint8_t* header, const uint8_t* trailer, const kvc_tier_key* key,
                        size_t payload, uint32_t num_layers) {
  int keyed = c->tier->auth.keyed;
  uint8_t want[KVCI_TIER_HEADER_SIZE];
  kvci_tier_frame_header(want, keyed ? KVCI_TIER_FRAME_VERSION_MAC : KVCI_TIER_FRAME_VERSION, key, payload,
                         num_layers);
  if (c->left || memcmp(header, want, sizeof want)) return 0; /* the header is public: no secret to time */
  if (!keyed)
    return ((uint32_t)trailer[0] | (uint32_t)trailer[1] << 8 | (uint32_t)trailer[2] << 16 |
            (uint32_t)trailer[3] << 24) == c->crc;
  uint8_t mac[KVCI_TIER_MAC_SIZE];
  kvci_hmac_sha256_final(&c->mac, mac);
  return kvci_equal_const_time(mac, trailer, KVCI_TIER_MAC_SIZE);
}

const uint8_t* kvci_tier_value_open(const kvc_tier* t, const uint8_t* value, size_t size, const kvc_tier_key* key,
                                    size_t payload, uint32_t num_layers) {
  if (!value || size != kvci_tier_value_size(t, payload)) return NULL;
  kvci_tier_check c;
  kvci_tier_check_begin(&c, t, payload);
  kvci_tier_check_update(&c, value, KVCI_TIER_HEADER_SIZE + payload);
  return kvci_tier_check_end(&c, value, value + KVCI_TIER_HEADER_SIZE + payload, key, payload, num_layers)
             ? value + KVCI_TIER_HEADER_SIZE
             : NULL;
}

int kvci_tier_same_seal(const kvc_tier* a, const kvc_tier* b) {
  if (!a->auth.keyed || !b->auth.keyed) return a->auth.keyed == b->auth.keyed;
  return kvci_equal_const_time((const uint8_t*)&a->auth.key, (const uint8_t*)&b->auth.key, sizeof a->auth.key);
}
