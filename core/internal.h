/*
 * core/internal.h: the cache model shared by the core's files.
 *
 * A cache is an ordered list of layers. A layer owns one "store": a K buffer
 * [B, H, cap, Dk] and a V buffer [B, H, cap, Dv] with a live region
 * [start, end) along the seq axis. Views are strided windows onto the store,
 * so update returns without copying history: dynamic layers append at `end`
 * (growing geometrically), sliding layers advance `start` and compact only
 * when the buffer's end is reached (amortized O(1) per token).
 */
#ifndef KVC_CORE_INTERNAL_H
#define KVC_CORE_INTERNAL_H

#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>

#include "util/allocator.h"
#include "backend.h"
#include "util/backend_fault.h"
#include "util/guard.h"
#include "model/kind.h"
#include "kvcache.h"

/* ------------------------------------------------------------------ errors */

kvc_error* kvci_err(kvc_code code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
kvc_error* kvci_err_oom(void);

/* Struct-size check for option structs: known sizes are `known` only. */
kvc_error* kvci_check_struct_size(const char* fn, const char* arg, uint32_t got, size_t known);

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

/* Kind tables. */
extern const kvc_layer_ops kvc_dynamic_layer_ops;
extern const kvc_layer_ops kvc_dynamic_sliding_layer_ops;
extern const kvc_layer_ops kvc_static_layer_ops;
extern const kvc_layer_ops kvc_static_sliding_layer_ops;
extern const kvc_layer_ops kvc_sink_layer_ops;        /* layer_sink.c */
extern const kvc_layer_ops kvc_linear_layer_ops;      /* layer_linear.c: LINEAR and the four hybrids */
extern const kvc_layer_ops kvc_linear_dynamic_layer_ops;
extern const kvc_layer_ops kvc_linear_dynamic_sliding_layer_ops;
extern const kvc_layer_ops kvc_linear_static_layer_ops;
extern const kvc_layer_ops kvc_linear_static_sliding_layer_ops;

/*
 * The dynamic layer's entries, for kinds whose store behaves like it (tokens appended after the stored ones,
 * any number of them, no maximum, the dynamic crop): a kind's ops table starts with KVC_DYNAMIC_STORE_OPS
 * and adds its apply_update and reset (kvci_dynamic_reset: empty the region).
 */
#define KVC_DYNAMIC_STORE_OPS                                                                              \
  .check_update = kvci_dynamic_check_update, .keep_for_update = kvci_dynamic_keep_for_update,                \
  .seq_length = kvci_dynamic_seq_length, .max_length = kvci_unbounded_max_length,                            \
  .mask_sizes = kvci_dynamic_mask_sizes, .check_crop = kvci_crop_allowed, .apply_crop = kvci_dynamic_apply_crop, \
  .initial_capacity = kvci_dynamic_initial_capacity
void kvci_dynamic_apply_crop(const kvc_cache* cache, kvc_layer* layer, int64_t tokens);
void kvci_dynamic_reset(const kvc_cache* cache, kvc_layer* layer);

/*
 * The K/V entries of a kind that adds state to another kind's store (kvc_kind.store_ops): each calls the same
 * entry of that kind's table (layer_delegate.c). max_length, crop, reset and the ext entries stay the kind's.
 */
kvc_error* kvci_store_check_update(const char* fn, uint32_t index, const kvc_layer* layer, int64_t n,
                                  const kvc_update_options* opts);
kvc_region kvci_store_keep_for_update(const kvc_layer* layer, int64_t n, const kvc_update_options* opts,
                                     int64_t* append);
kvc_region kvci_store_apply_update(const kvc_cache* cache, kvc_layer* layer, const kvc_tensor* key,
                                  const kvc_tensor* value, int64_t n, const kvc_update_options* opts);
int64_t kvci_store_seq_length(const kvc_layer* layer);
void kvci_store_mask_sizes(const kvc_layer* layer, int64_t q, int64_t* kv_length, int64_t* kv_offset);
int64_t kvci_store_initial_capacity(const kvc_layer* layer, int64_t n);
#define KVC_STORE_DELEGATE_OPS                                                                          \
  .check_update = kvci_store_check_update, .keep_for_update = kvci_store_keep_for_update,                 \
  .apply_update = kvci_store_apply_update, .seq_length = kvci_store_seq_length,                           \
  .mask_sizes = kvci_store_mask_sizes, .initial_capacity = kvci_store_initial_capacity

/* Shared by the dynamic kinds. */
kvc_error* kvci_dynamic_check_update(const char* fn, uint32_t index, const kvc_layer* layer, int64_t n,
                                    const kvc_update_options* opts);
kvc_region kvci_dynamic_keep_for_update(const kvc_layer* layer, int64_t n, const kvc_update_options* opts,
                                       int64_t* append);
int64_t kvci_dynamic_seq_length(const kvc_layer* layer);               /* the stored tokens */
void kvci_dynamic_mask_sizes(const kvc_layer* layer, int64_t q, int64_t* kv_length, int64_t* kv_offset);
int64_t kvci_dynamic_initial_capacity(const kvc_layer* layer, int64_t n); /* 64 slots at least, or the reserve */
/*
 * The dynamic crop rule over a layer holding `len` tokens: positive `tokens`
 * is the legacy absolute length, negative the tokens to remove. Returns 1
 * and the tokens to keep when the crop cuts anything.
 */
int kvci_dynamic_crop_keep(const kvc_layer* layer, int64_t len, int64_t tokens, int64_t* keep);
/* For kinds with no maximum length (-1), and kinds that accept any crop. */
int64_t kvci_unbounded_max_length(const kvc_layer* layer);
kvc_error* kvci_crop_allowed(const kvc_layer* layer, int64_t tokens);
/* Shared by the static kinds (layer_static.c): explicit positions must be in [0, limit). */
kvc_error* kvci_check_positions(const char* fn, uint32_t index, const kvc_layer* layer, int64_t n,
                               const kvc_update_options* opts, int64_t limit);
int64_t kvci_static_seq_length(const kvc_layer* layer); /* the counter */
int64_t kvci_static_max_length(const kvc_layer* layer); /* the slots */
void kvci_static_reset(const kvc_cache* cache, kvc_layer* layer);
/* Kinds that hold a window of tokens at most (dynamic sliding, sink): the window. */
int64_t kvci_window_max_length(const kvc_layer* layer);
/* Capacities a kind reports (kvc_kind.capacity): its slots (static kinds), window - 1 (dynamic sliding). */
int64_t kvci_capacity_slots(const kvc_layer* layer);
/* layer_static.c: the counter after crop(tokens), and StaticLayer.is_croppable by release (kvc_kind.is_croppable). */
int64_t kvci_static_crop_counter(int64_t cum, int64_t tokens);
int kvci_static_is_croppable(const kvc_layer* layer, uint32_t release);
int64_t kvci_capacity_window(const kvc_layer* layer);
/*
 * kvc_kind.check_loaded of the store kinds, which the kinds that add state to such a store (hybrids, indexed)
 * call too: the static kinds' store has exactly `slots` slots (layer_static.c); a dynamic sliding store that does
 * not record past states holds window - 1 tokens at most (layer_dynamic_sliding.c).
 */
kvc_error* kvci_static_check_loaded(const char* fn, const char* where, const kvc_layer* layer);
/* The static sliding kinds' store: `slots` slots at least, and exactly `slots` tokens once full. */
kvc_error* kvci_static_sliding_check_loaded(const char* fn, const char* where, const kvc_layer* layer);
kvc_error* kvci_sliding_check_loaded(const char* fn, const char* where, const kvc_layer* layer);
/*
 * Kinds without K/V (layer_linear.c: LINEAR, and DUMMY): seq_length 0 and mask sizes (q, 0), which only
 * kvc_layer_info reaches (the cache-level queries redirect such a layer to an attention layer), and capacity 0.
 */
int64_t kvci_no_kv_seq_length(const kvc_layer* layer);
void kvci_no_kv_mask_sizes(const kvc_layer* layer, int64_t q, int64_t* kv_length, int64_t* kv_offset);
int64_t kvci_no_kv_capacity(const kvc_layer* layer);

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

/* Gathering the copies of an update (copy_batch.c). */
/* Makes room for `copies` descriptors ahead of a write phase; failing only means more backend calls. */
void kvci_copy_batch_reserve(const kvc_cache* cache, int64_t copies);
void kvci_copy_batch_begin(const kvc_cache* cache);
/* Issues the gathered copies (one backend call) and stops gathering. */
void kvci_copy_batch_flush(const kvc_cache* cache);
/* Issues everything gathered so far, and keeps gathering. */
void kvci_copy_batch_drain(const kvc_cache* cache);
/* A copy that joins the batch while one is gathering, or runs now. Never overlapping within itself. */
void kvci_copy_4d_issue(const kvc_cache* cache, void* dst, const int64_t dst_strides[4], const void* src,
                       const int64_t src_strides[4], const int64_t shape[4], size_t elem_size);

/* Layer lifecycle (layer.c). */
kvc_error* kvci_layer_new(const kvc_layer_options* spec, kvc_layer** out);
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
 * host_alloc, where the backend has it; core/offload.c says why).
 */
int kvci_store_alloc_to_fill(const kvc_cache* cache, int host, int64_t batch, int64_t heads, int64_t cap, int64_t kd,
                            int64_t vd, size_t elem, void** k, void** v);
void kvci_store_free(const kvc_cache* cache, int host, void* k, void* v);

/* Strides of the store for K (which = 0) or V (which = 1). */
void kvci_store_strides(const kvc_layer* layer, int which, int64_t out[4]);

/* Cache helpers (cache.c). */
/* An empty cache on `device`, its work issued on `stream` (inherited by clones, splits and stacks). */
kvc_error* kvci_cache_new(const kvc_device* device, void* stream, kvc_cache** out);
/* The cache owns `layer` from this call on: on failure it is freed. */
kvc_error* kvci_cache_append_layer(kvc_cache* cache, kvc_layer* layer);
/* The prologue of a query: a valid cache and a non-NULL out. */
kvc_error* kvci_cache_check_query(const char* fn, const kvc_cache* cache, const void* out);
/* The same for a query of one layer or of them all (KVC_ALL_LAYERS): layer must be >= -1. */
kvc_error* kvci_cache_check_query_any(const char* fn, const kvc_cache* cache, int32_t layer, const void* out);
kvc_error* kvci_cache_check(const char* fn, const kvc_cache* cache);
kvc_error* kvci_cache_check_layer(const char* fn, const kvc_cache* cache, uint32_t layer);
int kvci_cache_all_dynamic(const kvc_cache* cache);
/* An empty cache derived from src (split, stack): its device, stream and settings (kvci_cache_copy_settings). */
kvc_error* kvci_cache_new_like(const kvc_cache* src, kvc_cache** out);
/* Copies what a derived cache (clone, split, stack) inherits: laziness, reserve, lazy layer, offloading, kinds' cache-wide state. */
kvc_error* kvci_cache_copy_settings(const kvc_cache* src, kvc_cache* dst);
/* query_offset.c: the options check, and what the cache's rule adds to the mask sizes of `layer`. */
kvc_error* kvci_query_offset_check(const char* fn, kvc_query_offset_rule rule);
void kvci_query_offset_mask(const kvc_cache* cache, uint32_t layer, int64_t* kv_length, int64_t* kv_offset);

/*
 * Presets (presets.c): the layer list of a preset. `*out` is malloc'd. For a
 * lazy preset, *count is 0 and *lazy_spec the layer it creates on demand.
 * *offload is the resolved offloading mode.
 */
kvc_error* kvci_preset_layers(const kvc_cache_options* options, kvc_layer_options** out, uint32_t* count,
                             int* lazy, kvc_layer_options* lazy_spec, kvc_offload* offload);

/*
 * Option structs that grew (options.c): reads the caller's struct, whose
 * struct_size must be one of the published sizes, into a full-size copy
 * with the newer fields at their defaults. kvc_*_out_size checks an output
 * struct's size and returns how many bytes to write.
 */
kvc_error* kvci_read_layer_options(const char* fn, const char* arg, const kvc_layer_options* in, kvc_layer_options* out);
/* The i-th element of a caller's kvc_layer_options array: its stride is layers[0].struct_size. */
const kvc_layer_options* kvci_layer_options_at(const kvc_layer_options* layers, uint32_t i);
kvc_error* kvci_read_model_config(const char* fn, const char* arg, const kvc_model_config* in, kvc_model_config* out);
kvc_error* kvci_read_cache_options(const char* fn, const char* arg, const kvc_cache_options* in, kvc_cache_options* out);
kvc_error* kvci_read_update_options(const char* fn, const char* arg, const kvc_update_options* in,
                                   kvc_update_options* out);
kvc_error* kvci_read_quant_options(const char* fn, const char* arg, const kvc_quant_options* in, kvc_quant_options* out);
kvc_error* kvci_read_disk_tier_options(const char* fn, const char* arg, const kvc_disk_tier_options* in,
                                      kvc_disk_tier_options* out);
kvc_error* kvci_read_pool_sequence_options(const char* fn, const char* arg, const kvc_pool_sequence_options* in,
                                          kvc_pool_sequence_options* out);
kvc_error* kvci_out_struct_size(const char* fn, const char* arg, uint32_t got, const uint32_t* published, int n,
                               size_t* write);

/* Tensors (tensor.c). */
int kvci_data_type_equal(kvc_data_type a, kvc_data_type b);
/* The error for an input whose dtype kvcache cannot store (not float32, float16 or bfloat16 with lanes 1). */
kvc_error* kvci_err_unstorable(const char* fn, const char* arg, kvc_data_type dtype);
/*
 * A state or indexer input on its own (ops_recurrent.c, ops_indexer.c): `ndim` in [min_ndim, max_ndim], a
 * storable dtype, the cache's device, sizes in [1, 2^31) except dimension `empty_dim` (-1: none), which may be
 * 0 (no new columns or tokens); `layout` names the expected layout in messages.
 */
kvc_error* kvci_check_nd_input(const char* fn, const char* arg, const kvc_tensor* t, const kvc_device* dev,
                               int32_t min_ndim, int32_t max_ndim, const char* layout, int32_t empty_dim);
/* Validates one K or V input tensor on its own (ndim, dtype, device, shape, data). */
kvc_error* kvci_check_input_tensor(const char* fn, const char* base, int64_t index, const kvc_tensor* t,
                                  const kvc_device* device);
/* "base" when index < 0, else "base[index]" formatted into buf. */
const char* kvci_arg_name(char buf[48], const char* base, int64_t index);
/* Element strides of a tensor (computing compact ones when strides is NULL). */
void kvci_tensor_strides(const kvc_tensor* t, int64_t out[4]);
const void* kvci_tensor_base(const kvc_tensor* t);
/* The signed byte offset of `elems` elements: an input's strides may be negative (DLPack allows it), and made
   unsigned they would move a pointer out of its object (undefined even where it wraps to the right address). */
static inline ptrdiff_t kvci_elems_bytes(int64_t elems, size_t elem) { return (ptrdiff_t)elems * (ptrdiff_t)elem; }
const char* kvci_dtype_name(kvc_dtype dtype);

/* Registry (registry.c). */
kvc_error* kvci_backend_for(const char* fn, const kvc_device* device, const kvc_backend** out);

/*
 * Update inputs that alias the cache's own memory (ops_alias.c): `keys` and
 * `values` point at the caller's arrays, or at copies of the tensors that
 * overlap memory the cache handed out views of; free releases the copies.
 */
typedef struct kvc_update_inputs {
  const kvc_tensor* keys;
  const kvc_tensor* values;
  uint32_t count;
  kvc_tensor* copies; /* NULL when nothing aliases */
  void** owned;       /* the copies' buffers (backend memory) */
  int64_t* dims;      /* the copies' shape and strides arrays, 8 per tensor */
} kvc_update_inputs;
kvc_error* kvci_update_inputs_unalias(kvc_cache* cache, uint32_t count, const kvc_tensor* keys,
                                     const kvc_tensor* values, kvc_update_inputs* in);

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
void kvci_alias_index_free(kvc_cache* cache);
void kvci_alias_index_touch(const kvc_cache* cache);
int kvci_alias_index_verify(const kvc_cache* cache);
void kvci_update_inputs_free(const kvc_cache* cache, kvc_update_inputs* in);

/*
 * Encoder-decoder caches (encoder_decoder.c), for files (core/persist/): the
 * two halves and the is_updated flags; one made of two caches (owned by it on
 * success only) and a copy of the flags; new flags (malloc'd, taken over).
 */
void kvci_encdec_parts(const kvc_encoder_decoder_cache* cache, kvc_cache** self, kvc_cache** cross, uint8_t** flags,
                       uint32_t* num_flags);
kvc_error* kvci_encdec_wrap(kvc_cache* self, kvc_cache* cross, const uint8_t* flags, uint32_t num_flags,
                           kvc_encoder_decoder_cache** out);
void kvci_encdec_set_flags(kvc_encoder_decoder_cache* cache, uint8_t* flags, uint32_t num_flags);

/*
 * The guards of handles whose structs are private to their folder (guard.h), NULL for NULL: an
 * encoder-decoder pair's (part 0) or its self- (1) or cross-attention (2) half's, a pool's and the pool of
 * a sequence (its calls go through its pool).
 */
kvci_guard* kvci_encdec_guard(const kvc_encoder_decoder_cache* cache, int part);
kvci_guard* kvci_pool_guard(const kvc_pool* pool);
kvci_guard* kvci_sequence_guard(const kvc_pool_sequence* sequence);
/* Whether a pool sequence was created with extra keys (an adapter key or multimodal items). */
int kvci_pool_sequence_has_extra_keys(const kvc_pool_sequence* sequence);

/* Update engine (ops_update.c), used by create_from_tensors and encoder-decoder. */
kvc_error* kvci_update_layers(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count, const kvc_tensor* keys,
                             const kvc_tensor* values, const kvc_update_options* opts, kvc_kv* out);

/*
 * Offloading (offload.c). kvci_offload_layer_takes_part: whether a new layer of
 * a cache with this mode is offloaded by updates (kinds with K/V that
 * transformers' prefetch does not skip: not its is_linear kinds, not QUANTIZED
 * or SINK; sliding ones only with KVC_OFFLOAD_ALL). kvci_offload_retired_bytes:
 * device bytes kept alive for the views of the last update after its layers
 * were offloaded. kvci_tier_device: the device a view of the layer's store
 * reports (the host tier's device type when offloaded).
 */
int kvci_offload_layer_takes_part(kvc_offload mode, const kvc_layer* layer);
uint64_t kvci_offload_retired_bytes(const kvc_cache* cache);
kvc_device kvci_tier_device(const kvc_layer* layer);
/*
 * The update path (ops_update.c), in transformers' order (docs/semantics.md,
 * 'Offloading'). prepare runs in the room phase after new layers are initialized
 * and before any store grows: it plans the tier moves of the whole call and
 * allocates every buffer they need, sized for the capacities the stores will
 * have once grown (on error it frees them and nothing visible has changed);
 * abort frees them when a later step of the room phase fails. Then, in the
 * write phase: release_retired frees the device copies kept for the previous
 * call's views; before_update(layer) brings the layer to the device tier and
 * prefetches the next offloadable layer; after_update(layer) offloads it.
 * Neither can fail. free_state releases the cache's offload state
 * (kvc_cache_destroy).
 */
kvc_error* kvci_offload_prepare(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count,
                               const kvc_tensor* keys, const kvc_update_options* opts);
void kvci_offload_abort(kvc_cache* cache);
void kvci_offload_release_retired(kvc_cache* cache);
void kvci_offload_before_update(kvc_cache* cache, uint32_t layer);
void kvci_offload_after_update(kvc_cache* cache, uint32_t layer);
void kvci_offload_free_state(kvc_cache* cache);
/*
 * Orders what comes next after the prefetch the last update left running:
 * on a GPU it copies on a side stream, so an operation that reads or writes
 * that layer on the cache's stream (crop, reorder, a view, a clone, ...)
 * must wait for it first. Updates do not call it: their own tier_wait keeps
 * the prefetch overlapping with the caller's work between layers.
 */
void kvci_offload_settle(const kvc_cache* cache);

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

/* Batch helpers (ops_batch.c). */
kvc_error* kvci_check_indices(const char* fn, const char* arg, const int64_t* idx, size_t count, int64_t batch);
/* Asks each layer's kind whether it allows the batch operation `op` (kvc_layer_ops.check_batch). */
kvc_error* kvci_batch_check_kinds(const char* fn, const kvc_cache* cache, kvc_batch_op op);

#endif /* KVC_CORE_INTERNAL_H */
