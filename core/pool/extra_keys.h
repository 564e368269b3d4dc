/*
 * core/pool/extra_keys.h: a sequence's extra keys (kvc_pool_sequence_options
 * since 0.7; docs/block-hash.md, version 2): the adapter key and the
 * multimodal items, copied and validated once at creation, and the extra
 * bytes of one block, encoded on demand from them.
 */
#ifndef KVC_CORE_POOL_EXTRA_KEYS_H
#define KVC_CORE_POOL_EXTRA_KEYS_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

/* One allocation (so a fork copies it whole); opaque outside extra_keys.c. */
typedef struct kvci_pool_extra kvci_pool_extra;

/*
 * Validates the extra keys of `o` (a full-size copy) and copies them into *out; *out is NULL when the sequence
 * has none (its blocks hash as in version 1). `vllm`: the pool hashes as KVC_POOL_HASH_VLLM_SHA256_CBOR (the
 * keys are text, the LoRA path and the salt are extra keys too). On error *out is untouched and nothing is
 * allocated.
 */
kvc_error* kvci_pool_extra_read(const char* fn, const kvc_pool_sequence_options* o, int vllm, kvci_pool_extra** out);

/* A copy of `x` (NULL for NULL); NULL with `*oom` set when memory runs out. */
kvci_pool_extra* kvci_pool_extra_copy(const kvci_pool_extra* x, int* oom);

void kvci_pool_extra_free(kvci_pool_extra* x);

/*
 * The extra bytes of the block of tokens [start, end): the adapter entry, then the entries of the items whose
 * range overlaps the block, by offset (vllm: the CBOR of vLLM's extra-keys tuple; NULL for None). Returns a pointer into x's scratch (valid until the next call on x) and
 * sets *len; *len 0 (and NULL) when x is NULL or nothing applies.
 */
const uint8_t* kvci_pool_extra_block(kvci_pool_extra* x, uint64_t start, uint64_t end, uint32_t* len);

#endif /* KVC_CORE_POOL_EXTRA_KEYS_H */
