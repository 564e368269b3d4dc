/*
 * core/pool/hmac_sha256.h: HMAC-SHA256 (RFC 2104 with FIPS 180-4's SHA-256),
 * the MAC of an authenticated tier's frames (docs/tiers.md says why HMAC).
 *
 * A key is prepared once (its inner and outer pads absorbed into two
 * SHA-256 states), so a MAC costs the message's compressions plus two. The
 * prepared key is secret material: wipe it when done.
 * tests/pool/test_internal_hmac_sha256.c checks the RFC 4231 test cases.
 */
#ifndef KVC_CORE_POOL_HMAC_SHA256_H
#define KVC_CORE_POOL_HMAC_SHA256_H

#include <stddef.h>
#include <stdint.h>

#include "sha256.h"

#define KVCI_HMAC_SHA256_SIZE KVCI_SHA256_DIGEST_SIZE

/* A key with its pads absorbed: SHA-256 states after (K ^ ipad) and after (K ^ opad). */
typedef struct kvci_hmac_sha256_key {
  kvci_sha256_ctx inner, outer;
} kvci_hmac_sha256_key;

/* A MAC in progress (plain data, like kvci_sha256_ctx). */
typedef struct kvci_hmac_sha256_ctx {
  kvci_sha256_ctx inner, outer;
} kvci_hmac_sha256_ctx;

/* Prepares `key` (`len` bytes, any length; one longer than a block is hashed first, as RFC 2104 says). */
void kvci_hmac_sha256_key_init(kvci_hmac_sha256_key* out, const void* key, size_t len);
/* Overwrites a prepared key so that no copy of it stays in freed memory. */
void kvci_hmac_sha256_key_wipe(kvci_hmac_sha256_key* key);

void kvci_hmac_sha256_init(kvci_hmac_sha256_ctx* h, const kvci_hmac_sha256_key* key);
void kvci_hmac_sha256_update(kvci_hmac_sha256_ctx* h, const void* data, size_t len);
void kvci_hmac_sha256_final(kvci_hmac_sha256_ctx* h, uint8_t out[KVCI_HMAC_SHA256_SIZE]);

/* The MAC of one message in one call. */
void kvci_hmac_sha256(const void* key, size_t key_len, const void* data, size_t len,
                      uint8_t out[KVCI_HMAC_SHA256_SIZE]);

/*
 * Whether a[0..n) equals b[0..n), in a time that depends on n only: a MAC compared with memcmp tells a forger,
 * by how long the refusal took, how many leading bytes were right.
 */
int kvci_equal_const_time(const uint8_t* a, const uint8_t* b, size_t n);

#endif /* KVC_CORE_POOL_HMAC_SHA256_H */
