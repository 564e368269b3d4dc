/*
 * kvcache/block_hash.h: the block hash of prefix caching, specified exactly
 * (docs/block-hash.md) so that a router in another language computes the
 * same keys as the pool without linking kvcache.
 *
 * A sequence's tokens are cut into blocks of a fixed number of tokens; every
 * FULL block gets a 32-byte key that depends on all tokens before it. Two
 * requests share a block's K/V exactly when their keys are equal. Version 1,
 * with SHA-256 (FIPS 180-4) and every integer a 32-bit little-endian number
 * (le32):
 *
 *   root  = SHA-256( "kvcache/block-hash/v1" (21 ASCII bytes, no NUL)
 *                    || le32(seed_len) || seed || le32(salt_len) || salt )
 *   block = SHA-256( parent (32 bytes: the root for the first block, else the
 *                    previous block's hash) || le32(n) || le32(token_0) ...
 *                    le32(token_{n-1}) || le32(extra_len) || extra )
 *
 * `seed` names what the K/V depends on besides the tokens (the model and its
 * weights: a pool's namespace), `salt` isolates tenants (a per-request cache
 * salt; empty = shared), `extra` carries per-block keys the caller encodes
 * (LoRA adapter, multimodal content hashes; empty = none). A token id is an
 * int32 >= 0, hashed as its 32-bit pattern. Blocks that are not full are
 * never hashed. tests/pool/block_hash_vectors.txt holds test vectors.
 * Version 2 (since 0.7) fixes what `extra` holds for a pool sequence with
 * extra keys (docs/block-hash.md, 'Version 2: extra keys';
 * tests/pool/block_hash_v2_vectors.txt).
 *
 * These functions touch no handle: they are pure, thread-safe, and a failed
 * call writes nothing (every out-parameter keeps its value).
 */
#ifndef KVCACHE_BLOCK_HASH_H
#define KVCACHE_BLOCK_HASH_H

#include <stddef.h>

#include "kvcache/error.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Bytes of a block hash (a SHA-256 digest). */
#define KVC_BLOCK_HASH_SIZE 32
/**
 * The version of the layout these functions implement; a new layout gets a new number and domain string. It
 * stays 1: version 2 (KVC_POOL_BLOCK_HASH_VERSION) only fixes what `extra` holds, which these functions take as given.
 */
#define KVC_BLOCK_HASH_VERSION 1

/**
 * The root of a hash chain: the "parent" of the first block of every
 * sequence hashed with this seed and salt. `seed` (seed_len bytes) and `salt`
 * (salt_len bytes) are opaque bytes, not strings: no terminator is hashed and
 * a NUL byte is data. Either may be NULL exactly when its length is 0; the
 * empty seed and the empty salt are valid and distinct from every non-empty
 * one. Writes 32 bytes to `out`.
 * Errors (INVALID_ARGUMENT, `out` untouched): seed or salt NULL with a
 * nonzero length, a length above 4294967295 (it is hashed as a le32), out NULL.
 * Since 0.6.
 */
KVC_API kvc_error* kvc_block_hash_root(const void* seed, size_t seed_len, const void* salt, size_t salt_len,
                                       uint8_t out[32]);

/**
 * The hash of one full block: `tokens` (num_tokens >= 1 ids, each >= 0)
 * following the block whose hash is `parent` (the root for a chain's first
 * block), with `extra` (extra_len bytes, NULL exactly when extra_len is 0) as
 * the block's extra keys. Writes 32 bytes to `out`, which may be the same
 * array as `parent` (hashing a chain in place).
 * Errors (INVALID_ARGUMENT, `out` untouched): parent, tokens or out NULL;
 * num_tokens 0 or above 4294967295; a negative token id (the message names
 * its index and value); extra NULL with a nonzero extra_len; extra_len above
 * 4294967295.
 * Since 0.6.
 */
KVC_API kvc_error* kvc_block_hash(const uint8_t parent[32], const int32_t* tokens, size_t num_tokens,
                                  const void* extra, size_t extra_len, uint8_t out[32]);

/**
 * The hashes of every FULL block of a token list, with empty extra keys: what
 * a router computes per request. Block i holds tokens[i*block_size ..
 * (i+1)*block_size); out[0] = kvc_block_hash(root, block 0), out[i] =
 * kvc_block_hash(out[i-1], block i). The num_tokens % block_size tokens of a
 * partial tail are not hashed. Writes num_tokens / block_size hashes to
 * out[0..] and that count to `*out_count` (0 when no block is full; `tokens`
 * may then be NULL if num_tokens is 0, and `out` NULL if out_capacity is 0).
 * Errors (INVALID_ARGUMENT; nothing written, `*out_count` included): root or
 * out_count NULL; tokens NULL with num_tokens > 0; out NULL with
 * out_capacity > 0; block_size 0; a negative token id anywhere in the list,
 * the tail included (the message names its index and value); out_capacity
 * smaller than the number of full blocks (the message names both numbers).
 * Since 0.6.
 */
KVC_API kvc_error* kvc_block_hash_chain(const uint8_t root[32], const int32_t* tokens, size_t num_tokens,
                                        uint32_t block_size, uint8_t (*out)[32], size_t out_capacity,
                                        size_t* out_count);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_BLOCK_HASH_H */
