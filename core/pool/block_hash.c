/*
 * core/pool/block_hash.c: the block hash of docs/block-hash.md
 * (kvcache/block_hash.h): validation in the public entry points, the byte
 * layout in kvci_block_hash_root and kvci_block_hash, SHA-256 from sha256.c.
 */
#include "block_hash.h"

#include <inttypes.h>
#include <string.h>

#include "internal.h"
#include "sha256.h"

/* Tokens are encoded this many at a time into a stack buffer, so the digest sees few, large updates. */
#define TOKENS_PER_CHUNK 64

static void put_le32(uint8_t* p, uint32_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
  p[2] = (uint8_t)(v >> 16);
  p[3] = (uint8_t)(v >> 24);
}

/* le32(len) || bytes: every variable-length field carries its length, so no two field splits hash alike. */
static void update_field(kvci_sha256_ctx* h, const void* bytes, uint32_t len) {
  uint8_t n[4];
  put_le32(n, len);
  kvci_sha256_update(h, n, sizeof n);
  kvci_sha256_update(h, bytes, len);
}

void kvci_block_hash_root(const void* seed, uint32_t seed_len, const void* salt, uint32_t salt_len,
                          uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  kvci_sha256_ctx h;
  kvci_sha256_init(&h);
  kvci_sha256_update(&h, KVCI_BLOCK_HASH_DOMAIN, sizeof KVCI_BLOCK_HASH_DOMAIN - 1);
  update_field(&h, seed, seed_len);
  update_field(&h, salt, salt_len);
  kvci_sha256_final(&h, out);
}

void kvci_block_hash(const uint8_t parent[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, uint32_t n,
                     const void* extra, uint32_t extra_len, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  kvci_sha256_ctx h;
  uint8_t chunk[4 * TOKENS_PER_CHUNK];
  kvci_sha256_init(&h);
  kvci_sha256_update(&h, parent, KVC_BLOCK_HASH_SIZE);
  put_le32(chunk, n);
  kvci_sha256_update(&h, chunk, 4);
  for (uint32_t i = 0; i < n;) {
    uint32_t m = n - i < TOKENS_PER_CHUNK ? n - i : TOKENS_PER_CHUNK;
    /* The uint32 bit pattern of the int32; the ids are >= 0, so it is the id itself. */
    for (uint32_t j = 0; j < m; j++) put_le32(chunk + 4 * j, (uint32_t)tokens[i + j]);
    kvci_sha256_update(&h, chunk, 4 * (size_t)m);
    i += m;
  }
  update_field(&h, extra, extra_len);
  /* Written last, so `out` may be `parent`. */
  kvci_sha256_final(&h, out);
}

kvc_error* kvci_block_hash_check_tokens(const char* fn, const char* arg, const int32_t* tokens, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (tokens[i] < 0)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s[%zu] is %" PRId32 "; token ids must be >= 0", fn, arg, i,
                      tokens[i]);
  return NULL;
}

/* A length the layout encodes as le32. The cast keeps the comparison meaningful where size_t is 32 bits too. */
static int fits_le32(size_t n) { return (uint64_t)n <= UINT32_MAX; }

/* NULL unless `len` bytes at `p` cannot be hashed: p NULL with len > 0, or len beyond le32. */
static kvc_error* check_bytes(const char* fn, const char* arg, const void* p, size_t len) {
  if (!p && len)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but %s_len is %zu; pass NULL only with length 0", fn,
                    arg, arg, len);
  if (!fits_le32(len))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: %s_len is %zu; at most 4294967295 bytes (the length is hashed as a 32-bit number)", fn, arg,
                    len);
  return NULL;
}

kvc_error* kvc_block_hash_root(const void* seed, size_t seed_len, const void* salt, size_t salt_len,
                               uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  static const char* FN = "kvc_block_hash_root";
  kvc_error* e = check_bytes(FN, "seed", seed, seed_len);
  if (!e) e = check_bytes(FN, "salt", salt, salt_len);
  if (e) return e;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass room for %d bytes", FN,
                            KVC_BLOCK_HASH_SIZE);
  kvci_block_hash_root(seed, (uint32_t)seed_len, salt, (uint32_t)salt_len, out);
  return NULL;
}

kvc_error* kvc_block_hash(const uint8_t parent[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, size_t num_tokens,
                          const void* extra, size_t extra_len, uint8_t out[KVC_BLOCK_HASH_SIZE]) {
  static const char* FN = "kvc_block_hash";
  if (!parent)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: parent is NULL; the first block of a chain takes the root (kvc_block_hash_root)", FN);
  if (num_tokens == 0) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_tokens is 0; a block holds >= 1 token", FN);
  if (!fits_le32(num_tokens))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: num_tokens is %zu; at most 4294967295 (the count is hashed as a 32-bit number)", FN,
                    num_tokens);
  if (!tokens) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tokens is NULL but num_tokens is %zu", FN, num_tokens);
  kvc_error* e = kvci_block_hash_check_tokens(FN, "tokens", tokens, num_tokens);
  if (!e) e = check_bytes(FN, "extra", extra, extra_len);
  if (e) return e;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass room for %d bytes", FN,
                            KVC_BLOCK_HASH_SIZE);
  kvci_block_hash(parent, tokens, (uint32_t)num_tokens, extra, (uint32_t)extra_len, out);
  return NULL;
}

kvc_error* kvc_block_hash_chain(const uint8_t root[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, size_t num_tokens,
                                uint32_t block_size, uint8_t (*out)[KVC_BLOCK_HASH_SIZE], size_t out_capacity,
                                size_t* out_count) {
  static const char* FN = "kvc_block_hash_chain";
  if (!root) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: root is NULL; make it with kvc_block_hash_root", FN);
  if (!out_count) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out_count is NULL", FN);
  if (!tokens && num_tokens)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tokens is NULL but num_tokens is %zu", FN, num_tokens);
  if (!out && out_capacity)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL but out_capacity is %zu", FN, out_capacity);
  if (block_size == 0) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: block_size is 0; it must be >= 1", FN);
  kvc_error* e = kvci_block_hash_check_tokens(FN, "tokens", tokens, num_tokens);
  if (e) return e;
  size_t full = num_tokens / block_size;
  if (out_capacity < full)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: out_capacity is %zu but %zu tokens in blocks of %" PRIu32
                    " make %zu full blocks; pass room for %zu hashes",
                    FN, out_capacity, num_tokens, block_size, full, full);
  for (size_t i = 0; i < full; i++)
    kvci_block_hash(i ? out[i - 1] : root, tokens + i * block_size, block_size, NULL, 0, out[i]);
  *out_count = full;
  return NULL;
}
