/*
 * core/pool/hmac_sha256.c: HMAC-SHA256 as RFC 2104 defines it:
 *   HMAC(K, m) = H((K' ^ opad) || H((K' ^ ipad) || m)),
 * K' the key padded with zeros to the 64-byte block (or its SHA-256 when it is longer), ipad 0x36 and opad 0x5c
 * repeated.
 */
#include "hmac_sha256.h"

#include <string.h>

void kvci_hmac_sha256_key_init(kvci_hmac_sha256_key* out, const void* key, size_t len) {
  uint8_t block[KVCI_SHA256_BLOCK_SIZE] = {0};
  if (len > KVCI_SHA256_BLOCK_SIZE)
    kvci_sha256(key, len, block);
  else if (len)
    memcpy(block, key, len);
  uint8_t pad[KVCI_SHA256_BLOCK_SIZE];
  for (size_t i = 0; i < sizeof pad; i++) pad[i] = block[i] ^ 0x36;
  kvci_sha256_init(&out->inner);
  kvci_sha256_update(&out->inner, pad, sizeof pad);
  for (size_t i = 0; i < sizeof pad; i++) pad[i] = block[i] ^ 0x5c;
  kvci_sha256_init(&out->outer);
  kvci_sha256_update(&out->outer, pad, sizeof pad);
  /* The padded key is as secret as the key. */
  volatile uint8_t* v = block;
  for (size_t i = 0; i < sizeof block; i++) v[i] = 0;
  v = pad;
  for (size_t i = 0; i < sizeof pad; i++) v[i] = 0;
}

void kvci_hmac_sha256_key_wipe(kvci_hmac_sha256_key* key) {
  /* Through a volatile pointer: a plain memset of memory about to be freed may be removed by the compiler. */
  volatile uint8_t* v = (volatile uint8_t*)key;
  for (size_t i = 0; i < sizeof *key; i++) v[i] = 0;
}

void kvci_hmac_sha256_init(kvci_hmac_sha256_ctx* h, const kvci_hmac_sha256_key* key) {
  h->inner = key->inner;
  h->outer = key->outer;
}

void kvci_hmac_sha256_update(kvci_hmac_sha256_ctx* h, const void* data, size_t len) {
  kvci_sha256_update(&h->inner, data, len);
}

void kvci_hmac_sha256_final(kvci_hmac_sha256_ctx* h, uint8_t out[KVCI_HMAC_SHA256_SIZE]) {
  uint8_t inner[KVCI_SHA256_DIGEST_SIZE];
  kvci_sha256_final(&h->inner, inner);
  kvci_sha256_update(&h->outer, inner, sizeof inner);
  kvci_sha256_final(&h->outer, out);
}

void kvci_hmac_sha256(const void* key, size_t key_len, const void* data, size_t len,
                      uint8_t out[KVCI_HMAC_SHA256_SIZE]) {
  kvci_hmac_sha256_key k;
  kvci_hmac_sha256_key_init(&k, key, key_len);
  kvci_hmac_sha256_ctx h;
  kvci_hmac_sha256_init(&h, &k);
  kvci_hmac_sha256_update(&h, data, len);
  kvci_hmac_sha256_final(&h, out);
  kvci_hmac_sha256_key_wipe(&k);
}

int kvci_equal_const_time(const uint8_t* a, const uint8_t* b, size_t n) {
  /* OR of the differences: no branch or early exit on the data; volatile keeps the loop whole. */
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < n; i++) diff = (uint8_t)(diff | (a[i] ^ b[i]));
  return diff == 0;
}
