/*
 * core/pool/pool_internal.h: the paged KV pool's structures, shared by the
 * files of core/pool/ (kvcache/pool.h is the contract, docs/pool.md the
 * design).
 *
 * Bookkeeping lives on the host: per group an array of block records
 * (reference count, cached flag and hash, pinned flag, list links), a free
 * list, an LRU list of cached blocks nobody references, and an open-addressed
 * map hash -> block (the cache key is (group, hash): each group has its own
 * map). Device bytes are reached only through the backend table. The records
 * and the two lists are a budget (kvci_pool_budget): each group's own, or
 * one that every group of the pool shares (budget.c, docs/pool.md).
 */
#ifndef KVC_CORE_POOL_INTERNAL_H
#define KVC_CORE_POOL_INTERNAL_H

#include <stdint.h>
#include <string.h>
#include <sys/uio.h>

#include "internal.h"
#include "kvcache/tier.h"
#include "pool/extra_keys.h"

#define KVCI_NIL UINT32_MAX

/*
 * The slot mapping row of a group that kvc_pool_write_layer checked last (write_layer.c): a step's layers
 * pass the same mapping, so the layers after the first compare the row with this copy instead of checking
 * it again. Valid while no block of the group was released since (`released` below), which is the only
 * change to the pool that can make an accepted row wrong (a slot in a block nobody holds).
 */
typedef struct kvci_pool_slot_memo {
  int64_t* row;      /* the accepted row, `n` entries */
  int64_t* src;      /* per valid slot: its token (the input row copy_rows reads) */
  int64_t* dst;      /* per valid slot: the slot */
  int64_t* scratch;  /* sorted slots (duplicate check), then the layer's K rows when they are not the slots */
  int64_t* vrows;    /* the layer's V rows when they differ from K's (a page-strided layer with two head dims) */
  size_t n, count, cap;
  uint64_t released; /* the group's `released` when accepted */
  int valid;
} kvci_pool_slot_memo;

/* One block (attention groups) or state slot (recurrent groups). */
typedef struct kvci_pool_block {
  uint32_t ref;     /* sequences holding it */
  uint8_t cached;   /* its hash is in the group's map */
  uint8_t pinned;   /* kept from eviction (cached blocks only) */
  uint32_t group;   /* the group it was taken for (a shared budget's blocks change groups) */
  uint32_t prev;    /* LRU links (cached, ref 0, not pinned) */
  uint32_t next;    /* LRU links, or the free list's next */
  uint8_t hash[KVC_BLOCK_HASH_SIZE];
} kvci_pool_block;

/* Where blocks come from: the free list and the LRU of cached unreferenced blocks, over one array of records. */
typedef struct kvci_pool_budget {
  kvci_pool_block* blocks;       /* num_blocks records, the null block 0 included */
  uint32_t num_blocks;
  uint32_t free_head;            /* a stack: the block freed last is taken first */
  uint32_t lru_head, lru_tail;   /* head: least recently used, evicted first */
  uint64_t n_free, n_lru;        /* n_lru: evictable blocks of every group drawing on it */
} kvci_pool_budget;

typedef struct kvci_pool_group {
  kvc_pool_group_kind kind;
  uint32_t block_size;
  uint32_t num_blocks; /* with the null block 0: the budget's */
  int64_t window;
  kvci_pool_block* blocks;       /* the budget's records (block ids are the budget's) */
  kvci_pool_budget* budget;      /* &own, or the pool's shared one */
  kvci_pool_budget own;
  uint64_t n_lru, n_used, n_pinned; /* this group's blocks only */
  uint64_t prefix_queries, prefix_hits, evictions;
  uint32_t* map;                 /* block ids (0 = empty slot), linear probing */
  uint32_t map_mask;
  uint32_t num_layers;
  uint32_t* layers;              /* the pool's layer indices of the group */
  /* The exported block tables (views.c): one device buffer per format. */
  void* table_buf[2];
  size_t table_bytes[2];
  int64_t table_shape[2][3][2];  /* [format][table|indptr|last_page_len][dims] */
  uint64_t released;             /* blocks whose last reference went away, since creation */
  kvci_pool_slot_memo memo;      /* write_layer.c */
} kvci_pool_group;

typedef struct kvci_pool_layer {
  uint32_t group;
  int64_t heads, kdim, vdim;               /* recurrent and latent: vdim 0 */
  size_t elem;                             /* bytes of a stored element: the pool's dtype's, 1 for fp8 codes */
  kvc_pool_storage storage;
  float scale[2];                          /* fp8: K's and V's (vLLM's k_scale, v_scale); else 1 */
  int64_t conv_dim, conv_kernel, dstate;   /* recurrent only */
  int64_t k_block, v_block;                /* elements per block (recurrent: conv and SSM state per slot; latent:
                                              v_block 0) */
  void* k;                                 /* attention K blocks (latent: the rows); recurrent: conv states */
  void* v;                                 /* attention V blocks (latent: NULL); recurrent: SSM states */
  int64_t stride[2];                       /* [k|v]: elements (of this layer's elem) from one block to the next (a
                                              shared budget: the page, else k_block / v_block) */
  int64_t row_unit[2], rows_per_block[2], rows_per_token[2]; /* [k|v]: a slot as a copy_rows row (write.c) */
  int64_t shape[2][2][4], strides[2][2][4]; /* storage views: [layout][k|v][dim] */
  int64_t state_shape[2][4];               /* recurrent views: conv [1, C, K], SSM [1, H, D, N] */
} kvci_pool_layer;

/* A sequence's state in one group. */
typedef struct kvci_pool_seq_group {
  uint32_t* table;        /* block ids, 0 where a window freed the block; attention groups */
  uint64_t num_blocks;    /* entries of table: ceil(length / block_size) */
  uint64_t table_cap;
  uint64_t window_from;   /* entries before it were given back by the window (all 0) */
  uint8_t (*hashes)[KVC_BLOCK_HASH_SIZE]; /* the chain of the first `hashed` committed full blocks */
  uint64_t hashed;
  uint64_t hash_cap;
  uint32_t live;          /* recurrent: the live state's slot, 0 = none yet */
} kvci_pool_seq_group;

/* What a queued event carries besides its kvc_pool_event (events.c). */
typedef struct kvci_pool_event_more {
  uint8_t has_parent; /* STORED: the block is not its chain's first */
  uint32_t adapter;   /* the storing sequence's adapter (1-based), 0 = none */
} kvci_pool_event_more;

/* An adapter a sequence named: its key (vLLM's lora_name when UTF-8) and number (lora_id). */
typedef struct kvci_pool_adapter {
  uint8_t* key;
  uint32_t key_len;
  int64_t id;
} kvci_pool_adapter;

struct kvc_pool_sequence {
  kvc_pool* pool;
  kvc_pool_sequence* prev;
  kvc_pool_sequence* next;
  uint8_t root[KVC_BLOCK_HASH_SIZE];
  kvci_pool_extra* extra; /* the extra keys its blocks hash with; NULL = none (version 1 hashes) */
  uint32_t adapter;       /* events.c: its adapter in the pool's list (1-based), 0 = none */
  int32_t* tokens;
  uint64_t length, committed, token_cap;
  kvci_pool_seq_group* groups;
  uint64_t batch_mark; /* reserve_batch.c: the batch that listed it last (a sequence listed twice is refused) */
};

struct kvc_pool {
  const kvc_backend* backend;
  kvc_device device;
  kvc_exec exec;
  kvc_dtype dtype;
  size_t elem;
  kvc_pool_layout layout;
  int prefix_caching;
  void* seed;
  size_t seed_len;
  uint32_t num_groups, num_layers;
  kvci_pool_group* groups;
  kvci_pool_layer* layers;
  kvc_pool_sequence* sequences; /* every live sequence, for kvc_pool_destroy */
  /* Events (events.c): a ring of `event_cap`, `event_count` queued from `event_head`. */
  kvc_pool_event* events;
  uint32_t event_cap;
  uint32_t event_head, event_count;
  uint64_t next_event_id;
  kvci_pool_event_more* event_more;  /* per ring entry: what vLLM's events carry besides kvc_pool_event */
  int32_t* event_tokens;             /* per ring entry: a STORED block's tokens, event_token_stride apart */
  uint32_t event_token_stride;       /* the largest block size */
  kvci_pool_adapter* adapters;       /* the adapters sequences named, for events (never shrinks) */
  uint32_t num_adapters, adapters_cap;
  /* The block hash (prefix.c): kvci_block_hash, or kvci_vllm_block_hash for a vLLM-mode pool. */
  kvc_pool_hash_mode hash_mode;
  void (*block_hash)(const uint8_t parent[KVC_BLOCK_HASH_SIZE], const int32_t* tokens, uint32_t n, const void* extra,
                     uint32_t extra_len, uint8_t out[KVC_BLOCK_HASH_SIZE]);
  uint8_t vllm_root[KVC_BLOCK_HASH_SIZE]; /* vLLM mode: NONE_HASH, every chain's parent of block 0 */
  /* Tiers below memory (tiers.c): asked in this order; pending: blocks cached by a commit, stored at its end. */
  struct kvc_tier** tiers;
  kvc_tier_write_policy* tier_policy;
  uint32_t num_tiers, commit_tiers, evict_tiers; /* how many tiers have each policy */
  uint32_t* pending;                             /* (group, block) pairs */
  uint32_t pending_count, pending_cap;
  uint8_t fingerprint[KVC_BLOCK_HASH_SIZE];      /* set by the first kvc_pool_add_tier */
  void* stage_cache;                             /* tier_stage.c: the last staging buffer, kept for the next */
  size_t stage_cache_bytes;
  int stage_cache_busy;                          /* lent out (a fetch that evicts stores while it holds one) */
  struct kvci_tier_worker* tier_worker;           /* tier_worker.c: NULL until kvc_pool_start_tier_worker */
  struct kvc_pool_prefetch* prefetches;          /* tier_prefetch.c: every live prefetch, for kvc_pool_destroy */
  kvci_allocator* allocator;                     /* the caller's, for the layers' K/V (allocator.h); NULL: the backend's */
  kvci_guard guard;                              /* the pool's and its sequences' calls (guard.h) */
  kvci_fault fault; /* a failed device write into the blocks (backend_fault.h): poisoned for good */
  uint64_t batches; /* reserve_batch.c: batch calls so far, the marks of their sequences */
  /* budget.c: one budget for every group (options.shared_budget_bytes), its storage in one buffer of pages. */
  int shared;
  kvci_pool_budget shared_budget;
  void* arena;
  uint64_t page_bytes;
};

static inline int kvci_pool_is_recurrent(const kvci_pool_group* g) { return g->kind == KVC_POOL_GROUP_RECURRENT; }
/* Groups whose sequences keep every block (no window): full attention and latent (MLA) groups. */
static inline int kvci_pool_keeps_all(const kvci_pool_group* g) {
  return g->kind == KVC_POOL_GROUP_FULL || g->kind == KVC_POOL_GROUP_LATENT;
}
/* The buffers of a layer: K and V (conv and SSM state), or K alone (a latent layer). */
static inline int kvci_pool_parts(const kvci_pool_layer* l) { return l->v_block ? 2 : 1; }
static inline int kvci_pool_is_fp8(const kvci_pool_layer* l) { return l->storage == KVC_POOL_STORAGE_FP8_E4M3; }
/* Blocks an allocation can take now: free ones, then evictable cached ones (of every group, in a shared budget). */
static inline uint64_t kvci_pool_available(const kvci_pool_group* g) { return g->budget->n_free + g->budget->n_lru; }
/* Block `block` of layer l's K (kv 0) or V (kv 1) storage. */
static inline char* kvci_pool_block_at(const kvc_pool* p, const kvci_pool_layer* l, int kv, uint32_t block) {
  (void)p;
  return (char*)(kv ? l->v : l->k) + (size_t)(l->stride[kv] * (int64_t)block) * l->elem;
}
/* The copy_rows row (in units of row_unit elements) of `slot` in layer l's K or V, blocks of bs tokens. */
static inline int64_t kvci_pool_slot_row(const kvci_pool_layer* l, int kv, int64_t slot, int64_t bs) {
  return slot / bs * l->rows_per_block[kv] + slot % bs * l->rows_per_token[kv];
}
/* Whether K and V (or two layers) put every slot on the same row: their row arrays can be one. */
static inline int kvci_pool_same_rows(const kvci_pool_layer* a, int ka, const kvci_pool_layer* b, int kb) {
  return a->group == b->group && a->rows_per_block[ka] == b->rows_per_block[kb] &&
         a->rows_per_token[ka] == b->rows_per_token[kb];
}
static inline uint64_t kvci_pool_gcd(uint64_t a, uint64_t b) {
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}
static inline uint64_t kvci_pool_blocks_for(uint64_t tokens, uint32_t block_size) {
  return (tokens + block_size - 1) / block_size;
}

/* block_alloc.c: the life of a block. */
/* Takes a block (ref 1): the free list first, else evicts the LRU head. The caller checked availability. */
uint32_t kvci_pool_block_take(kvc_pool* pool, uint32_t group);
/* One more reference (a match or fork): a cached block leaves the LRU. */
void kvci_pool_block_ref(kvci_pool_group* g, uint32_t block);
/* One reference less: at 0 a cached block joins the LRU's recent end (or stays, pinned), another the free list. */
void kvci_pool_block_release(kvci_pool_group* g, uint32_t block);
/* Whether dropping one reference makes `block` available to allocations (it was the last and it is not pinned). */
static inline int kvci_pool_release_gains(const kvci_pool_group* g, uint32_t block, uint32_t others_released) {
  const kvci_pool_block* b = &g->blocks[block];
  return b->ref == others_released + 1 && !b->pinned;
}
/* The cached block of `hash`, or 0. */
uint32_t kvci_pool_map_find(const kvci_pool_group* g, const uint8_t hash[KVC_BLOCK_HASH_SIZE]);
/* Caches `block` under the hash of s's block `index` in `group` (a STORED event carrying the block's tokens from
   `tokens`, the sequence's token ids from its start); 0 when the hash is cached already (the block stays
   uncached). */
int kvci_pool_block_cache(kvc_pool* pool, uint32_t group, uint32_t block, const kvc_pool_sequence* s,
                          const int32_t* tokens, uint64_t index);
/* The same for block `index` of a hash chain (`chain`, from `root`) that is no sequence's yet: a prefetch's. */
int kvci_pool_block_cache_chain(kvc_pool* pool, uint32_t group, uint32_t block, const uint8_t (*chain)[KVC_BLOCK_HASH_SIZE],
                                const uint8_t* root, uint32_t adapter, const int32_t* tokens, uint64_t index);
/* Uncaches an unreferenced cached block: out of the map and the LRU, onto the free list. No event. */
void kvci_pool_block_evict_quietly(kvci_pool_group* g, uint32_t block);
/* kvc_pool_clear_cache's eviction: every cached unreferenced unpinned block of every group, quietly. */
void kvci_pool_evict_all_quietly(kvc_pool* pool);
/* Moves a cached unreferenced unpinned block to the LRU's recent end (it was just used). */
void kvci_pool_block_touch(kvci_pool_group* g, uint32_t block);
/* Sets or clears the pinned flag, keeping the lists and counters right. */
void kvci_pool_block_set_pinned(kvci_pool_group* g, uint32_t block, int pinned);

/* events.c */
/* Queues an event; `s` (STORED only, else NULL) is the sequence whose block `index` of `group` was stored, its
   tokens read from `tokens`. */
void kvci_pool_event_push(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t block,
                          const uint8_t* hash, const kvc_pool_sequence* s, const int32_t* tokens, uint64_t index);
/* A tier's event (TIER_STORED, TIER_FAILED, TIER_DROPPED): block_id is the tier's index. */
void kvci_pool_event_push_tier(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t tier,
                               const uint8_t* hash, uint32_t num_tokens);
/* The same for a block of a hash chain that is not (yet) a sequence's: its parent (NULL: no parent, no tokens;
   has_parent 0: the chain's root), the adapter number and the block's own block_size tokens. */
void kvci_pool_event_push_chain(kvc_pool* pool, kvc_pool_event_kind kind, uint32_t group, uint32_t block,
                                const uint8_t* hash, const uint8_t* parent, int has_parent, uint32_t adapter,
                                const int32_t* block_tokens);
/* The checks of a pull into the caller's memory: a pool, `count` (`count_what` says what it receives), and `buf`
   unless capacity is 0 (`buf_what`: what to pass instead). The events and the vLLM batch pulls share them. */
kvc_error* kvci_pool_check_pull(const char* fn, const kvc_pool* pool, const void* count, const char* count_name,
                                const char* count_what, const void* buf, const char* buf_name, size_t capacity,
                                const char* buf_what);
/* The ring's side arrays, once the groups are built (-1: out of memory), and their release. */
int kvci_pool_events_init(kvc_pool* pool);
void kvci_pool_events_free(kvc_pool* pool);
/* The 1-based index of the adapter (key, id) in the pool's list, added if new (0: none named; -1: out of memory). */
int64_t kvci_pool_adapter_intern(kvc_pool* pool, const void* key, size_t key_len, int64_t id);

/* write.c: the checks and the row copy jobs kvc_pool_write and kvc_pool_write_layer share. */
/* The slots of attention group gi (row `slots` of n entries): in range, of a held block, each once. `scratch`
   (n entries) receives the valid slots, sorted; `*valid` their number. */
kvc_error* kvci_pool_check_slots(const char* fn, const kvc_pool* p, uint32_t gi, const int64_t* slots, size_t n,
                                 int64_t* scratch, size_t* valid);
/* One K (base "keys"/"key") or V input of `layer` with `index` (-1: none) in its name: [n, heads, dim]. */
kvc_error* kvci_pool_check_input(const char* fn, const kvc_pool* p, const char* base, int64_t index, uint32_t layer,
                                 const kvc_tensor* t, int64_t dim, size_t n);
/* The job copying `count` rows src_rows of input t (K when kv is 0, else V) to dst_rows of the layer. */
void kvci_pool_row_job(kvc_copy_rows_job* j, const kvc_pool* p, const kvci_pool_layer* l, int kv, const kvc_tensor* t,
                       const int64_t* dst_rows, const int64_t* src_rows, size_t count);
/* The scale a row job of `layer`'s K (kv 0) or V writes with: 0 for a plain copy, else an fp8 encode's. */
static inline float kvci_pool_job_scale(const kvci_pool_layer* l, int kv) { return kvci_pool_is_fp8(l) ? l->scale[kv] : 0; }
/* Hands `count` jobs to the backend: one call when it batches them (one launch on a GPU), fp8 jobs (scales[i] not 0;
   scales may be NULL: none) to its fp8 encoder. 0, or the failure. */
int kvci_pool_issue_row_jobs(kvc_pool* pool, const kvc_copy_rows_job* jobs, const float* scales, int32_t count);
/* write_layer.c: frees the memo of every group (kvc_pool_destroy). */
void kvci_pool_slot_memo_free(kvc_pool* pool);

/* The refusal of a call on a poisoned pool, and the end of an operation that may have poisoned it
   (backend_fault.h). */
static inline kvc_error* kvci_pool_refusal(const char* fn, const kvc_pool* p) {
  return kvci_fault_refusal(fn, &p->fault, p->backend, &kvci_fault_pool);
}
static inline kvc_error* kvci_pool_result(const char* fn, kvc_pool* p, kvc_error* e) {
  return kvci_fault_result(fn, &p->fault, p->backend, &kvci_fault_pool, e);
}
/* The prologue of a call that writes the pool's memory: a pool, and not poisoned. */
static inline kvc_error* kvci_pool_check_usable(const char* fn, const kvc_pool* p) {
  if (!p) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", fn);
  return kvci_pool_refusal(fn, p);
}
/* pool.c: the prologue of a query that fills the caller's `out` (a struct `type` of `size` bytes, struct_size
   first): a pool, `out`, and out's struct_size. */
kvc_error* kvci_pool_check_out(const char* fn, const kvc_pool* pool, const void* out, size_t size, const char* type);

/* Device work (views.c, recurrent.c): copies of whole blocks or slots of every layer of a group. */
void kvci_pool_copy_block(kvc_pool* pool, uint32_t group, uint32_t src, uint32_t dst);
/* Zeroes a recurrent slot of every layer of the group (a new sequence's state). */
void kvci_pool_zero_slot(kvc_pool* pool, uint32_t group, uint32_t slot);
/* Issues `count` 4-D copies: one backend call when the backend batches them. A failure is noted in `fault`
   (the pool's own when the copies write its blocks, the caller's when they write elsewhere); returns it. */
int kvci_pool_issue_copies(kvc_pool* pool, const kvc_copy_4d* copies, int32_t count, kvci_fault* fault);

/* sequence.c: kvc_pool_sequence_create and _destroy without the guard, for calls that hold it already. */
kvc_error* kvci_pool_sequence_create(kvc_pool* pool, const kvc_pool_sequence_options* options,
                                     kvc_pool_sequence** out);
void kvci_pool_sequence_free(kvc_pool_sequence* s);
/* sequence.c: growth of a sequence's arrays ahead of a mutation (-1: out of memory, nothing changed). */
int kvci_pool_seq_grow(kvc_pool_sequence* s, uint64_t tokens);
/* Releases the blocks of entries [from, num_blocks) of a group's table, last first, and shortens it. */
void kvci_pool_seq_drop_blocks(kvc_pool_sequence* s, uint32_t group, uint64_t from);
/* Validation shared by the sequence operations: non-NULL, and the token ids. */
kvc_error* kvci_pool_check_tokens(const char* fn, const int32_t* tokens, size_t num_tokens);

/*
 * prefix.c: the chain hashes of blocks [first, first + count) of `tokens` (the sequence's tokens from its start)
 * in blocks of `block_size`, with s's root and extra keys, into out[first..]; out[first - 1] is the parent.
 */
void kvci_pool_chain(kvc_pool_sequence* s, const int32_t* tokens, uint32_t block_size, uint64_t first,
                     uint64_t count, uint8_t (*out)[KVC_BLOCK_HASH_SIZE]);

/* reserve.c: kvc_pool_reserve after its argument checks (the pool not poisoned, the length within bounds):
   OUT_OF_MEMORY with nothing changed, or the tokens appended and their slots written to `slot_mapping`, the
   row of group g starting at g * row_stride. */
kvc_error* kvci_pool_reserve_checked(const char* fn, kvc_pool_sequence* s, const int32_t* tokens, size_t num_tokens,
                                     int64_t* slot_mapping, size_t row_stride);
/* INVALID_ARGUMENT (naming num_tokens, or num_tokens[index] when index >= 0) when n more tokens would take s past
   the most a sequence holds. */
kvc_error* kvci_pool_check_reserve_length(const char* fn, int64_t index, const kvc_pool_sequence* s, uint64_t n);
/* prefix.c: kvc_pool_commit after its checks. */
void kvci_pool_commit_checked(kvc_pool_sequence* s);

/* prefix.c: the least common multiple of the groups' block sizes (a match is a multiple of it), or a value above
   `cap` once it passes `cap`. */
uint64_t kvci_pool_match_step(const kvc_pool* p, uint64_t cap);

/* reserve.c: the first token position a sliding or chunked group still needs when `committed` are computed. */
uint64_t kvci_pool_window_start(const kvci_pool_group* g, uint64_t committed);

/* recurrent.c */
/* After a commit that reached `committed`: a checkpoint of the live state if it is at a block boundary. */
void kvci_pool_checkpoint(kvc_pool* pool, kvc_pool_sequence* s, uint32_t group);
/* Copies the checkpoint slot `from` into the live slot (or zeroes it when `from` is 0). */
void kvci_pool_restore(kvc_pool* pool, uint32_t group, uint32_t from, uint32_t live);

/* tiers.c: the pool's side of its tiers (kvcache/tier.h, docs/tiers.md). */
/* A block a commit cached: stored in the commit tiers by kvci_pool_tiers_flush at the commit's end. */
void kvci_pool_tiers_committed(kvc_pool* pool, uint32_t group, uint32_t block);
void kvci_pool_tiers_flush(kvc_pool* pool);
/* A cached block about to be evicted from memory (its bytes still there): stored in the evict tiers. */
void kvci_pool_tiers_evicting(kvc_pool* pool, uint32_t group, uint32_t block);
/*
 * Continues a match of `matched` tokens (of `limit`) with the tiers: copies the blocks they hold into fresh
 * cached blocks, so that a second longest match finds them in memory. Returns whether any block was added.
 */
int kvci_pool_tiers_fetch(kvc_pool* pool, kvc_pool_sequence* s, const int32_t* tokens, uint64_t limit,
                          uint64_t matched);
/* The tier key of a block of `group` (the pool's fingerprint is set once a tier is added). */
void kvci_pool_tier_key(const kvc_pool* pool, uint32_t group, const uint8_t hash[KVC_BLOCK_HASH_SIZE],
                        kvc_tier_key* key);
/* Blocks of `frame` bytes staged in one batch (bounded host memory). */
size_t kvci_pool_stage_batch(size_t frame);
/* tier_stage.c: a block's bytes of every layer of its group to and from host buffers (0, or -1: failed). */
size_t kvci_pool_block_payload(const kvc_pool* pool, uint32_t group);
void* kvci_pool_stage_alloc(kvc_pool* pool, size_t bytes); /* host memory the backend copies to; NULL: none */
void kvci_pool_stage_free(kvc_pool* pool, void* buf, size_t bytes); /* keeps it for the next call, or frees it */
void kvci_pool_stage_release(kvc_pool* pool);              /* frees the kept buffer (kvc_pool_destroy) */
int kvci_pool_stage_out(kvc_pool* pool, uint32_t group, const uint32_t* blocks, size_t count, uint8_t* const* out);
/* A CPU pool's block as the memory of its payload, in payload order (K, then V unless latent, per layer): at most
   2 x the group's layers parts into `out`; returns how many. */
size_t kvci_pool_block_parts(kvc_pool* pool, uint32_t group, uint32_t block, struct iovec* out);
int kvci_pool_stage_in(kvc_pool* pool, uint32_t group, const uint32_t* blocks, size_t count,
                       const uint8_t* const* in);
/* As stage_out (to_host 1) and stage_in (0) for host memory a device may not reach (malloc'd): on a device the
   bytes pass through a staging buffer. */
int kvci_pool_stage_bounce(kvc_pool* pool, uint32_t group, const uint32_t* blocks, size_t count, uint8_t* const* host,
                           int to_host);
/* tier_fingerprint.c: the pool's model fingerprint (docs/tiers.md). */
void kvci_pool_fingerprint(const kvc_pool* pool, uint8_t out[KVC_BLOCK_HASH_SIZE]);
/*
 * What the fingerprint covers, as a pool holds it (the values it normalised at creation: a value head dim of 0 is
 * the key's; a recurrent layer's conv and state sizes, an attention layer's none), so that a pool's and its
 * options' fingerprints are computed from the same numbers.
 */
typedef struct kvci_model_layer {
  int64_t group, heads, kdim, vdim, conv_dim, conv_kernel, dstate;
  int32_t storage;  /* since 0.7: fp8 layers add their storage and scales (tier_fingerprint.c) */
  float scale[2];
} kvci_model_layer;
typedef struct kvci_model_group {
  int32_t kind;
  uint32_t block_size;
  int64_t window;
} kvci_model_group;
typedef struct kvci_model {
  int32_t dtype, layout;
  uint32_t num_groups, num_layers;
  const void* src; /* a pool or its options: read through the two functions below, nothing is copied */
  kvci_model_group (*group_at)(const void* src, uint32_t g);
  kvci_model_layer (*layer_at)(const void* src, uint32_t i);
  const void* seed;
  uint64_t seed_len;
} kvci_model;
void kvci_model_fingerprint(const kvci_model* m, uint8_t out[KVC_BLOCK_HASH_SIZE]);
/*
 * pool.c: the caller's options as kvc_pool_create reads them (earlier struct sizes, its layers copied into this
 * library's layout: `*layers`, freed by the caller; out->layers points at it) and checks them, `fn` in the message.
 */
kvc_error* kvci_pool_options_read(const char* fn, const kvc_pool_options* in, kvc_pool_options* out,
                                  kvc_pool_layer_options** layers);
/*
 * tier_fetch.c: looks up `count` keys in `tiers`, nearest first (each for what the nearer lacked), under each
 * tier's lock; verifies each value (payload `payload` bytes over num_layers layers) into payloads[i]. Returns the
 * leading run found and verified; counts gets, hits and corrupt values.
 */
size_t kvci_pool_tiers_lookup(kvc_tier* const* tiers, uint32_t num_tiers, uint32_t num_layers,
                              const kvc_tier_key* keys, void* const* values, size_t frame, size_t* sizes,
                              size_t payload, const uint8_t** payloads, size_t count);
/* prefix.c: the checks of a match's arguments (a sequence that is empty, its tokens, a pool not poisoned). */
kvc_error* kvci_pool_check_match(const char* fn, const kvc_pool_sequence* s, const int32_t* tokens,
                                 size_t num_tokens);
/* prefix.c: kvc_pool_match_prefix after its guard; ask_tiers 0: memory alone (a collected prefetch asked them). */
kvc_error* kvci_pool_match_prefix_checked(const char* fn, kvc_pool_sequence* s, const int32_t* tokens,
                                          size_t num_tokens, uint64_t* matched_tokens, int ask_tiers);
/* budget.c: the shared budget (docs/pool.md, 'One budget for all groups'). */
/* The options' checks that concern the budget: shared_budget_bytes against the groups' num_blocks and pages. */
kvc_error* kvci_pool_budget_options_check(const char* fn, const kvc_pool_options* o);
/* Bytes of one block of group g with every layer of it (each layer's K and V aligned as the page lays them). */
uint64_t kvci_pool_group_block_bytes(const kvc_pool_options* o, uint32_t g);
/* Sets up every group's budget (its own, or the shared one) with all blocks free. */
kvc_error* kvci_pool_budgets_build(kvc_pool* p, const kvc_pool_options* o);
void kvci_pool_budgets_free(kvc_pool* p);
/* Places every layer's K and V in the pages of the shared budget's one buffer (already allocated). */
void kvci_pool_budget_place_layers(kvc_pool* p);
/* The strides and row geometry of an attention or recurrent layer once its stride is known. */
void kvci_pool_layer_rows(const kvc_pool* p, kvci_pool_layer* l);
/*
 * Whether taking need(arg, g, &lost) blocks for every group g fits once `lost` of the evictable blocks were
 * referenced (a match attaching cached blocks): each group against its own budget, or the sum against a shared
 * one. NULL, or the OUT_OF_MEMORY error of `fn` saying what needed them (`what`) and the numbers.
 */
typedef uint64_t (*kvci_pool_need_fn)(const void* arg, uint32_t group, uint64_t* lost);
kvc_error* kvci_pool_budget_check(const char* fn, const kvc_pool* p, kvci_pool_need_fn need, const void* arg,
                                  const char* what);
/* Frees the tiers and the pending list (kvc_pool_destroy). */
void kvci_pool_tiers_free(kvc_pool* pool);

#endif /* KVC_CORE_POOL_INTERNAL_H */
