/*
 * core/pool/vllm_hash.h: the block hash of KVC_POOL_HASH_VLLM_SHA256_CBOR
 * pools, vLLM's prefix-caching hash with its sha256_cbor algorithm
 * (docs/block-hash.md, 'vLLM's hash'): SHA-256 of cbor2.dumps((parent,
 * tuple(token_ids), extra_keys), canonical=True).
 */
#ifndef KVC_CORE_POOL_VLLM_HASH_H
#define KVC_CORE_POOL_VLLM_HASH_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

/* vLLM's default NONE_HASH seed (no PYTHONHASHSEED, a cryptographic hash). */
#define KVCI_VLLM_DEFAULT_SEED "vllm-none-hash"

/* vLLM's NONE_HASH: SHA-256 of the CBOR text `seed` (seed_len bytes of UTF-8; empty: the default seed). */
void kvci_vllm_none_hash(const void* seed, size_t seed_len, uint8_t out[KVC_BLOCK_HASH_SIZE]);

/*
 * vLLM's hash_block_tokens: `extra` is the CBOR encoding of the block's extra-keys tuple (extra_len bytes), or
 * NULL / 0 for None. The same signature as kvci_block_hash, so a pool calls either through one pointer.
 */
void kvci_vllm_block_hash(const uint8_t parent[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, uint32_t n,
                          const void* extra, uint32_t extra_len, uint8_t out[KVC_BLOCK_HASH_SIZE]);

#endif /* KVC_CORE_POOL_VLLM_HASH_H */
