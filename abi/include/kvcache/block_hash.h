/*
 * kvcache/block_hash.h: the block hash of the pool's prefix cache
 * (docs/block-hash.md), so a router in any language computes the keys a pool
 * caches blocks under. Since 0.6.
 */
#ifndef KVCACHE_BLOCK_HASH_H
#define KVCACHE_BLOCK_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache/error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define KVC_BLOCK_HASH_SIZE 32
#define KVC_BLOCK_HASH_VERSION 1

KVC_API kvc_error* kvc_block_hash_root(const void* seed, size_t seed_len, const void* salt, size_t salt_len,
                                       uint8_t out[32]);
KVC_API kvc_error* kvc_block_hash(const uint8_t parent[32], const int32_t* tokens, size_t num_tokens,
                                  const void* extra, size_t extra_len, uint8_t out[32]);
KVC_API kvc_error* kvc_block_hash_chain(const uint8_t root[32], const int32_t* tokens, size_t num_tokens,
                                        uint32_t block_size, uint8_t (*out)[32], size_t out_capacity,
                                        size_t* out_count);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_BLOCK_HASH_H */
