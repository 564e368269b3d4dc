/*
 * pool_model.h: a deliberately naive model of the paged KV pool
 * (kvcache/pool.h), for the differential fuzzer fuzz_pool.c.
 *
 * Plain fixed arrays, no pointers (a model is copied by assignment, which
 * blocks_needed uses to simulate reserves): per group the blocks with their
 * reference count, cached flag, hash, pinned flag, LRU stamp and contents;
 * per sequence its tokens, committed count, block tables, the content each
 * of its tokens must show in each layer and its recurrent state; the event
 * queue. Contents are 32-bit nonces: the fuzzer writes element d of token
 * row r with codec_bits(nonce, d, ...) (tensor_codec.h), so a nonce names
 * the bytes of a whole row. PM_UNKNOWN rows (never written, or copied from
 * unwritten rows) are not checked; PM_ZERO is an all-zero row.
 *
 * Written from pool.h's comments, not from core/pool/. Where the header
 * leaves a choice open, the model does not depend on it:
 *  - which free block an allocation takes: the model learns the block ids
 *    from the library (the slot mapping of kvc_pool_reserve, the tables
 *    after kvc_pool_match_prefix) and checks only that each one was free, or
 *    cached and evictable in LRU order;
 *  - the order of blocks released by one call (LRU ties): blocks released in
 *    one call share a stamp and may be evicted in any order among
 *    themselves;
 *  - the order of the events one call queues: compared as a multiset.
 * Where the header is silent on a result the fuzzer checks, the choice the
 * model makes is marked "CHOICE:" below with the sentence it reads.
 *
 * Each mutating function first decides the error code the library must
 * return; a non-OK code leaves the model untouched (a failed call changes
 * nothing).
 */
#ifndef KVC_FUZZ_POOL_MODEL_H
#define KVC_FUZZ_POOL_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"
#include "kvcache/pool.h"

#define PM_GROUPS 3
#define PM_LAYERS 3
#define PM_BLOCKS 16 /* per group, the null block included */
#define PM_BS 8      /* largest block size */
#define PM_SEQS 6
#define PM_LEN 40     /* tokens a sequence grows to at most (the fuzzer stops there) */
#define PM_EVENTS 64  /* largest event_capacity the fuzzer asks for */

#define PM_UNKNOWN 0u         /* contents not checked */
#define PM_ZERO 0xFFFFFFFFu   /* all-zero bytes */

typedef struct pm_group {
  kvc_pool_group_kind kind;
  uint32_t bs, nb; /* block size, blocks with the null one */
  int64_t window;
} pm_group;

typedef struct pm_layer {
  uint32_t group;
  uint32_t H, Dk, Dv; /* attention; recurrent: H, Dk = head_dim */
  uint32_t C, K, N;   /* recurrent: conv_dim, conv_kernel, ssm_state_size */
} pm_layer;

typedef struct pm_block {
  int ref;    /* sequences holding it */
  int cached; /* its hash is in the prefix cache */
  int pinned;
  uint64_t stamp; /* the call that last made it unreferenced (LRU order) */
  uint8_t hash[KVC_BLOCK_HASH_SIZE];
  /* Attention: the nonce of each token row in each layer (indexed by the pool's layer). Recurrent
   * checkpoints: row[0][layer] is the state. */
  uint32_t row[PM_BS][PM_LAYERS];
} pm_block;

typedef struct pm_seq {
  int used;
  uint8_t root[KVC_BLOCK_HASH_SIZE];
  uint32_t len, committed;
  int32_t tok[PM_LEN];
  /* Attention groups: block of each block index (0: a window freed it); ceil(len / bs) entries. */
  uint32_t table[PM_GROUPS][PM_LEN];
  uint32_t live[PM_GROUPS];           /* recurrent groups: the live state's slot (0: none yet) */
  uint32_t want[PM_LEN][PM_LAYERS];   /* attention layers: the nonce each token must show */
  uint32_t state[PM_LAYERS];          /* recurrent layers: the nonce of the live state */
} pm_seq;

/* An event the model expects, with the call that queued it. */
typedef struct pm_event {
  kvc_pool_event e;
  uint64_t call;
  int check_block_id; /* 0 for recurrent slots, whose ids the model does not learn */
} pm_event;

typedef struct pool_model {
  kvc_dtype dtype;
  kvc_pool_layout layout;
  int caching;
  uint8_t seed[8];
  uint32_t seed_len;
  uint32_t event_cap;
  uint32_t ng, nl;
  pm_group g[PM_GROUPS];
  pm_layer l[PM_LAYERS];
  pm_block b[PM_GROUPS][PM_BLOCKS];
  pm_seq s[PM_SEQS];
  uint64_t call; /* calls so far: the LRU clock and the events' call tags */
  uint64_t queries[PM_GROUPS], hits[PM_GROUPS], evictions[PM_GROUPS];
  /* The queue: ring of event_cap entries; the next id to give. */
  pm_event q[PM_EVENTS];
  uint32_t q_head, q_count;
  uint64_t next_id;
  uint64_t last_dropped_call; /* the call whose event was dropped last (the queue was full) */
  uint64_t dropped;           /* events dropped so far */
  /* How often rare paths ran, for the fuzzer's statistics (no part of the semantics). */
  uint64_t n_cow_in_place, n_dedup, n_checkpoint_skipped, n_checkpoint_evicted;
  uint64_t n_truncate_window_refused, n_rollback_refused;
} pool_model;

/* Counters the checks compare with kvc_pool_stats. */
typedef struct pm_stats {
  uint64_t num_blocks, free_blocks, cached_blocks, used_blocks, pinned_blocks;
  uint64_t prefix_queries, prefix_hits, evictions;
} pm_stats;

/* ----------------------------------------------------------- queries */

int pm_is_attention(const pool_model* m, uint32_t g);
uint32_t pm_table_len(const pool_model* m, const pm_seq* s, uint32_t g);
void pm_stats_of(const pool_model* m, uint32_t g, pm_stats* out);
/* The first token a sliding or chunked group still needs after `committed` tokens (0 for the others). */
uint64_t pm_window_start(const pm_group* g, uint64_t committed);
/* The first token of `s` whose block a window freed, or -1 (gather's INVALID_STATE). */
int64_t pm_first_missing(const pool_model* m, const pm_seq* s, uint32_t g);

/* ------------------------------------------------------ the operations */

/* The model of a pool made from valid options (the fuzzer validated them). */
void pm_init(pool_model* m, const kvc_pool_options* o);
/* A new empty sequence in slot `i` (with its salt). */
void pm_seq_create(pool_model* m, int i, const void* salt, size_t salt_len);
void pm_seq_destroy(pool_model* m, int i);

/*
 * kvc_pool_match_prefix: the matched length (0 when none) and the code
 * (INVALID_ARGUMENT for a non-empty sequence, OUT_OF_MEMORY without a slot
 * for a recurrent live state). Nothing changes; pm_match_apply then
 * attaches the blocks, checking the library's `tables` (per attention
 * group, the sequence's padded row) against the cached blocks it may hold.
 */
kvc_code pm_match(const pool_model* m, int i, const int32_t* tokens, size_t n, uint64_t* matched);
int pm_match_apply(pool_model* m, int i, const int32_t* tokens, size_t n, uint64_t matched,
                   const int32_t* const* tables, char* why, size_t why_size);

/*
 * What reserving `n` more tokens for sequence `i` takes in each group:
 * new blocks, a copy-on-write copy, a recurrent live slot; and what a
 * window gives back. need[g] = take - give (at least 0), blocks_needed's
 * value.
 */
void pm_reserve_need(const pool_model* m, int i, uint64_t n, uint64_t take[PM_GROUPS], uint64_t give[PM_GROUPS]);
/* kvc_pool_reserve's code; on OUT_OF_MEMORY *oom_group says which group. */
kvc_code pm_reserve(const pool_model* m, int i, const int32_t* tokens, size_t n, uint32_t* oom_group);
/* Applies a successful reserve, learning the blocks from the library's slot mapping (checked). */
int pm_reserve_apply(pool_model* m, int i, const int32_t* tokens, size_t n, const int64_t* slots, char* why,
                     size_t why_size);
/* blocks_needed for several sequences: reserves simulated one after the other on a copy; per group the largest
 * running total of take - give (what reserving them in that order needs at once). */
void pm_blocks_needed(const pool_model* m, const int* seqs, const uint64_t* n, size_t count,
                      uint64_t out[PM_GROUPS]);

/* A write of token `pos` of sequence `i` in `layer` with `nonce` (the fuzzer writes only blocks the
 * sequence holds alone and uncached). */
void pm_write(pool_model* m, int i, uint32_t pos, uint32_t layer, uint32_t nonce);
/* Whether sequence i may write token `pos` of group g (its block is its own, uncached, not null). */
int pm_writable(const pool_model* m, int i, uint32_t g, uint32_t pos);
/* The live recurrent state written in place. */
void pm_state_write(pool_model* m, int i, uint32_t layer, uint32_t nonce);

void pm_commit(pool_model* m, int i);
/* kvc_pool_fork into slot `j`: the code (OUT_OF_MEMORY without recurrent slots), applied when OK. */
kvc_code pm_fork(pool_model* m, int i, int j);
/* kvc_pool_truncate: the code, applied when OK. */
kvc_code pm_truncate(pool_model* m, int i, uint64_t n);
void pm_pin(pool_model* m, int i);
void pm_unpin_all(pool_model* m);
void pm_clear_cache(pool_model* m);

/* Takes up to `cap` queued events, oldest first; returns how many. */
size_t pm_events_pull(pool_model* m, pm_event* out, size_t cap);

/* Starts a call (the LRU clock and the events' tag). */
void pm_begin_call(pool_model* m);

#endif /* KVC_FUZZ_POOL_MODEL_H */
