/*
 * kvcache/tier.h: tiers below a pool's memory, where blocks are kept by
 * their hash: a local directory (kvc_disk_tier_create), a shared Redis or
 * Valkey deployment (kvc_redis_tier_create in kvcache/redis_tier.h; the
 * library speaks RESP itself, so neither needs another library), or any
 * store a program brings through kvc_tier_ops. Since 0.6.
 *
 * A pool with tiers (kvc_pool_add_tier) stores a block's bytes in them when
 * it becomes cached (KVC_TIER_WRITE_ON_COMMIT: other processes and a
 * restarted one find it at once) or when it is evicted from memory
 * (KVC_TIER_WRITE_ON_EVICT: the tier only extends the memory), and
 * kvc_pool_match_prefix continues past the blocks found in memory with the
 * tiers, nearest first: a hit is copied into a fresh block, which then
 * counts as cached in memory. Since 0.7 a pool with a recurrent (Mamba)
 * group stores its checkpoints too (the conv and SSM state of every layer of
 * the group at a block boundary, under the chain hash there: docs/tiers.md),
 * and match_prefix fetches the farthest one a match can end at, so a hybrid
 * model's prefix survives a restart; before 0.7 such a pool left its tiers
 * alone.
 *
 * Keys and values (docs/tiers.md gives the bytes). A block is stored under
 * its key: the pool's model fingerprint (SHA-256 of the layer and group
 * description, dtype, layout and hash seed: two pools share blocks exactly
 * when their fingerprints agree), the group and the block hash (which
 * already covers the tokens, the prefix before them and the salt). The
 * value is the block's K/V of every layer of the group, framed with the key
 * and a CRC-32C (or, in an authenticated tier, an HMAC-SHA256: see
 * KVC_TIER_AUTH_KEY_MIN): a value that does not verify is a miss, never data.
 *
 * A tier is a cache: it may drop anything at any time. Every failure of a
 * tier (I/O error, timeout, dead node, corrupt value) turns into a miss or a
 * skipped store, counted in kvc_tier_stats; the pool's calls never fail
 * because of a tier. Each put_many and get_many the pool makes in a tier
 * returns within that tier's deadline (the Redis tier: call_timeout_ms;
 * the disk tier: local file I/O, no deadline). A pool call makes one such
 * call per tier, group and batch of blocks (a batch is as many frames as fit
 * in the pool's staging memory); a lookup stops at the first batch that is
 * not found whole, so a failing tier costs match_prefix at most one
 * deadline per group.
 */
#ifndef KVCACHE_TIER_H
#define KVCACHE_TIER_H

#include "kvcache/block_hash.h"
#include "kvcache/error.h"
#include "kvcache/pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/** The key of one block in a tier. */
typedef struct kvc_tier_key {
  uint8_t fingerprint[KVC_BLOCK_HASH_SIZE]; /**< the pool's model fingerprint (kvc_pool_fingerprint) */
  uint8_t block_hash[KVC_BLOCK_HASH_SIZE];  /**< the block's hash (docs/block-hash.md) */
  uint32_t group;                           /**< the group the block belongs to */
  uint32_t reserved;                        /**< 0 */
} kvc_tier_key;

/**
 * A tier's operations, for stores a program brings. All calls come from the
 * thread calling the pool or, since 0.7, the tier's key-level functions or
 * the pool's tier worker thread (kvc_pool_start_tier_worker), never two at
 * once: the pool's and the tier's call guards and the tier's lock see to it. Values are
 * opaque, framed bytes (docs/tiers.md): a tier stores and returns them
 * unchanged. Published sizes: 32 (0.6), 40 (0.7: exists_many).
 */
typedef struct kvc_tier_ops {
  uint32_t struct_size; /**< sizeof(kvc_tier_ops) */
  /** Stores `count` values; returns how many were stored (a tier may store fewer, or none). */
  size_t (*put_many)(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                     size_t count);
  /**
   * Looks up `count` keys (a run of consecutive blocks: pipeline them). For each key found, copies its value
   * into values[i] (capacity `capacity` bytes each) and sets sizes[i]; a miss sets sizes[i] to 0. Returns the
   * number of leading keys found (the pool stops at the first miss, so a tier may stop there too). Since 0.7
   * kvc_tier_get_blocks reads sizes[i] of every key: a store that stops at its first miss makes the keys after
   * it misses of that call, so a store that can should answer every key.
   */
  size_t (*get_many)(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                     size_t count);
  /** Frees the tier's context. */
  void (*destroy)(void* ctx);
  /* since 0.7 */
  /**
   * Optional (NULL: kvc_tier_exists answers UNSUPPORTED for this tier). Says for each of `count` keys whether a
   * value is stored under it (found[i] 1 or 0), without reading the values; returns how many were found. A
   * store that cannot tell in time answers 0 for the keys left. Since 0.7.
   */
  size_t (*exists_many)(void* ctx, const kvc_tier_key* keys, uint8_t* found, size_t count);
} kvc_tier_ops;

/** Opaque tier handle: owned by the caller until kvc_pool_add_tier takes it. */
typedef struct kvc_tier kvc_tier;

/** When a pool stores blocks in a tier. */
typedef int32_t kvc_tier_write_policy;
#define KVC_TIER_WRITE_ON_COMMIT 0 /**< when a block becomes cached (shared tiers; survives a restart) */
#define KVC_TIER_WRITE_ON_EVICT  1 /**< when a cached block is evicted from memory (capacity extension) */

/**
 * Wraps a program's store as a tier. `ops` is copied; `ctx` is owned by the
 * tier from then on (ops->destroy(ctx) when the tier is destroyed; also on
 * error). `name` (copied) appears in stats and messages.
 */
KVC_API kvc_error* kvc_tier_create(const kvc_tier_ops* ops, void* ctx, const char* name, kvc_tier** out);

/** Frees a tier not given to a pool. Accepts NULL. */
KVC_API void kvc_tier_destroy(kvc_tier* tier);

/**
 * Authenticated tiers. Since 0.7. Without a key a tier trusts everyone who
 * can write its store (the directory's files, the Redis keys): a value's
 * CRC-32C catches accidents, not a writer who recomputes it, so such a
 * writer can serve any block's K/V to every pool that reads the tier. With a
 * key (auth_key in the tier's options), every value carries an HMAC-SHA256
 * of its key, model fingerprint, sizes and payload under that key, so a
 * value written without the key, or copied under another block's key, is a
 * miss (counted in kvc_tier_stats.corrupt). The key does not hide the K/V
 * (no encryption) and does not stop a replay of an older value of the same
 * block under the same key. A tier with a key refuses values written without
 * one and the other way round; all writers and readers of a store share one
 * key. docs/tiers.md gives the frame and the reasons.
 */
#define KVC_TIER_AUTH_KEY_MIN 16  /**< the shortest key, in bytes (128 bits). Since 0.7. */
#define KVC_TIER_AUTH_KEY_MAX 256 /**< the longest key, in bytes. Since 0.7. */

/**
 * Gives `tier` an authentication key (see above; `key_len` bytes at `key`,
 * copied), or takes its key away (NULL, 0): for a store a program brings
 * (kvc_tier_create), whose values the pool frames like the built-in tiers'.
 * Call it before kvc_pool_add_tier. Errors: INVALID_ARGUMENT (NULL tier, a
 * tier given to a pool already, a key of another length); the tier is then
 * unchanged. Since 0.7.
 */
KVC_API kvc_error* kvc_tier_set_auth_key(kvc_tier* tier, const uint8_t* key, size_t key_len);

/** Options of kvc_disk_tier_create. Published sizes: 32 (0.6), 48 (0.7). */
typedef struct kvc_disk_tier_options {
  uint32_t struct_size;  /**< sizeof(kvc_disk_tier_options) */
  const char* directory; /**< created if missing; borrowed for the call */
  uint64_t max_bytes;    /**< size limit; the least recently used blocks go first; 0 = no limit */
  uint64_t reserved;     /**< 0 */
  /**
   * The tier's authentication key (see 'Authenticated tiers' above), KVC_TIER_AUTH_KEY_MIN to _MAX bytes, copied
   * (borrowed for the call); NULL with auth_key_len 0 = no key. Since 0.7.
   */
  const uint8_t* auth_key;
  size_t auth_key_len; /**< bytes at auth_key. Since 0.7. */
} kvc_disk_tier_options;

#define KVC_DISK_TIER_OPTIONS_INIT {sizeof(kvc_disk_tier_options), NULL, 0, 0, NULL, 0}

/**
 * A tier in a local directory: one file per block, named by its key, written
 * to a temporary name and renamed (a crash never leaves a block that reads
 * back wrong), found again by a restarted process. Several processes may
 * share the directory. Errors: INVALID_ARGUMENT, IO (the directory cannot
 * be created or read).
 */
KVC_API kvc_error* kvc_disk_tier_create(const kvc_disk_tier_options* options, kvc_tier** out);

/** Counters of a tier. Fill struct_size before the call. Published sizes: 64 (0.6), 80 (0.7). */
typedef struct kvc_tier_stats {
  uint32_t struct_size;  /**< set by the caller: sizeof(kvc_tier_stats) */
  uint32_t reserved;
  uint64_t puts;         /**< values stored */
  uint64_t put_failures; /**< stores that failed or were refused (counted, never raised) */
  uint64_t gets;         /**< keys looked up */
  uint64_t hits;         /**< of which were found and verified */
  uint64_t corrupt;      /**< values found that did not verify (a miss): torn, flipped, or unauthenticated */
  uint64_t bytes_written;
  uint64_t bytes_read;
  /* since 0.7 */
  /**
   * Blocks the pool asked its tier worker (kvc_pool_start_tier_worker) to store in this tier. Each ends as a put,
   * a put failure or dropped: once the worker is idle, queued = its puts + put_failures + dropped. Since 0.7.
   */
  uint64_t queued;
  uint64_t dropped; /**< of the queued, never given to the store: the queue was full, or shutdown. Since 0.7. */
} kvc_tier_stats;

/**
 * Fills `*out` (struct_size 64 fills the 0.6 counters, 80 all). Errors: INVALID_ARGUMENT (NULL, struct_size), BUSY (since 0.7:
 * another thread is inside a call on the tier's pool, whose calls move the
 * counters of a given tier, or is giving the tier to a pool).
 */
KVC_API kvc_error* kvc_tier_stats_get(const kvc_tier* tier, kvc_tier_stats* out);

/* ----------------------------------------------------------- on a pool */

/**
 * Gives `tier` to `pool` (which destroys it with itself), after the tiers
 * added before: match_prefix asks them in that order. On error the caller
 * keeps the tier. Errors: INVALID_ARGUMENT (NULL, a tier already given,
 * policy).
 */
KVC_API kvc_error* kvc_pool_add_tier(kvc_pool* pool, kvc_tier* tier, kvc_tier_write_policy policy);

/** A tier of `pool` by index (order of kvc_pool_add_tier), NULL past the end. The pool owns it. */
KVC_API kvc_tier* kvc_pool_tier(const kvc_pool* pool, uint32_t index);

/** The pool's model fingerprint, the first part of every tier key. */
KVC_API kvc_error* kvc_pool_fingerprint(const kvc_pool* pool, uint8_t out[KVC_BLOCK_HASH_SIZE]);

/* ------------------------------------------------- the tier worker */

/*
 * Tiers off the step. Since 0.7. Without a worker a pool calls its tiers
 * inside its own calls: a commit waits for the stores (a Redis round trip
 * per commit), a match for the lookups. With a worker
 * (kvc_pool_start_tier_worker), a thread of the pool makes the stores: a
 * commit (or an eviction, for WRITE_ON_EVICT tiers) copies the blocks' bytes
 * into a staging buffer and queues them, and returns; the worker frames,
 * seals and stores them. The queue is bounded (max_jobs batches, max_bytes
 * staged bytes): a store that does not fit is dropped and counted
 * (kvc_tier_stats.dropped), the caller never waits for the tier. A match can
 * start its lookups early (kvc_pool_prefetch_start) and collect them later
 * (kvc_pool_prefetch_collect), with a deadline of its own.
 *
 * Opt-in, because it changes two promises of the synchronous pool: a block is
 * in the tier only some time after the commit returns (another process may
 * miss it meanwhile), and a store may be dropped under load. A pool that
 * must read its own writes across processes at once keeps the synchronous
 * path. A CPU pool's commit does not even copy: the worker reads the
 * blocks in place, holding a reference to each until its store is done
 * (dropped at the pool's next commit, prefetch or kvc_pool_events_pull), so
 * up to max_bytes of cached blocks stay in use meanwhile: size the pool for
 * them. The worker calls each tier under the tier's lock, so a match's
 * synchronous lookup (kvc_pool_match_prefix) waits at most for the one tier
 * call in flight (bounded by that tier's deadline, e.g. the Redis tier's
 * call_timeout_ms).
 *
 * Shutdown (kvc_pool_stop_tier_worker, kvc_pool_destroy): the queued stores
 * run until drain_timeout_ms has passed, the rest are dropped (counted); the
 * call then waits for the one tier call in flight and joins the thread.
 * Nothing queued outlives the pool.
 */

/** Options of kvc_pool_start_tier_worker. Published sizes: 24 (0.7). Since 0.7. */
typedef struct kvc_tier_worker_options {
  uint32_t struct_size;      /**< sizeof(kvc_tier_worker_options) */
  uint32_t max_jobs;         /**< batches queued at most (a commit's stores of one group are one); 0 = 256 */
  uint64_t max_bytes;        /**< staged bytes queued at most (stores and prefetches); 0 = 256 MiB */
  uint32_t drain_timeout_ms; /**< at kvc_pool_destroy: how long queued stores may still run; then they are dropped */
  uint32_t events;           /**< 1: queue KVC_POOL_EVENT_TIER_* events (kvcache/pool.h); 0: none */
} kvc_tier_worker_options;

#define KVC_TIER_WORKER_OPTIONS_INIT {sizeof(kvc_tier_worker_options), 256, (uint64_t)256 << 20, 1000, 0}
/** Fills `options` with KVC_TIER_WORKER_OPTIONS_INIT. Since 0.7. */
KVC_API void kvc_tier_worker_options_init(kvc_tier_worker_options* options);

/**
 * Starts the pool's tier worker (options NULL: the defaults); from then on its tiers' stores are queued (see
 * 'Tiers off the step'). The pool owns the thread; kvc_pool_destroy stops it. Errors: INVALID_ARGUMENT (NULL
 * pool, struct_size, events not 0 or 1), INVALID_STATE (a worker runs already), OUT_OF_MEMORY, IO (no thread
 * could be started), BUSY. Since 0.7.
 */
KVC_API kvc_error* kvc_pool_start_tier_worker(kvc_pool* pool, const kvc_tier_worker_options* options);

/**
 * Stops the pool's tier worker: queued stores run for up to `drain_timeout_ms`, the rest are dropped
 * (counted); returns after the tier call in flight, if any, returned (its tier's deadline). Prefetches not
 * collected yet find nothing. Without a worker it does nothing. Errors: INVALID_ARGUMENT (NULL), BUSY.
 * Since 0.7.
 */
KVC_API kvc_error* kvc_pool_stop_tier_worker(kvc_pool* pool, uint32_t drain_timeout_ms);

/** What the tier worker did. Fill struct_size before the call. Published sizes: 80 (0.7). Since 0.7. */
typedef struct kvc_tier_worker_stats {
  uint32_t struct_size;          /**< set by the caller: sizeof(kvc_tier_worker_stats) */
  uint32_t running;              /**< 1 while a worker runs */
  uint64_t pending_jobs;         /**< batches queued or in flight now */
  uint64_t pending_bytes;        /**< their staged bytes */
  uint64_t blocks_queued;        /**< blocks whose stores were queued (once, whatever the number of tiers) */
  uint64_t blocks_dropped;       /**< blocks not queued: the queue was full (or no staging memory) */
  uint64_t blocks_abandoned;     /**< queued blocks dropped at shutdown, past drain_timeout_ms */
  uint64_t prefetches;           /**< prefetches started */
  uint64_t prefetches_late;      /**< collected before their lookups were done: nothing of them was used */
  uint64_t prefetches_abandoned; /**< destroyed without a collect, or stopped with the worker */
  uint64_t events_lost;          /**< TIER_* events not queued: more completions than event_capacity since a pull */
} kvc_tier_worker_stats;

/**
 * Fills `*out` with the running worker's counters (since its start; all 0 without a worker: a stopped worker's
 * totals stay in its tiers' kvc_tier_stats). Errors: INVALID_ARGUMENT (NULL, struct_size), BUSY. Since 0.7.
 */
KVC_API kvc_error* kvc_pool_tier_worker_stats(const kvc_pool* pool, kvc_tier_worker_stats* out);

/** A match's tier lookups started early. Owned by the caller until kvc_pool_prefetch_destroy. Since 0.7. */
typedef struct kvc_pool_prefetch kvc_pool_prefetch;

/**
 * Starts the tier lookups a kvc_pool_match_prefix of `tokens` into `sequence` (empty) would make: the chain of
 * every group is hashed now (with the sequence's salt and extra keys), the blocks not in memory now are asked of
 * the tiers by the worker, nearest tier first, and verified there (frame, CRC or HMAC), off the caller's thread.
 * `tokens` is copied. At most 32 MiB of values are looked up per group (a longer prefix is cut there), and a
 * group whose lookup does not fit in the worker's queue (max_jobs, max_bytes) looks up nothing.
 * Without a worker nothing starts: kvc_pool_prefetch_collect then is kvc_pool_match_prefix. A pool whose
 * tiers are skipped (a recurrent group) starts nothing either. The handle must be destroyed before the pool.
 * Errors: as kvc_pool_match_prefix's (INVALID_ARGUMENT naming the argument), OUT_OF_MEMORY, BUSY. Since 0.7.
 */
KVC_API kvc_error* kvc_pool_prefetch_start(kvc_pool_sequence* sequence, const int32_t* tokens, size_t num_tokens,
                                           kvc_pool_prefetch** out);

/**
 * Collects a prefetch into `sequence` (empty, of the same pool; usually the one given to start): waits for its
 * lookups up to `timeout_ms` (0: not at all), copies the blocks found into fresh cached blocks (as a match's
 * tier fetch does: STORED events), then matches as kvc_pool_match_prefix does, except that the tiers are not
 * asked again: what the prefetch did not find in time is computed. A prefetch not done in time is abandoned
 * (counted prefetches_late) and the match uses memory alone. `*matched_tokens` as kvc_pool_match_prefix's. A
 * prefetch is collected once. Errors: INVALID_ARGUMENT (NULL, a sequence that is not empty or of another
 * pool), INVALID_STATE (collected already), OUT_OF_MEMORY, BUSY. Since 0.7.
 */
KVC_API kvc_error* kvc_pool_prefetch_collect(kvc_pool_prefetch* prefetch, kvc_pool_sequence* sequence,
                                             uint32_t timeout_ms, uint64_t* matched_tokens);

/**
 * Frees a prefetch; one not collected is abandoned: its lookups finish or are dropped in the worker, their
 * memory freed there. Accepts NULL. Call it before kvc_pool_destroy of its pool. Since 0.7.
 */
KVC_API void kvc_pool_prefetch_destroy(kvc_pool_prefetch* prefetch);

/* ------------------------------------------------------ blocks by key */

/*
 * Key-level access. Since 0.7. A program (an engine with its own block
 * manager, e.g. vLLM's CPU offloading) may use a tier without a pool: it
 * asks which keys a tier holds, and stores and loads blocks by key, in the
 * same values a pool reads and writes, so a pool of the same model and an
 * engine share a tier.
 *
 * The key: kvc_tier_key, with the model's fingerprint (kvc_pool_fingerprint,
 * or kvc_pool_options_fingerprint without a pool: the namespace of a model,
 * dtype, layout and hash seed), the block's hash (docs/block-hash.md; a
 * pool's chain is kvc_block_hash_chain, salt included) and the group.
 *
 * The bytes: a put takes a block's payload, `payload_size` bytes at
 * payloads[i], and stores it framed as the tier frames a pool's values
 * (docs/tiers.md 'Values': the 96-byte header with the key, payload size
 * and `num_layers`, then the payload, then a CRC-32C or, in an
 * authenticated tier, an HMAC-SHA256); a get verifies the frame of the key
 * asked with the `payload_size` and `num_layers` given, and copies exactly
 * the payload (`payload_size` bytes, the frame stripped) to payloads[i].
 * The payload is opaque to the tier: any `payload_size` bytes round-trip.
 * For a value a pool reads or wrote, it is the block of every layer of the
 * group in the group's layer order, K then V, each in the pool's layout and
 * dtype (docs/tiers.md), and num_layers is the group's layer count.
 *
 * Misses, not errors: a key not stored, a value of another payload size,
 * layer count, key or authentication key, a torn or forged value, a store
 * that fails, a Redis node that is dead or slow (each call returns within
 * the tier's deadline: the Redis tier's call_timeout_ms) are all misses
 * (found[i] 0; a put counts it in put_failures), counted in kvc_tier_stats
 * as a pool's calls count them. Errors are for the caller's mistakes:
 * INVALID_ARGUMENT naming the argument, its value and the rule (NULL
 * arrays, payload_size 0 or above KVC_TIER_PAYLOAD_MAX, num_layers 0, a
 * key's reserved field not 0), OUT_OF_MEMORY (staging buffers), BUSY
 * (another thread is in a call on the tier or on the pool that owns it);
 * after an error nothing was stored and found[] is unchanged. A tier given
 * to a pool may be used too (kvc_pool_tier): its calls then wait for none
 * of the pool's, they are refused with BUSY while one runs.
 *
 * Memory: a get or put stages the framed values of all its keys in host
 * memory (count x (96 + payload_size + 32) bytes), which the tier keeps for
 * its next call when it is at most 64 MiB, and frees with itself.
 */

/** The largest payload of one block by key (1 GiB). Since 0.7. */
#define KVC_TIER_PAYLOAD_MAX 1073741824

/**
 * Whether each of `count` keys has a value in `tier` (found[i] 1 or 0), without fetching values: one
 * pipelined round trip per Redis node (EXISTS), a stat per key on disk. Existence only: a value that then
 * fails verification is a get's miss. `*found_count` (may be NULL) gets the number found. A dead or slow
 * node's keys are 0 within the deadline. count 0 is allowed. Errors: INVALID_ARGUMENT, UNSUPPORTED (a store
 * brought through kvc_tier_ops without exists_many), BUSY. Since 0.7.
 */
KVC_API kvc_error* kvc_tier_exists(kvc_tier* tier, const kvc_tier_key* keys, size_t count, uint8_t* found,
                                   size_t* found_count);

/**
 * Loads `count` blocks by key (see 'Key-level access' above for the bytes): for each key whose value is found
 * and verifies, copies its `payload_size`-byte payload to payloads[i] and sets found[i] 1; otherwise found[i]
 * is 0 and payloads[i] may have been written. One get_many of the tier for all keys (a pipeline per Redis
 * node). `*found_count` (may be NULL) gets the number found. Errors: INVALID_ARGUMENT, OUT_OF_MEMORY, BUSY.
 * Since 0.7.
 */
KVC_API kvc_error* kvc_tier_get_blocks(kvc_tier* tier, const kvc_tier_key* keys, size_t count, size_t payload_size,
                                       uint32_t num_layers, void* const* payloads, uint8_t* found,
                                       size_t* found_count);

/**
 * Stores `count` blocks by key: payloads[i] (`payload_size` bytes, borrowed for the call) framed and sealed
 * for the tier. One put_many of the tier. `*stored` (may be NULL) gets how many the store took (a full disk,
 * a dead node: fewer, counted in put_failures). Errors: INVALID_ARGUMENT, OUT_OF_MEMORY, BUSY. Since 0.7.
 */
KVC_API kvc_error* kvc_tier_put_blocks(kvc_tier* tier, const kvc_tier_key* keys, size_t count, size_t payload_size,
                                       uint32_t num_layers, const void* const* payloads, size_t* stored);

/**
 * The model fingerprint a pool created with `options` would have (kvc_pool_fingerprint), without creating
 * it: no device, no memory for blocks (options.device and the groups' num_blocks are not part of it).
 * Errors: INVALID_ARGUMENT (as kvc_pool_create's, naming the field). Since 0.7.
 */
KVC_API kvc_error* kvc_pool_options_fingerprint(const kvc_pool_options* options, uint8_t out[KVC_BLOCK_HASH_SIZE]);

/**
 * The payload size and layer count of a block of `group` in a pool created with `options`: what
 * kvc_tier_get_blocks and kvc_tier_put_blocks take to share values with such a pool. Errors:
 * INVALID_ARGUMENT (options as kvc_pool_create's, group past num_groups, NULL outputs). Since 0.7.
 */
KVC_API kvc_error* kvc_pool_options_block_payload(const kvc_pool_options* options, uint32_t group,
                                                  size_t* payload_size, uint32_t* num_layers);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_TIER_H */
