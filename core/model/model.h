/*
 * core/model/model.h: the cache model shared by every floor above it.
 *
 * A cache is an ordered list of layers. A layer owns one "store": a K buffer
 * [B, H, cap, Dk] and a V buffer [B, H, cap, Dv] with a live region
 * [start, end) along the seq axis. Views are strided windows onto the store,
 * so update returns without copying history: dynamic layers append at `end`
 * (growing geometrically), sliding layers advance `start` and compact only
 * when the buffer's end is reached (amortized O(1) per token). What a kind
 * does with its store is its kvc_layer_ops table (here) and its descriptor
 * (kind.h); the model never asks which kind a layer is.
 */
#ifndef KVC_CORE_MODEL_MODEL_H
#define KVC_CORE_MODEL_MODEL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include "util/allocator.h"
#include "backend.h"
#include "util/backend_fault.h"
#include "util/error.h"
#include "util/guard.h"
#include "util/tensor.h"
#include "model/kind.h"
#include "kvcache.h"

/* ------------------------------------------------------------------ layers */


/* A region of the store, in physical slots. */
typedef struct kvc_region {
  int64_t begin, end;
} kvc_region;

/*
 * A buffer whose first dimension is the batch, owned by a kind's extension
 * state (quantized codes and scales, recurrent states). Batch operations,
 * splits, stacking and clone move its rows together with the K/V rows, so a
 * kind only has to list them. `ptr` NULL = not allocated (skipped).
 */
typedef struct kvc_row_buffer {
  void* ptr;
  int64_t row_bytes; /* bytes of one batch row */
  int role;          /* KVC_ROWS_*: what memory accounting counts it as */
} kvc_row_buffer;
#define KVC_ROWS_QUANTIZED 1 /* packed codes, scales, zero points */
#define KVC_ROWS_STATE     2 /* conv and recurrent states */
#define KVC_ROWS_SCRATCH   3 /* kind-owned working memory */
#define KVC_ROWS_INDEXER   4 /* indexer keys of the indexed kinds (counted in bytes_reserved only) */

/* The batch operations a kind may refuse (kvc_layer_ops.check_batch). */
typedef enum kvc_batch_op {
  KVC_BATCH_REORDER,
  KVC_BATCH_SELECT,
  KVC_BATCH_REPEAT,
  KVC_BATCH_SPLIT,
  KVC_BATCH_STACK,
} kvc_batch_op;

/* Per-kind behaviour: one table per layer kind file. */
struct kvc_layer_ops {
  /* Kind-specific preconditions of update (overflow, positions). */
  kvc_error* (*check_update)(const char* fn, uint32_t index, const kvc_layer* layer, int64_t n,
                             const kvc_update_options* opts);
  /*
   * Room an update of n tokens needs: the region to keep in place and the
   * number of slots written right after it (0 when the update writes inside
   * the kept region, as static layers do).
   */
  kvc_region (*keep_for_update)(const kvc_layer* layer, int64_t n, const kvc_update_options* opts, int64_t* append);
  /* Writes the tokens and moves counters; returns the region to return. Refuses nothing (copies already checked); a device's failure poisons the cache (backend_fault.h). */
  kvc_region (*apply_update)(const kvc_cache* cache, kvc_layer* layer, const kvc_tensor* key, const kvc_tensor* value, int64_t n,
                             const kvc_update_options* opts);
  int64_t (*seq_length)(const kvc_layer* layer);
  int64_t (*max_length)(const kvc_layer* layer);
  void (*mask_sizes)(const kvc_layer* layer, int64_t q, int64_t* kv_length, int64_t* kv_offset);
  /* NULL = the kind has no crop (static kinds). check_crop decides, apply_crop refuses nothing (as apply_update). */
  kvc_error* (*check_crop)(const kvc_layer* layer, int64_t tokens);
  void (*apply_crop)(const kvc_cache* cache, kvc_layer* layer, int64_t tokens); /* cache: its backend and place */
  void (*reset)(const kvc_cache* cache, kvc_layer* layer);
  /* Slots to allocate at initialization, before the first update of n tokens. */
  int64_t (*initial_capacity)(const kvc_layer* layer, int64_t n);

  /*
   * Kinds with state beyond the K/V store (layer->ext). All optional (NULL):
   *  - prepare_update: phase 2 of an update (after the store has room):
   *    allocate what apply_update will need; may fail with nothing visible
   *    changed (extra capacity is fine);
   *  - row_buffers: the ext buffers whose rows follow batch operations;
   *    returns their number and points *out at an array inside ext (the
   *    batch code replaces `ptr` when it reallocates rows);
   *  - ext_shell: a copy of ext's description and counters with every row
   *    buffer's ptr NULL (for clone, split and stack, which fill the rows);
   *    returns -1 when out of memory;
   *  - ext_free: frees ext and everything it owns (row buffers included);
   *  - check_batch: kind-specific refusal of a batch operation.
   */
  kvc_error* (*prepare_update)(const char* fn, const kvc_cache* cache, kvc_layer* layer, int64_t n,
                               const kvc_update_options* opts);
  int (*row_buffers)(kvc_layer* layer, kvc_row_buffer** out);
  int (*ext_shell)(const kvc_layer* src, kvc_layer* dst);
  void (*ext_free)(const kvc_cache* cache, kvc_layer* layer);
  kvc_error* (*check_batch)(const char* fn, const kvc_layer* layer, uint32_t index, kvc_batch_op op);
  /* Phase-1 checks of a layer's first update, which need the inputs' geometry (NULL = none). */
  kvc_error* (*check_first_update)(const char* fn, uint32_t index, const kvc_layer* layer, const kvc_tensor* key,
                                   const kvc_tensor* value, const kvc_update_options* opts);
  /* Fills the kind's own fields of kvc_layer_info (quantized_length, has_previous_state, ...). */
  void (*fill_info)(const kvc_layer* layer, kvc_layer_info* info);
  /*
   * Also optional, for kinds with ext state:
   *  - check_stack: whether layer `index` of splits[which] (`other`) stacks
   *    with that of splits[0] (`first`): their ext descriptions must agree
   *    (the generic check compares row buffer sizes only);
   *  - sync_ext: recomputes ext's view descriptors after the generic code
   *    changed the layer's batch or row buffers (kvci_layer_sync_view calls it).
   */
  kvc_error* (*check_stack)(const char* fn, const kvc_layer* first, const kvc_layer* other, uint32_t index,
                            size_t which);
  void (*sync_ext)(kvc_layer* layer);
  /*
   * Optional too (the QUANTIZED kind uses them):
   *  - prepare_tokens: the update's room phase, after prepare_update, given
   *    the new tokens: computes what apply_update will write (quantization
   *    can run out of memory, so it happens here); may write store slots past
   *    the stored region, which no view shows; on error nothing visible has
   *    changed;
   *  - set_return: fills views[1] after apply_update (NULL:
   *    kvci_layer_set_return, the returned region of the store);
   *  - memory: bytes the kind holds outside the store and its row buffers
   *    (added to bytes_reserved), and its bytes_quantized (NULL: its
   *    KVC_ROWS_QUANTIZED row buffers in full).
   */
  kvc_error* (*prepare_tokens)(const char* fn, const kvc_cache* cache, kvc_layer* layer, const kvc_tensor* key,
                               const kvc_tensor* value, const kvc_update_options* opts);
  void (*set_return)(kvc_layer* layer, kvc_region r);
  void (*memory)(const kvc_layer* layer, uint64_t* extra_reserved, uint64_t* quantized);
  /*
   * Cache files (core/persist/), for kinds with ext state (both or neither):
   *  - ext_save: ext's description and counters as a record (not its row
   *    buffers' bytes, which the file saves generically, nor working memory);
   *  - ext_load: makes layer->ext from such a record: a shell as ext_shell
   *    makes (every row buffer's ptr NULL, its row_bytes and role set), after
   *    the layer's generic fields were loaded; checks what it reads (error
   *    naming the record, nothing allocated on error).
   */
  void (*ext_save)(const kvc_layer* layer, kvci_record* out);
  kvc_error* (*ext_load)(const char* fn, kvc_layer* layer, kvci_record_reader* in);
};

struct kvc_layer {
  kvc_layer_kind kind;     /* desc->id */
  const kvc_kind* desc;    /* the kind's descriptor (kind.h) */
  const kvc_layer_ops* ops; /* desc->ops, or what the kind's configure chose (a quantized mode's) */
  int64_t window;        /* sliding/chunked */
  int64_t max_cache_len; /* static kinds: configured */
  int64_t slots;         /* static kinds: min(window, max_cache_len) or max_cache_len */

  int initialized;
  kvc_device device;
  kvc_dtype dtype;
  size_t elem;
  int64_t batch, heads, k_dim, v_dim;

  /* Store. */
  void* k;
  void* v;
  int64_t cap;
  int64_t start, end; /* stored region */

  int64_t cum;        /* tokens seen: sliding and static kinds */
  int64_t reserve;    /* dynamic kind: capacity to allocate at initialization (kvc_cache_reserve) */
  int record_past;

  /* The kind's own parameters (kvc_kind.configure), laid out by the kind's file (kvci_layer_params). */
  union {
    int64_t align_;
    void* align_ptr_;
    unsigned char bytes[64];
  } params;

  /* Kind-owned extension state (see kvc_layer_ops), NULL for the plain kinds. */
  void* ext;

  /* Offloading: this layer takes part (set at creation), and where its K/V is now. */
  int offloadable;
  int offloaded;           /* K/V (k, v) live in the host tier */

  /* View descriptors: [0] stored view, [1] last update's return. */
  int64_t shape[2][2][4];   /* [view][k|v][dim] */
  int64_t strides[2][2][4];
  kvc_kv views[2];
};

/* Whether the layer's kind has any of the traits (KVC_TRAIT_*). */
static inline int kvci_layer_is(const kvc_layer* l, uint32_t traits) { return (l->desc->traits & traits) != 0; }
/* The kind's parameter block, as the kind's own struct T (checked to fit by KVC_PARAMS_FIT). */
#define kvci_layer_params(T, l) ((T*)(void*)(l)->params.bytes)
#define KVC_PARAMS_FIT(T) _Static_assert(sizeof(T) <= sizeof(((kvc_layer*)0)->params), #T " must fit kvc_layer.params")
/* ------------------------------------------------------------------- cache */

/*
 * Copies of one update gathered for a single backend call (copy_batch.c):
 * on a GPU the whole step is one kernel launch. Only device backends gather;
 * on the CPU every copy runs when it is issued.
 */
typedef struct kvc_copy_batch {
  int active;       /* between kvci_copy_batch_begin and kvci_copy_batch_flush */
  int32_t count, cap;
  kvc_copy_4d* copies;
} kvc_copy_batch;

struct kvc_cache {
  const kvc_backend* backend;
  kvc_device device;
  kvc_exec exec;          /* the device, the bound stream and the backend's state for them */
  kvc_copy_batch* batch;  /* NULL on the CPU backend */
  int lazy;               /* lazy cache: layers appear as they are updated, built from lazy_spec */
  kvc_layer_options lazy_spec; /* the layer a lazy cache creates (a DYNAMIC layer unless a preset says) */
  kvc_offload offload;    /* KVC_OFFLOAD_NONE, _ALL or _NON_SLIDING (never _DEFAULT here) */
  void* kind_state[KVC_KIND_SLOTS]; /* cache-wide state of a kind, by kind id (kvc_kind's hooks) */
  void* offload_state;    /* offload.c: retired device buffers and the like; NULL when unused */
  /* Layers whose last-returned views (views[1]) the last update handed out: only those may still be live
   * memory outside the stores (ops_alias.c). */
  uint32_t returned_first, returned_count;
  struct kvc_alias_index* alias_index; /* ops_alias.c's index of the memory handed out; NULL until an update */
  int check_alias_index;  /* compare that index with a fresh one on every update (alias_index.c) */
  int64_t reserve;        /* kvc_cache_reserve hint, given to layers a lazy cache creates later */
  uint32_t transformers_release; /* kvc_cache_options.transformers_release (0: the newest) */
  kvc_query_offset_rule query_offset_rule; /* MtpCache / DFlashCache offsets (query_offset.c) */
  int64_t accepted_tokens; /* DFLASH: kvc_cache_set_previous_accepted_tokens */
  uint32_t num_layers;
  uint32_t cap_layers;
  kvc_layer** layers;
  kvci_fault fault;       /* a failed backend call (backend_fault.h): poisoned until kvc_cache_reset */
  kvci_allocator* allocator; /* the caller's, for device-tier stores (allocator.h); NULL: the backend's */
  kvci_guard guard; /* last: kvci_cache_copy_contents copies what comes before it (guard.h) */
};

/* Copies every member of `from` but the guard, which belongs to the handle: other threads may touch it. */
static inline void kvci_cache_copy_contents(kvc_cache* to, const kvc_cache* from) {
  memcpy(to, from, offsetof(kvc_cache, guard));
}

/* The end of an operation on cache c (backend_fault.h): e, or the error of the device failure it hit. */
static inline kvc_error* kvci_cache_result(const char* fn, const kvc_cache* c, kvc_error* e) {
  return kvci_fault_result(fn, (kvci_fault*)&c->fault, c->backend, &kvci_fault_cache, e);
}

/* Gathering the copies of an update (copy_batch.c). Inline where a CPU cache (no batch) has nothing to do:
   an update calls them per step. */
void kvci_copy_batch_grow(const kvc_cache* cache, int64_t copies);
void kvci_copy_batch_issue(const kvc_cache* cache); /* the backend call for what is gathered (count > 0) */
/* Makes room for `copies` descriptors ahead of a write phase; failing only means more backend calls. */
static inline void kvci_copy_batch_reserve(const kvc_cache* cache, int64_t copies) {
  if (cache->batch && copies > cache->batch->cap) kvci_copy_batch_grow(cache, copies);
}
static inline void kvci_copy_batch_begin(const kvc_cache* cache) {
  if (cache->batch) cache->batch->active = 1;
}
/* Issues everything gathered so far, and keeps gathering. */
static inline void kvci_copy_batch_drain(const kvc_cache* cache) {
  if (cache->batch && cache->batch->count) kvci_copy_batch_issue(cache);
}
/* Issues the gathered copies (one backend call) and stops gathering. */
static inline void kvci_copy_batch_flush(const kvc_cache* cache) {
  kvci_copy_batch_drain(cache);
  if (cache->batch) cache->batch->active = 0;
}
/* A copy that joins the batch while one is gathering, or runs now. Never overlapping within itself. */
void kvci_copy_4d_gather(const kvc_cache* cache, void* dst, const int64_t dst_strides[4], const void* src,
                         const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);
static inline void kvci_copy_4d_issue(const kvc_cache* cache, void* dst, const int64_t dst_strides[4],
                                      const void* src, const int64_t src_strides[4], const int64_t shape[4],
                                      size_t elem_size) {
  if (cache->batch && cache->batch->active)
    kvci_copy_4d_gather(cache, dst, dst_strides, src, src_strides, shape, elem_size);
  else
    (void)KVCI_BE(cache, copy_4d, dst, dst_strides, src, src_strides, shape, elem_size);
}

/* Layer lifecycle (layer.c). */
void kvci_layer_free(const kvc_cache* cache, kvc_layer* layer);
/* Allocates the store for the given geometry; the layer stays untouched on failure. */
kvc_error* kvci_layer_initialize(const kvc_cache* cache, kvc_layer* layer, kvc_dtype dtype, int64_t batch,
                                int64_t heads, int64_t k_dim, int64_t v_dim, int64_t n_first);
/* Frees the store and returns the layer to "not initialized". */
void kvci_layer_uninitialize(const kvc_cache* cache, kvc_layer* layer);
/* Makes [keep.begin, keep.end) followed by `extra` slots fit in the store (compacting or growing). */
kvc_error* kvci_layer_reserve(const kvc_cache* cache, kvc_layer* layer, kvc_region keep, int64_t extra);
/* The capacity the store has after kvci_layer_reserve(layer, keep, extra). */
int64_t kvci_layer_reserved_capacity(const kvc_layer* layer, kvc_region keep, int64_t extra);
/* Moves [keep.begin, keep.end) into the new store (k, v, cap) at slot 0, frees the old one and adopts the new. */
void kvci_layer_adopt_store(const kvc_cache* cache, kvc_layer* layer, void* k, void* v, int64_t cap, kvc_region keep);
/*
 * Copies rows src_rows[0..count) of the layer's store, whole capacity (so
 * start and end stay valid), into rows 0..count of a new store (dk, dv) of
 * the same heads, capacity and dims.
 */
void kvci_layer_copy_rows_to(const kvc_cache* cache, const kvc_layer* layer, void* dk, void* dv,
                            const int64_t* src_rows, int64_t count);
/* Recomputes the stored view descriptors after a mutation. */
void kvci_layer_sync_view(kvc_layer* layer);
/* Sets the return view to `r`. */
void kvci_layer_set_return(kvc_layer* layer, kvc_region r);
/* Copies the new tokens into the store at physical slot `slot` (contiguous) or at `positions`. */
void kvci_layer_write(const kvc_cache* cache, kvc_layer* layer, const kvc_tensor* key, const kvc_tensor* value,
                     int64_t slot, const int64_t* positions, int64_t n);
/* Zeroes physical slots [r.begin, r.end). */
void kvci_layer_zero(const kvc_cache* cache, kvc_layer* layer, kvc_region r);
/* A copy of the layer's description and counters without storage or views (NULL when out of memory). */
kvc_layer* kvci_layer_shell(const kvc_layer* src);
/* Deep copy of a layer (same capacity layout compacted to the stored region). */
kvc_error* kvci_layer_clone(const kvc_cache* src_cache, const kvc_layer* src, const kvc_cache* dst_cache,
                           kvc_layer** out);
uint64_t kvci_layer_bytes_reserved(const kvc_layer* layer);

/* The stored region length. */
static inline int64_t kvci_layer_stored(const kvc_layer* l) { return l->initialized ? l->end - l->start : 0; }

/* Zeroed K and V buffers [batch, heads, cap, kd|vd]; 0 on success, -1 (nothing allocated) on failure or overflow. */
int kvci_store_alloc(const kvc_cache* cache, int64_t batch, int64_t heads, int64_t cap, int64_t kd, int64_t vd,
                    size_t elem, void** k, void** v);
/*
 * The same in a given tier: `host` 1 is the host tier of offloading. A store
 * that replaces an offloaded layer's store is allocated with host =
 * layer->offloaded, so operations keep a layer in the tier it is in, and is
 * freed with kvci_store_free in that tier (NULL pointers are skipped).
 */
int kvci_store_alloc_tier(const kvc_cache* cache, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                         int64_t vd, size_t elem, void** k, void** v);
/*
 * The same for the store of a tier move, which copies the stored region into
 * it: in the host tier its other slots may be left unzeroed (version 5's
 * host_alloc, where the backend has it; core/cache/offload.c says why).
 */
int kvci_store_alloc_to_fill(const kvc_cache* cache, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                            int64_t vd, size_t elem, void** k, void** v);
/*
 * The same with no slot zeroed, in either tier (version 9's alloc, version 5's host_alloc, the caller's
 * allocator without the zeroing; alloc_zeroed where the backend has neither): for a store whose every byte the
 * caller writes before it is seen (a restore's or a load's store that the file's tokens fill).
 */
int kvci_store_alloc_unset(const kvc_cache* cache, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                           int64_t vd, size_t elem, void** k, void** v);
void kvci_store_free(const kvc_cache* cache, int host, void* k, void* v);

/* The cache handle (cache_handle.c). */
/* The cache owns `layer` from this call on: on failure it is freed. */
kvc_error* kvci_cache_append_layer(kvc_cache* cache, kvc_layer* layer);
/* The prologue of a query: a valid cache and a non-NULL out. */
kvc_error* kvci_cache_check_query(const char* fn, const kvc_cache* cache, const void* out);
/* The same for a query of one layer or of them all (KVC_ALL_LAYERS): layer must be >= -1. */
kvc_error* kvci_cache_check_query_any(const char* fn, const kvc_cache* cache, int32_t layer, const void* out);
/* A cache handle usable by fn: not NULL, not poisoned. Inline: every call on a cache starts here. */
static inline kvc_error* kvci_cache_check(const char* fn, const kvc_cache* cache) {
  if (!cache) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: cache is NULL", fn);
  return kvci_fault_refusal(fn, &cache->fault, cache->backend, &kvci_fault_cache);
}
kvc_error* kvci_cache_check_layer(const char* fn, const kvc_cache* cache, uint32_t layer);

/* Strides of the store for K (which = 0) or V (which = 1). */
void kvci_store_strides(const kvc_layer* layer, int which, int64_t out[4]);
/*
 * The memory a cache has handed out (every store, the stored views, the
 * views the last update returned) and its layer structs, kept sorted
 * between updates (alias_index.c). refresh brings the index up to date with
 * the layers (-1: out of memory, nothing else changed); overlaps and
 * in_layer answer from the last refresh; free is kvc_cache_destroy's.
 * touch: whoever allocates, frees or moves a store, adds or removes a layer,
 * or points a view outside its layer's store calls it (the index keeps its
 * spans until then). verify: 1 when the kept index differs from a fresh one
 * (a missed touch); refresh aborts then when the cache's check_alias_index
 * is set (KVC_CHECK_ALIAS_INDEX in the environment at creation).
 */
typedef struct kvc_span {
  uintptr_t lo, hi; /* [lo, hi); lo == hi: no bytes */
} kvc_span;
/* The bytes a 4-D tensor's elements cover (strides may be negative); empty when it has none. */
kvc_span kvci_tensor_span(const kvc_tensor* t);
/* The same in two steps, for tensors that share a descriptor: the byte offsets from the base that the elements
 * cover ([lo, hi), lo <= 0), 0 when there are none; then the span at a given base (empty for NULL). */
typedef struct kvc_extent {
  int64_t lo, hi;
} kvc_extent;
int kvci_tensor_extent(const kvc_tensor* t, kvc_extent* out);
kvc_span kvci_span_at(const void* base, kvc_extent x);
int kvci_alias_index_refresh(kvc_cache* cache);
int kvci_alias_index_overlaps(const kvc_cache* cache, kvc_span s);
int kvci_alias_index_in_layer(const kvc_cache* cache, const void* p); /* p inside one of the layer structs */
/* Whether shape or strides lies inside a layer struct; the last pair's answer is kept until the spans change. */
int kvci_alias_index_descriptor_in_layer(const kvc_cache* cache, const void* shape, const void* strides);
/* Whether any of the update inputs (count keys, count values) overlaps memory the cache handed out, or has its
   shape or strides inside a layer struct (ops_alias.c copies them then). */
int kvci_alias_index_inputs_alias(const kvc_cache* cache, uint32_t count, const kvc_tensor* keys,
                                  const kvc_tensor* values);
void kvci_alias_index_free(kvc_cache* cache);
void kvci_alias_index_touch(const kvc_cache* cache);
int kvci_alias_index_verify(const kvc_cache* cache);
/* The device a view of the layer's store reports (the host tier's device type when offloaded). */
kvc_device kvci_tier_device(const kvc_layer* layer);
/* Row buffers (layer_rows.c): the generic handling of kvc_row_buffer. */
int kvci_layer_rows(kvc_layer* layer, kvc_row_buffer** out); /* 0 when the kind has none */
/* Whether the layer holds anything a batch operation must move (tokens or allocated row buffers). */
int kvci_layer_holds_rows(const kvc_layer* layer);
/* Bytes of allocated row buffers with the given role (0 = every role). */
uint64_t kvci_layer_row_bytes(const kvc_layer* layer, int role);
/* Allocates rows for `batch` rows of every row buffer of `dst` (whose ptrs are NULL) and copies src rows
 * src_rows[0..count) into rows 0..count. Returns -1 (nothing left allocated) when out of memory. */
int kvci_layer_rows_copy_new(const kvc_cache* cache, const kvc_layer* src, kvc_layer* dst, const int64_t* src_rows,
                            int64_t count);
/* Frees every allocated row buffer of the layer (sets ptr NULL). */
void kvci_layer_rows_free(const kvc_cache* cache, kvc_layer* layer);

#endif /* KVC_CORE_MODEL_MODEL_H */
