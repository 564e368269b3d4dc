/*
 * kvcache/pool.h: paged KV for serving stacks. Since 0.6.
 *
 * A pool is a fixed set of blocks on one device for one model, shared by many
 * sequences (requests) that join and leave every step: the model vLLM,
 * SGLang and TensorRT-LLM use for continuous batching, as a library a Go or
 * Rust server links. docs/pool.md explains the design; this header is the
 * contract.
 *
 * Layers and groups. The model's layers are described once, at creation;
 * each belongs to a group of one attention kind (full, sliding window,
 * chunked, or recurrent state). A group has its own block size and block
 * count (since 0.7, optionally one block budget for all groups instead:
 * kvc_pool_options.shared_budget_bytes); all layers of a group share its
 * block tables (block i of a group
 * holds tokens [i*block_size, (i+1)*block_size) of every layer of the
 * group). K and V of a layer may have different head_dims.
 *
 * Block 0 of every group is the null block: never handed out, it is what a
 * block table holds where a sliding or chunked group has freed a block that
 * left the window (vLLM's convention), so an exported table never holds an
 * invalid index. A group of num_blocks blocks has num_blocks - 1 usable ones.
 *
 * Sequences. A sequence holds its token ids and one block table per group.
 * Its blocks are reference counted: match_prefix attaches cached blocks,
 * fork shares every block, and a block is written only by a sequence that
 * holds its only reference and while it is not cached (hashed); otherwise
 * reserve copies it first (copy-on-write). Full blocks whose tokens are
 * committed are hashed (docs/block-hash.md: a SHA-256 chain from the pool's
 * seed and the sequence's salt, or since 0.7 vLLM's own hash:
 * kvc_pool_options.hash_mode) and become reusable by later requests; a
 * cached block nobody references stays in the pool until space is needed
 * (least recently used first) unless pinned.
 *
 * The step of a serving loop:
 *   for a new request: kvc_pool_sequence_create, kvc_pool_match_prefix
 *   admission:         kvc_pool_blocks_needed against kvc_pool_stats' free counts
 *   every step, once:  kvc_pool_reserve_batch (since 0.7; or kvc_pool_reserve
 *                      per sequence): the step's slot mapping,
 *                      kvc_pool_block_table (views for the attention kernel)
 *   per layer, in the forward pass: kvc_pool_write_layer (since 0.7: that
 *                      layer's K/V through the same mapping, one launch),
 *                      then the layer's attention reads the pool
 *   after the step:    kvc_pool_commit_batch (since 0.7; or kvc_pool_commit)
 *   (kvc_pool_write writes every layer in one call, for K/V that exist all
 *   at once: an imported prefill, tests, benchmarks)
 *   sampling n > 1:    kvc_pool_fork; speculative decoding: kvc_pool_truncate
 *   request done:      kvc_pool_sequence_destroy (blocks stay cached) or
 *                      kvc_pool_sequence_pin first
 *
 * Errors. Every function that can fail returns a kvc_error* (NULL on
 * success) whose message names the argument, the value and the rule; a
 * failed call changes nothing (no block allocated, evicted, copied or
 * freed, no event queued). Running out of blocks is KVC_ERROR_OUT_OF_MEMORY
 * with the group and the numbers, never an abort. Since 0.7: a device that
 * fails a write into the pool's blocks (kvc_pool_write, kvc_pool_write_layer,
 * a copy-on-write in kvc_pool_reserve or kvc_pool_reserve_batch, a recurrent
 * checkpoint or restore) poisons the pool:
 * that call and every later one but the destroy functions return
 * KVC_ERROR_INVALID_STATE (kvcache/error.h; docs/gpus.md, 'When the device
 * fails'). A failed gather or fork leaves the pool unchanged.
 *
 * Threads. A pool and all its sequences are one object for threading: calls
 * on it must not overlap (serialize them, as a serving loop's scheduler
 * thread does); an overlapping call returns KVC_ERROR_BUSY and does nothing
 * (since 0.7; kvcache.h, Thread safety). Distinct pools are independent. Views returned by the pool
 * are valid until the next call that mutates the pool or any of its
 * sequences. These calls do not count as mutating (the bindings rely on
 * it): the queries (stats, lengths, blocks_needed), kvc_pool_write,
 * kvc_pool_write_layer, kvc_pool_gather, kvc_pool_layer_storage (whose views last until
 * kvc_pool_destroy), kvc_pool_recurrent_state, kvc_pool_set_stream, and
 * kvc_pool_block_table, which replaces only the previous table of the same
 * group and format.
 *
 * Devices. A pool on a GPU keeps its blocks and the exported tables in
 * device memory and issues its work on the stream it is bound to
 * (kvc_pool_set_stream), like a cache; its bookkeeping (tables, hashes,
 * reference counts) lives on the host, so scheduling calls never wait for
 * the device.
 */
#ifndef KVCACHE_POOL_H
#define KVCACHE_POOL_H

#include "kvcache/allocator.h"
#include "kvcache/block_hash.h"
#include "kvcache/error.h"
#include "kvcache/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Opaque pool handle. */
typedef struct kvc_pool kvc_pool;
/** Opaque sequence handle; belongs to one pool. */
typedef struct kvc_pool_sequence kvc_pool_sequence;

/* ------------------------------------------------------------- options */

/* The attention kind of a group. */
typedef int32_t kvc_pool_group_kind;
#define KVC_POOL_GROUP_FULL      1 /**< every block of a sequence is kept */
#define KVC_POOL_GROUP_SLIDING   2 /**< tokens older than `window` are not attended: blocks holding only
                                        such tokens go back to the pool (the table keeps block 0) */
#define KVC_POOL_GROUP_CHUNKED   3 /**< attention within chunks of `window` tokens: blocks wholly before
                                        the current chunk go back to the pool */
#define KVC_POOL_GROUP_RECURRENT 4 /**< recurrent (Mamba/SSM) layers: one live state per sequence, and a
                                        checkpoint of it at every block boundary a commit reaches, so
                                        prefix reuse works for hybrid models */
#define KVC_POOL_GROUP_LATENT    5 /**< multi-head latent attention (MLA: DeepSeek V2/V3, Kimi K2): one tensor
                                        per token and no V (the compressed latent and the rope key in one
                                        row, kv_lora_rank + qk_rope_head_dim wide), every block kept as in
                                        a FULL group. Its layers have num_kv_heads 1, key_head_dim the row
                                        width, value_head_dim 0. Since 0.7. */

/** One group of layers. Published sizes: 32 (0.6). */
typedef struct kvc_pool_group_options {
  uint32_t struct_size;      /**< sizeof(kvc_pool_group_options) */
  kvc_pool_group_kind kind;  /**< default KVC_POOL_GROUP_FULL */
  uint32_t block_size;       /**< tokens per block, >= 1 (RECURRENT: tokens between checkpoints) */
  uint32_t num_blocks;       /**< blocks of the group, >= 2 (block 0 is the null block). RECURRENT: the
                                  state slots, live states and checkpoints together. 0 when the pool has a
                                  shared budget (kvc_pool_options.shared_budget_bytes, since 0.7) */
  int64_t window;            /**< SLIDING: the sliding window in tokens (a query attends to itself and
                                  window - 1 tokens before it), >= 1; CHUNKED: the chunk size, >= 1;
                                  0 for FULL and RECURRENT */
  uint64_t reserved;         /**< 0 */
} kvc_pool_group_options;

#define KVC_POOL_GROUP_OPTIONS_INIT {sizeof(kvc_pool_group_options), KVC_POOL_GROUP_FULL, 16, 0, 0, 0}

/*
 * How a layer's blocks hold its K/V (since 0.7). The pool's `dtype` stays what
 * writes take and gathers return; the storage is what the blocks hold.
 */
typedef int32_t kvc_pool_storage;
#define KVC_POOL_STORAGE_DTYPE    0 /**< the pool's dtype (default) */
#define KVC_POOL_STORAGE_FP8_E4M3 1 /**< float8 e4m3fn codes, one byte per element, with per-tensor scales as
                                         vLLM's kv_cache_dtype="fp8": a write stores e4m3fn(float32(x) / scale)
                                         (round to nearest even, saturating to +-448, NaN stays NaN), a gather
                                         returns dtype(float32(code) * scale). Attention and latent layers only.
                                         The storage views are uint8 (vLLM's own fp8 cache tensors). Since 0.7. */

/**
 * One layer of the model. Attention groups: K is [num_kv_heads, key_head_dim]
 * per token, V [num_kv_heads, value_head_dim]. Latent groups: one row of
 * key_head_dim per token (num_kv_heads 1, no V). Recurrent groups: the live
 * state of a sequence is a conv state [conv_dim, conv_kernel] and an SSM
 * state [num_kv_heads, key_head_dim, ssm_state_size] (Mamba2's heads,
 * head_dim, d_state; Mamba: num_kv_heads = 1, key_head_dim = d_inner).
 * Published sizes: 40 (0.6), 56 (0.7: storage, k_scale, v_scale). An array of
 * layers is read with the stride its first entry's struct_size gives, and
 * every entry must have that size.
 */
typedef struct kvc_pool_layer_options {
  uint32_t struct_size;      /**< sizeof(kvc_pool_layer_options) */
  uint32_t group;            /**< index into kvc_pool_options.groups */
  uint32_t num_kv_heads;     /**< >= 1; LATENT: 1 */
  uint32_t key_head_dim;     /**< >= 1; LATENT: the row width */
  uint32_t value_head_dim;   /**< attention groups: >= 1; 0 = key_head_dim. RECURRENT and LATENT: 0 */
  uint32_t conv_dim;         /**< RECURRENT: channels of the conv state, >= 1; attention: 0 */
  uint32_t conv_kernel;      /**< RECURRENT: conv kernel size, >= 1; attention: 0 */
  uint32_t ssm_state_size;   /**< RECURRENT: d_state, >= 1; attention: 0 */
  uint64_t reserved;         /**< 0 */
  /* since 0.7 */
  kvc_pool_storage storage;  /**< KVC_POOL_STORAGE_DTYPE (default) or FP8_E4M3 (not in a RECURRENT group).
                                  Since 0.7. */
  float k_scale;             /**< FP8_E4M3: K's (a latent row's) scale, finite and > 0 (vLLM's layer._k_scale;
                                  1.0 when the checkpoint has none); otherwise 1.0. Default 1.0. Since 0.7. */
  float v_scale;             /**< FP8_E4M3 attention layers: V's scale, finite and > 0; otherwise (latent
                                  layers too) 1.0. Default 1.0. Since 0.7. */
} kvc_pool_layer_options;

#define KVC_POOL_LAYER_OPTIONS_INIT \
  {sizeof(kvc_pool_layer_options), 0, 0, 0, 0, 0, 0, 0, 0, KVC_POOL_STORAGE_DTYPE, 1.0f, 1.0f}
/** Sets `options` to KVC_POOL_LAYER_OPTIONS_INIT. Never fails; NULL is ignored. Since 0.7. */
KVC_API void kvc_pool_layer_options_init(kvc_pool_layer_options* options);

/* Physical layout of the K/V storage of a layer (views in either layout are zero-copy; see
 * kvc_pool_layer_storage). */
typedef int32_t kvc_pool_layout;
#define KVC_POOL_LAYOUT_NHD 0 /**< [num_blocks, block_size, num_kv_heads, head_dim] (vLLM, FlashInfer NHD) */
#define KVC_POOL_LAYOUT_HND 1 /**< [num_blocks, num_kv_heads, block_size, head_dim] (FlashInfer HND) */

/*
 * How a pool computes its block hashes (kvc_pool_options.hash_mode; docs/block-hash.md). Since 0.7.
 */
typedef int32_t kvc_pool_hash_mode;
/** docs/block-hash.md's chain (version 2, KVC_POOL_BLOCK_HASH_VERSION): the default. Since 0.7. */
#define KVC_POOL_HASH_KVCACHE 0
/**
 * vLLM's prefix-caching hash with its `sha256_cbor` algorithm (the one of vLLM's that is reproducible across
 * processes and languages): hash = SHA-256 of the canonical CBOR of (parent hash, token ids, extra keys), the
 * first block's parent SHA-256 of the CBOR text `hash_seed` (vLLM's NONE_HASH; an empty seed means vLLM's
 * default "vllm-none-hash", a non-empty one what vLLM takes from PYTHONHASHSEED). A sequence's extra keys are
 * vLLM's: ("lora", adapter_key, adapter_path) on every block, ("mm", item hash, item offset - block start) per
 * overlapping item, ("cache_salt", salt) on the first block; so the seed, the salt, the adapter key and path and
 * the items' hashes must be UTF-8 text (vLLM's str). The blocks' hashes equal vLLM's for the same tokens and
 * keys (tests/pool/vllm_hash_vectors.txt, made by vLLM's own functions). Since 0.7.
 */
#define KVC_POOL_HASH_VLLM_SHA256_CBOR 1

/** Options of kvc_pool_create. Published sizes: 80 (0.6), 88 (0.7), 96 (0.7: shared_budget_bytes), 104 (0.7:
 * hash_mode). */
typedef struct kvc_pool_options {
  uint32_t struct_size;                        /**< sizeof(kvc_pool_options) */
  kvc_dtype dtype;                             /**< K/V and state dtype; required (not UNSET) */
  kvc_device device;                           /**< default {KVC_DEVICE_CPU, 0} */
  uint32_t num_groups;                         /**< >= 1 */
  const kvc_pool_group_options* groups;        /**< num_groups entries; borrowed for the call */
  uint32_t num_layers;                         /**< >= 1 */
  const kvc_pool_layer_options* layers;        /**< num_layers entries; borrowed for the call */
  kvc_pool_layout layout;                      /**< default KVC_POOL_LAYOUT_NHD */
  const void* hash_seed;                       /**< the pool's hash namespace (name the model and its
                                                    weights with it); borrowed for the call */
  size_t hash_seed_len;                        /**< bytes of hash_seed; 0 = empty seed */
  int32_t enable_prefix_caching;               /**< 1 (default): full committed blocks are hashed and
                                                    reused; 0: never hashed, released blocks are freed */
  uint32_t event_capacity;                     /**< events kept until pulled; 0 = no events (default).
                                                    When full, the oldest are dropped (ids show the gap) */
  /* since 0.7 */
  const kvc_allocator* allocator;              /**< NULL (default): the backend allocates the blocks; else
                                                    each layer's K and V storage (all its blocks) comes
                                                    from it, once, at create (kvcache/allocator.h).
                                                    Copied; ctx must outlive the pool. Since 0.7. */
  uint64_t shared_budget_bytes;                /**< 0 (default): every group has its own
                                                    groups[g].num_blocks. Otherwise one budget of this
                                                    many bytes of block storage that all groups share
                                                    (vLLM's hybrid allocator): every block takes one page
                                                    of the same size whatever its group (the largest
                                                    group's block: its layers' K and V, each rounded up
                                                    to 16 bytes; a smaller group's block pads its page),
                                                    the pool holds floor(shared_budget_bytes / page)
                                                    pages (block 0, the null block, included; at least
                                                    2), and a block freed by one group can be taken by
                                                    any: memory goes to the groups the load needs. Block
                                                    ids are then pool-wide, groups[g].num_blocks must be
                                                    0, and kvc_pool_stats' num_blocks and free_blocks are
                                                    the shared budget's; eviction takes the least
                                                    recently used cached block of any group. A layer's
                                                    storage views step a page from one block to the
                                                    next (not compact; kvc_pool_layer_storage). The
                                                    allocator, if set, gives one buffer of all pages.
                                                    docs/pool.md, 'One budget for all groups'. Since 0.7. */
  kvc_pool_hash_mode hash_mode;                /**< KVC_POOL_HASH_KVCACHE (default) or
                                                    KVC_POOL_HASH_VLLM_SHA256_CBOR. Since 0.7. */
} kvc_pool_options;

#define KVC_POOL_OPTIONS_INIT \
  {sizeof(kvc_pool_options), KVC_DTYPE_UNSET, {KVC_DEVICE_CPU, 0}, 0, NULL, 0, NULL, KVC_POOL_LAYOUT_NHD, NULL, 0, 1, 0, \
   NULL, 0, KVC_POOL_HASH_KVCACHE}
/** Sets `options` to KVC_POOL_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_pool_options_init(kvc_pool_options* options);

/* ---------------------------------------------------------- pool itself */

/**
 * Creates a pool: allocates every group's blocks (zeroed) on the device.
 * On success `*out` is owned by the caller (kvc_pool_destroy); on error it
 * is untouched. Errors: INVALID_ARGUMENT (options, naming the field and
 * the group or layer), NO_DEVICE, OUT_OF_MEMORY.
 */
KVC_API kvc_error* kvc_pool_create(const kvc_pool_options* options, kvc_pool** out);

/**
 * Frees the pool and its storage. Its sequences must have been destroyed
 * before; a pool still holding sequences frees them too (their handles
 * become invalid). Accepts NULL.
 */
KVC_API void kvc_pool_destroy(kvc_pool* pool);

/** Binds a device pool to the caller's stream, with kvc_cache_set_stream's rules. */
KVC_API kvc_error* kvc_pool_set_stream(kvc_pool* pool, void* stream);

/** Counters of one group. Fill struct_size before the call. Published sizes: 72 (0.6). */
typedef struct kvc_pool_stats {
  uint32_t struct_size;        /**< set by the caller: sizeof(kvc_pool_stats) */
  uint32_t group;              /**< the group these counters are of */
  uint64_t num_blocks;         /**< usable blocks (num_blocks - 1). A shared budget (since 0.7): the
                                    budget's usable blocks, the same for every group */
  uint64_t free_blocks;        /**< neither referenced nor cached. A shared budget: the budget's free
                                    blocks, which any group may take (the counts below are the group's own:
                                    free + the sum over groups of cached + used + unreferenced pinned =
                                    num_blocks) */
  uint64_t cached_blocks;      /**< cached, unreferenced and not pinned: evictable, reusable by match_prefix */
  uint64_t used_blocks;        /**< referenced by at least one sequence */
  uint64_t pinned_blocks;      /**< cached blocks kept from eviction by kvc_pool_sequence_pin (referenced or
                                    not; free + cached + used + unreferenced pinned = num_blocks) */
  uint64_t prefix_queries;     /**< blocks match_prefix could have matched since creation ((num_tokens - 1) /
                                    block_size per call) */
  uint64_t prefix_hits;        /**< of which the matches covered */
  uint64_t evictions;          /**< cached blocks reclaimed for new data since creation */
} kvc_pool_stats;

/** Fills `*out` for `group`. Errors: INVALID_ARGUMENT (NULL, struct_size), OUT_OF_RANGE (group). */
KVC_API kvc_error* kvc_pool_stats_get(const kvc_pool* pool, uint32_t group, kvc_pool_stats* out);

/**
 * Evicts every cached, unreferenced, unpinned block (a weights update makes
 * them stale) and queues a KVC_POOL_EVENT_ALL_CLEARED event (no REMOVED
 * events; not counted in kvc_pool_stats.evictions). Blocks in use are
 * untouched.
 */
KVC_API kvc_error* kvc_pool_clear_cache(kvc_pool* pool);

/* ------------------------------------------------------------ sequences */

/**
 * The version of docs/block-hash.md a pool's hashes follow: 2, version 1 plus the encoding of a sequence's extra
 * keys (a sequence without them has version 1's hashes exactly). Since 0.7.
 */
#define KVC_POOL_BLOCK_HASH_VERSION 2
/** Bytes of one extra key at most (an adapter key or a multimodal item's hash). Since 0.7. */
#define KVC_POOL_EXTRA_KEY_MAX 1024
/** Multimodal items of one sequence at most. Since 0.7. */
#define KVC_POOL_MM_ITEMS_MAX 65536

/**
 * One multimodal input of a sequence (an image, an audio clip): its content
 * hash and the tokens its placeholders occupy, [offset, offset + length).
 * Every block whose tokens overlap that range carries `hash` in its extra keys
 * (docs/block-hash.md, version 2), so sequences with equal placeholder tokens
 * but different images share no block. A plain record in an array (no
 * struct_size): it never grows. Since 0.7.
 */
typedef struct kvc_pool_mm_item {
  const void* hash;  /**< the content hash (any bytes: a digest of the pixels, an id); borrowed for the call */
  size_t hash_len;   /**< bytes of hash, 1 .. KVC_POOL_EXTRA_KEY_MAX */
  uint64_t offset;   /**< the item's first token in the sequence, < 2^40 */
  uint64_t length;   /**< tokens it occupies, >= 1; offset + length <= 2^40 */
} kvc_pool_mm_item;

/**
 * Options of kvc_pool_sequence_create. Published sizes: 24 (0.6), 56 (0.7:
 * mm_items, num_mm_items, adapter_key, adapter_key_len), 80 (0.7: adapter_path,
 * adapter_path_len, adapter_id).
 *
 * The extra keys (since 0.7): the adapter key enters the hash of every block
 * and an item's hash that of every block its range overlaps (the block-hash
 * encoding is docs/block-hash.md's version 2; without extra keys a block's
 * hash is version 1's, unchanged). Rejected with INVALID_ARGUMENT, naming the
 * field, the value and the rule, and nothing created: an item with an empty
 * or oversize hash, length 0 or a range beyond 2^40 tokens; items not sorted
 * by offset or overlapping one another; more than KVC_POOL_MM_ITEMS_MAX
 * items; an adapter key longer than KVC_POOL_EXTRA_KEY_MAX; a NULL pointer
 * with a nonzero count. Everything is copied: the caller's arrays may go once
 * the call returns.
 */
typedef struct kvc_pool_sequence_options {
  uint32_t struct_size;  /**< sizeof(kvc_pool_sequence_options) */
  const void* salt;      /**< cache salt (per tenant): blocks are reused only between sequences with the
                              same salt (docs/block-hash.md); borrowed for the call */
  size_t salt_len;       /**< bytes of salt; 0 = no salt */
  const kvc_pool_mm_item* mm_items; /**< the sequence's multimodal items, sorted by offset, not overlapping;
                                         borrowed for the call. Since 0.7. */
  size_t num_mm_items;   /**< entries of mm_items; 0 = none. Since 0.7. */
  const void* adapter_key; /**< the adapter (a LoRA's name) or tenant key, in every block's extra keys;
                                borrowed for the call. Since 0.7. */
  size_t adapter_key_len; /**< bytes of adapter_key, 0 .. KVC_POOL_EXTRA_KEY_MAX; 0 = none. Since 0.7. */
  const void* adapter_path; /**< KVC_POOL_HASH_VLLM_SHA256_CBOR pools only: the LoRA's path (vLLM's lora_path,
                                 in its ("lora", name, path) key; needs an adapter_key); borrowed for the call.
                                 Since 0.7. */
  size_t adapter_path_len; /**< bytes of adapter_path, 0 .. KVC_POOL_EXTRA_KEY_MAX; must be 0 in a
                                KVC_POOL_HASH_KVCACHE pool, whose hash has no path. Since 0.7. */
  int64_t adapter_id;    /**< the adapter's number in events (vLLM's lora_id), >= 0; 0 = none. Not hashed.
                              Since 0.7. */
} kvc_pool_sequence_options;

#define KVC_POOL_SEQUENCE_OPTIONS_INIT {sizeof(kvc_pool_sequence_options), NULL, 0, NULL, 0, NULL, 0, NULL, 0, 0}
/** Sets `options` to KVC_POOL_SEQUENCE_OPTIONS_INIT. Never fails; NULL is ignored. Since 0.7. */
KVC_API void kvc_pool_sequence_options_init(kvc_pool_sequence_options* options);

/** Creates an empty sequence (no tokens, no blocks). `options` NULL = defaults. */
KVC_API kvc_error* kvc_pool_sequence_create(kvc_pool* pool, const kvc_pool_sequence_options* options,
                                            kvc_pool_sequence** out);

/**
 * Releases the sequence's blocks and frees the handle. Blocks that are cached
 * stay in the pool, reusable, until evicted (or kept while pinned); the
 * others are free at once. Accepts NULL.
 */
KVC_API void kvc_pool_sequence_destroy(kvc_pool_sequence* sequence);

/** Tokens the sequence holds (reserved, whether committed or not). 0 for NULL. */
KVC_API uint64_t kvc_pool_sequence_length(const kvc_pool_sequence* sequence);

/** Tokens committed (written and declared by kvc_pool_commit or matched). 0 for NULL. */
KVC_API uint64_t kvc_pool_sequence_committed(const kvc_pool_sequence* sequence);

/**
 * Matches the longest cached prefix of `tokens` and attaches its blocks to
 * `sequence`, which must be empty. The prefix is a whole number of blocks of
 * every group, found in every group: a full group needs every block of it,
 * a sliding or chunked group those the last token still attends to, a
 * recurrent group a checkpoint at its end. At most num_tokens - 1 tokens are
 * matched: the last token of a prompt is always computed (its logits are
 * needed). The matched tokens become the sequence's committed tokens;
 * `*matched_tokens` says how many (0 when nothing matched). The rest of
 * `tokens` is not recorded: reserve it. A recurrent group's live state is set
 * from the checkpoint.
 * Errors: INVALID_ARGUMENT (NULL, negative token id naming its index, a
 * sequence that is not empty), OUT_OF_MEMORY (no slot for a recurrent
 * group's live state).
 */
KVC_API kvc_error* kvc_pool_match_prefix(kvc_pool_sequence* sequence, const int32_t* tokens, size_t num_tokens,
                                         uint64_t* matched_tokens);

/**
 * Appends `tokens` to the sequence and gives each a slot in every attention
 * group: slot = block * block_size + offset in the block, the index
 * kvc_pool_write and attention kernels use (vLLM's slot mapping).
 * `slot_mapping` receives num_groups * num_tokens entries, group-major
 * (entry g * num_tokens + i for token i in group g; -1 for a recurrent
 * group). Blocks are taken from the free list, then by evicting the least
 * recently used cached blocks; a shared or cached last block is first copied
 * (copy-on-write, all layers of its group). Sliding and chunked groups give
 * back the blocks that left the window of the first uncommitted token (the
 * window is judged from the committed length, so a prefill keeps its blocks
 * until it is committed).
 * Errors: INVALID_ARGUMENT (NULL, num_tokens 0, negative token id),
 * OUT_OF_MEMORY (naming the group, the blocks needed and the blocks
 * available; nothing changes).
 */
KVC_API kvc_error* kvc_pool_reserve(kvc_pool_sequence* sequence, const int32_t* tokens, size_t num_tokens,
                                    int64_t* slot_mapping);

/**
 * Declares every reserved token written: blocks that became full are hashed
 * and cached (with a KVC_POOL_EVENT_BLOCK_STORED event each; a block whose
 * hash another block already holds in the cache stays uncached, without an
 * event: the first copy is the one found), and a
 * recurrent group checkpoints the live state when the committed length is a
 * multiple of its block size (skipped, not an error, when no state slot is
 * free or evictable).
 */
KVC_API kvc_error* kvc_pool_commit(kvc_pool_sequence* sequence);

/**
 * A scheduler's step in one call: kvc_pool_reserve of num_tokens[i] tokens
 * for each of `sequences[i]`, in that order (a binding pays its call
 * overhead once per step, not once per sequence). `tokens` holds the
 * sequences' tokens one after another (sum of num_tokens entries);
 * `slot_mapping` receives num_groups * T entries, T that sum, in the form
 * kvc_pool_write and kvc_pool_write_layer take for the whole batch: the row
 * of group g is entries [g * T, (g + 1) * T), with each sequence's tokens
 * where its tokens are in `tokens`. A num_tokens[i] of 0 reserves nothing
 * for that sequence.
 *
 * Running out of blocks stops the batch, exactly as the same reserves one by
 * one would: sequences [0, k) are reserved, sequence k is the first that
 * does not fit, and it and every later one are unchanged (no later, smaller
 * request overtakes it: the order is the scheduler's priority).
 * `*num_reserved` receives k (num_sequences when all fit, which
 * kvc_pool_blocks_needed predicts exactly), and the mapping entries of the
 * unreserved sequences are -1, so writing the whole mapping skips them. This
 * is a success: the scheduler preempts or defers sequences [k, n).
 * Errors (nothing reserved, `*num_reserved` and `slot_mapping` untouched):
 * INVALID_ARGUMENT (NULL pool, sequences, tokens, num_tokens, slot_mapping
 * or num_reserved; a NULL sequence, one of another pool or one listed twice,
 * naming its index; a negative token id naming its index in `tokens`; a
 * sequence that would pass 2^40 tokens), INVALID_STATE (a poisoned pool).
 * A device failure in a copy-on-write poisons the pool as kvc_pool_reserve
 * does. Since 0.7.
 */
KVC_API kvc_error* kvc_pool_reserve_batch(kvc_pool* pool, kvc_pool_sequence* const* sequences, size_t num_sequences,
                                          const int32_t* tokens, const uint64_t* num_tokens, int64_t* slot_mapping,
                                          size_t* num_reserved);

/**
 * kvc_pool_commit of every sequence of `sequences`, in order, in one call.
 * Errors (nothing committed): INVALID_ARGUMENT (NULL pool or sequences, a
 * NULL sequence or one of another pool, naming its index), INVALID_STATE
 * (a poisoned pool). Since 0.7.
 */
KVC_API kvc_error* kvc_pool_commit_batch(kvc_pool* pool, kvc_pool_sequence* const* sequences, size_t num_sequences);

/**
 * A new sequence sharing every block of `sequence` (its tokens, committed
 * count and salt too; a recurrent group's live state is copied). Nothing is
 * copied for attention groups until one of the two writes into a shared
 * partial block (copy-on-write in kvc_pool_reserve).
 * Errors: INVALID_ARGUMENT (NULL), OUT_OF_MEMORY (recurrent state slot).
 */
KVC_API kvc_error* kvc_pool_fork(const kvc_pool_sequence* sequence, kvc_pool_sequence** out);

/**
 * Keeps the first `num_tokens` tokens (speculative decoding's rollback):
 * blocks wholly past them are released. A block that is cached keeps its
 * contents; the next reserve into it copies it. Truncating below the
 * committed length lowers it too; a recurrent group's live state cannot be
 * rolled back without a checkpoint at `num_tokens` (restored if the cache
 * holds one for the sequence's own committed tokens up to there; otherwise
 * INVALID_STATE and nothing changes; at 0 tokens the state is zeroed). A sliding or chunked group that already gave back a block the
 * token after `num_tokens` attends to refuses too (INVALID_STATE).
 * Errors: INVALID_ARGUMENT (NULL), OUT_OF_RANGE (num_tokens > length),
 * INVALID_STATE.
 */
KVC_API kvc_error* kvc_pool_truncate(kvc_pool_sequence* sequence, uint64_t num_tokens);

/**
 * Pins the sequence's cached blocks: they are never evicted, even after the
 * sequence is destroyed, until kvc_pool_unpin_all (a system prompt every
 * request shares). Pinning a block twice is pinning it.
 */
KVC_API kvc_error* kvc_pool_sequence_pin(kvc_pool_sequence* sequence);

/** Unpins every block; they stay cached, evictable again. */
KVC_API kvc_error* kvc_pool_unpin_all(kvc_pool* pool);

/**
 * Admission control: the blocks of each group that reserving
 * `new_tokens[i]` more tokens for each of `sequences[i]`, in that order,
 * needs free or evictable beforehand: copy-on-write copies and recurrent
 * slots included, and the blocks a reserve gives back (window frees, the
 * old block of a copy-on-write) counted for that reserve and the ones
 * after it only, so the entry is the highest running total of takes minus
 * gives (0 for a group that never takes more than it got back). A block
 * two of the sequences share is copied once. Exactly:
 * reserving them in that order succeeds when each group's entry is at most
 * kvc_pool_stats' free_blocks + cached_blocks. A new_tokens[i] of 0 counts
 * nothing. `blocks_needed` receives num_groups entries. With a shared budget
 * (since 0.7) the groups take from one budget: every entry is the same
 * number, the highest running total of the whole plan (a reserve gives back
 * every group's window blocks, then takes group by group), and reserving
 * succeeds exactly when it is at most free_blocks plus the sum over groups
 * of cached_blocks.
 * Errors: INVALID_ARGUMENT (NULL, a sequence of another pool).
 */
KVC_API kvc_error* kvc_pool_blocks_needed(const kvc_pool* pool, const kvc_pool_sequence* const* sequences,
                                          const uint64_t* new_tokens, size_t num_sequences,
                                          uint64_t* blocks_needed);

/* ------------------------------------------------------------- data path */

/**
 * Writes one step's K/V through a slot mapping: for layer l and token i,
 * keys[l][i] (a [num_tokens, num_kv_heads, key_head_dim] tensor) goes to
 * slot slot_mapping[group(l) * num_tokens + i] of layer l, and values
 * likewise. A slot of -1 is skipped (padding). `keys` and `values` hold
 * num_layers entries (one per layer, recurrent layers' entries ignored, may
 * be zeroed); they live on the pool's device, any strides. `slot_mapping`
 * is host memory in kvc_pool_reserve's form, so the tokens of many
 * sequences are written in one call: concatenate their mappings group by
 * group. A GPU pool issues one kernel launch for all layers.
 * Since 0.7: a latent layer's entry of `values` is ignored (may be zeroed;
 * `values` may be NULL when every layer is latent or recurrent), and an fp8
 * layer stores the codes of its inputs (KVC_POOL_STORAGE_FP8_E4M3).
 * Errors: INVALID_ARGUMENT (a slot out of range, in the null block, in a
 * block no sequence holds, or twice in one group, naming the token, group
 * and value; since 0.7, with a shared budget, in a block another group
 * holds), SHAPE_MISMATCH, DTYPE_MISMATCH, DEVICE_MISMATCH; nothing
 * written.
 */
KVC_API kvc_error* kvc_pool_write(kvc_pool* pool, const kvc_tensor* keys, const kvc_tensor* values,
                                  uint32_t num_layers, const int64_t* slot_mapping, size_t num_tokens);

/**
 * Writes one layer's K/V of a step through the step's slot mapping: the call
 * a model's forward pass makes per layer, once layer `layer` computed them
 * (kvc_pool_write is the all-layers form of the same write). For token i,
 * key[i] (a [num_tokens, num_kv_heads, key_head_dim] tensor) goes to slot
 * slot_mapping[group(layer) * num_tokens + i] of the layer, and value[i]
 * likewise; a slot of -1 is skipped. `slot_mapping` is the whole step's
 * mapping in kvc_pool_reserve's and kvc_pool_write's form (num_groups *
 * num_tokens entries, group-major, host memory): an engine passes the same
 * array to every layer of the step and the call reads the layer's group's
 * row. The row is checked like kvc_pool_write checks it, but only when it
 * differs from the row this group's last successful check accepted or a block
 * was released since: the layers after the first of a step pay a comparison,
 * not the sort the duplicate check needs. `key` and `value` live on the
 * pool's device, any strides; borrowed for the call. A GPU pool issues one
 * kernel launch per call (K and V together). A latent layer takes `key` (its
 * rows) and a NULL `value`; an fp8 layer stores the codes of its inputs.
 * Errors: OUT_OF_RANGE (layer), INVALID_ARGUMENT (NULL pool, key, value or
 * slot_mapping, a recurrent layer, num_tokens above 2^31 - 1, a slot out of
 * range, in the null block, in a block no sequence holds, or twice in the
 * group, naming the token, group and value), SHAPE_MISMATCH, DTYPE_MISMATCH,
 * DEVICE_MISMATCH, INVALID_STATE (a poisoned pool); nothing written.
 * Since 0.7.
 */
KVC_API kvc_error* kvc_pool_write_layer(kvc_pool* pool, uint32_t layer, const kvc_tensor* key,
                                        const kvc_tensor* value, const int64_t* slot_mapping, size_t num_tokens);

/**
 * The K and V storage of `layer` as 4-D views over all its group's blocks
 * in `layout` ([num_blocks, block_size, heads, head_dim] for NHD,
 * [num_blocks, heads, block_size, head_dim] for HND). The layout the pool
 * was created with gives compact tensors; the other the same memory with
 * strides. With a shared budget (since 0.7) dimension 0 steps one page (the
 * stride is the page's elements, not the block's: a page also holds the
 * group's other layers), so neither view is compact. Valid until
 * kvc_pool_destroy: a pool's storage never moves.
 * Since 0.7: a latent layer's `value` is zeroed (no V; `key` has 1 head);
 * an fp8 layer's views are uint8 tensors of e4m3fn codes, as vLLM's fp8
 * caches are (read value = code * the layer's k_scale or v_scale); with a
 * shared budget their page stride counts codes (bytes).
 * Errors: OUT_OF_RANGE (layer), INVALID_ARGUMENT (a recurrent layer, layout).
 */
KVC_API kvc_error* kvc_pool_layer_storage(const kvc_pool* pool, uint32_t layer, kvc_pool_layout layout,
                                          kvc_kv* out);

/* Block table formats of kvc_pool_block_table. */
typedef int32_t kvc_pool_table_format;
#define KVC_POOL_TABLE_PADDED 0 /**< vLLM / FlashAttention: int32 [batch, max_blocks], rows padded with 0 */
#define KVC_POOL_TABLE_CSR    1 /**< FlashInfer: int32 indptr [batch + 1], indices [indptr[batch]],
                                     last_page_len [batch] */

/** Block tables of a batch in one format. Owned by the pool. */
typedef struct kvc_pool_table {
  kvc_tensor table;          /**< PADDED: the table. CSR: indices */
  kvc_tensor indptr;         /**< CSR only (zeroed for PADDED) */
  kvc_tensor last_page_len;  /**< CSR only: tokens in each sequence's last block, 1..block_size */
} kvc_pool_table;

/**
 * The block tables of `sequences` in `group`, in `format`, as int32 tensors
 * in the pool's device memory (one host-to-device copy into a buffer the
 * pool owns per group and format). Valid until the next call that mutates
 * the pool or a sequence, or the next kvc_pool_block_table of the same group
 * and format (tables of several groups coexist). An empty sequence has no
 * entries and a last_page_len of 0.
 * Errors: INVALID_ARGUMENT (NULL, a sequence of another pool, a recurrent
 * group), OUT_OF_RANGE (group).
 */
KVC_API kvc_error* kvc_pool_block_table(kvc_pool* pool, const kvc_pool_sequence* const* sequences,
                                        size_t num_sequences, uint32_t group, kvc_pool_table_format format,
                                        kvc_pool_table* out);

/**
 * Copies the K/V of `sequence`'s tokens [0, length) of `layer` into
 * caller-owned contiguous-or-strided tensors of shape [1, num_kv_heads,
 * length, head_dim] on the pool's device: the transformers layout, for
 * attention code that needs contiguous tensors and to move a sequence into
 * a kvc_cache. Sliding and chunked groups have no bytes for freed blocks:
 * gathering such a sequence is INVALID_STATE naming the first missing token.
 * Since 0.7: a latent layer fills `keys` ([1, 1, length, row width]) and
 * takes a NULL `values`; an fp8 layer returns the decoded values in the
 * pool's dtype, dtype(float32(code) * scale).
 */
KVC_API kvc_error* kvc_pool_gather(const kvc_pool_sequence* sequence, uint32_t layer, const kvc_tensor* keys,
                                   const kvc_tensor* values);

/**
 * The live recurrent state of `sequence` in recurrent `layer`: conv
 * [1, conv_dim, conv_kernel] and SSM [1, num_kv_heads, key_head_dim,
 * ssm_state_size] views the model reads and writes in place. Valid until
 * the next call that mutates the pool or a sequence.
 * Errors: INVALID_ARGUMENT (not a recurrent layer), OUT_OF_RANGE (layer),
 * INVALID_STATE (no live state yet: kvc_pool_reserve or a match gives one).
 */
KVC_API kvc_error* kvc_pool_recurrent_state(kvc_pool_sequence* sequence, uint32_t layer, kvc_tensor* conv_state,
                                            kvc_tensor* ssm_state);

/* --------------------------------------------------------------- events */

typedef int32_t kvc_pool_event_kind;
#define KVC_POOL_EVENT_BLOCK_STORED  1 /**< a full block was hashed and cached */
#define KVC_POOL_EVENT_BLOCK_REMOVED 2 /**< a cached block was evicted (its hash is no longer found) */
#define KVC_POOL_EVENT_ALL_CLEARED   3 /**< kvc_pool_clear_cache */
/*
 * The tier worker's events (kvcache/tier.h, kvc_tier_worker_options.events; since 0.7): group and block_hash
 * name the block, block_id is the tier's index (kvc_pool_tier), num_tokens the group's block size.
 */
#define KVC_POOL_EVENT_TIER_STORED   4 /**< the worker stored the block in the tier. Since 0.7. */
#define KVC_POOL_EVENT_TIER_FAILED   5 /**< the tier refused or failed the store. Since 0.7. */
#define KVC_POOL_EVENT_TIER_DROPPED  6 /**< the store never reached the tier: queue full, or shutdown. Since 0.7. */

/** One event. Published sizes: 96 (0.6). */
typedef struct kvc_pool_event {
  uint64_t id;                              /**< 1, 2, 3, ... per pool; a gap means dropped events */
  kvc_pool_event_kind kind;
  uint32_t group;                           /**< STORED / REMOVED */
  uint8_t block_hash[KVC_BLOCK_HASH_SIZE];  /**< STORED / REMOVED */
  uint8_t parent_hash[KVC_BLOCK_HASH_SIZE]; /**< STORED: the previous block's hash, or the chain's root */
  uint32_t num_tokens;                      /**< STORED: tokens in the block (the group's block size) */
  uint32_t block_id;                        /**< STORED / REMOVED: the block's index in its group */
  uint64_t reserved;
} kvc_pool_event;

/**
 * Takes up to `capacity` queued events, oldest first, into `events`;
 * `*count` says how many. Pulled events leave the queue.
 */
KVC_API kvc_error* kvc_pool_events_pull(kvc_pool* pool, kvc_pool_event* events, size_t capacity, size_t* count);

/** Options of kvc_pool_events_pull_vllm. Published sizes: 32 (0.7). Since 0.7. */
typedef struct kvc_pool_vllm_batch_options {
  uint32_t struct_size;        /**< sizeof(kvc_pool_vllm_batch_options) */
  int32_t int_hashes;          /**< 0 (default): hashes as 32 bytes (msgpack bin, vLLM's default); 1: as vLLM's
                                    64-bit form (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES: the last 8 bytes, big
                                    endian, an unsigned integer) */
  double ts;                   /**< the batch's timestamp (vLLM: time.time(), seconds since the epoch) */
  int64_t data_parallel_rank;  /**< >= 0, or -1 (default): none (nil) */
  uint64_t reserved;           /**< 0 */
} kvc_pool_vllm_batch_options;

#define KVC_POOL_VLLM_BATCH_OPTIONS_INIT {sizeof(kvc_pool_vllm_batch_options), 0, 0.0, -1, 0}
/** Sets `options` to KVC_POOL_VLLM_BATCH_OPTIONS_INIT. Never fails; NULL is ignored. Since 0.7. */
KVC_API void kvc_pool_vllm_batch_options_init(kvc_pool_vllm_batch_options* options);

/**
 * Takes every queued event into one batch in vLLM's wire form: the msgpack
 * bytes vLLM's KV event publisher sends for a `KVEventBatch` (msgspec's
 * encoding of vllm/distributed/kv_events.py's classes, vLLM 0.34): an array
 * [ts, events, data_parallel_rank or nil], each event a map {"type": "BlockStored"
 * | "BlockRemoved" | "AllBlocksCleared", fields...}. A run of STORED events
 * of one chain (same group, adapter and medium, each block's parent the
 * previous block) is one BlockStored with several block_hashes, as vLLM
 * publishes a commit; its parent_block_hash is nil when the run starts a
 * chain (the root is not a block), its token_ids the blocks' tokens, its
 * medium "GPU" for a device pool and "CPU" for a host one, lora_id the
 * sequence's adapter_id (nil for 0) and lora_name its adapter key (nil when
 * none or not UTF-8), group_idx the group. A run of REMOVED events of one
 * group is one BlockRemoved. A run of TIER_STORED events of one tier and
 * group (a tier worker's, with its `events` on) is one BlockStored as vLLM's
 * offloading connector announces an offloaded block: parent nil, token_ids
 * empty, lora nil, medium the tier's name in capitals ("DISK", "REDIS";
 * "TIER" when it is not plain ASCII); TIER_FAILED and TIER_DROPPED events
 * have no vLLM form and are only taken. Router-side consumers (NVIDIA
 * Dynamo, llm-d) read these bytes as they read vLLM's.
 * `buf` (capacity bytes) receives the bytes, `*size` their number, and the
 * events leave the queue. With `buf` NULL (and capacity 0) nothing is taken:
 * `*size` receives the bytes the batch of the queued events takes (call
 * again with a buffer that large). `options` NULL = defaults. An empty queue
 * gives a batch with no events.
 * Errors (nothing taken or written): INVALID_ARGUMENT (NULL pool or size, buf
 * NULL with a capacity, options' struct_size, int_hashes not 0 or 1,
 * data_parallel_rank below -1, a ts that is not finite), OUT_OF_RANGE (the
 * batch does not fit in capacity; the message says how many bytes it takes).
 * Since 0.7.
 */
KVC_API kvc_error* kvc_pool_events_pull_vllm(kvc_pool* pool, const kvc_pool_vllm_batch_options* options, void* buf,
                                             size_t capacity, size_t* size);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_POOL_H */
