/*
 * core/pool/block_hash.h: the block hash (kvcache/block_hash.h,
 * docs/block-hash.md) for the pool's own use.
 *
 * The public entry points validate and then call these; the pool calls them
 * directly on inputs it has validated once (token ids when they enter a
 * sequence, seed and salt when the pool or sequence is made), so hashing a
 * block that became full costs the digest alone.
 */
#ifndef KVC_CORE_POOL_BLOCK_HASH_H
#define KVC_CORE_POOL_BLOCK_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

/* The domain string that opens every root: the version is part of it, so no v1 root can equal a root of another version. */
#define KVCI_BLOCK_HASH_DOMAIN "kvcache/block-hash/v1"

/* root = SHA-256(domain || le32(seed_len) || seed || le32(salt_len) || salt). Unchecked: lengths fit le32. */
void kvci_block_hash_root(const void* seed, uint32_t seed_len, const void* salt, uint32_t salt_len,
                          uint8_t out[KVC_BLOCK_HASH_SIZE]);

/*
 * hash = SHA-256(parent || le32(n) || le32(tokens[i])... || le32(extra_len) || extra). Unchecked: every token
 * >= 0, n >= 1. `out` may alias `parent`.
 */
void kvci_block_hash(const uint8_t parent[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, uint32_t n,
                     const void* extra, uint32_t extra_len, uint8_t out[KVC_BLOCK_HASH_SIZE]);

/* NULL when every token id is >= 0; else INVALID_ARGUMENT naming `fn`, `arg`, the first bad index and its value. */
kvc_error* kvci_block_hash_check_tokens(const char* fn, const char* arg, const int32_t* tokens, size_t n);

#endif /* KVC_CORE_POOL_BLOCK_HASH_H */
