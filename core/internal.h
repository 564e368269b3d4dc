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
#include <stdint.h>

#include "backend.h"
#include "kvcache.h"

/* ------------------------------------------------------------------ errors */

kvc_error* kvc_err(kvc_code code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
kvc_error* kvc_err_oom(void);

/* Struct-size check for option structs: known sizes are `known` only. */
kvc_error* kvc_check_struct_size(const char* fn, const char* arg, uint32_t got, size_t known);

/* ------------------------------------------------------------------ layers */

typedef struct kvc_layer kvc_layer;


/* A region of the store, in physical slots. */
typedef struct kvc_region {
  int64_t begin, end;
} kvc_region;

/* Per-kind behaviour: one table per layer kind file. */
typedef struct kvc_layer_ops {
  /* Kind-specific preconditions of update (overflow, positions). */
  kvc_error* (*check_update)(const char* fn, uint32_t index, const kvc_layer* layer, int64_t n,
                             const kvc_update_options* opts);
  /*
   * Room an update of n tokens needs: the region to keep in place and the
   * number of slots written right after it (0 when the update writes inside
   * the kept region, as static layers do).
   */
  kvc_region (*keep_for_update)(const kvc_layer* layer, int64_t n, const kvc_update_options* opts, int64_t* append);
  /* Writes the tokens and moves counters; returns the region to return. Cannot fail (copies already checked). */
  kvc_region (*apply_update)(const kvc_cache* cache, kvc_layer* layer, const kvc_tensor* key, const kvc_tensor* value, int64_t n,
                             const kvc_update_options* opts);
  int64_t (*seq_length)(const kvc_layer* layer);
  int64_t (*max_length)(const kvc_layer* layer);
  void (*mask_sizes)(const kvc_layer* layer, int64_t q, int64_t* kv_length, int64_t* kv_offset);
  /* NULL = the kind has no crop (static kinds). check_crop decides, apply_crop cannot fail. */
  kvc_error* (*check_crop)(const kvc_layer* layer, int64_t tokens);
  void (*apply_crop)(kvc_layer* layer, int64_t tokens);
  void (*reset)(const kvc_cache* cache, kvc_layer* layer);
  /* Slots to allocate at initialization, before the first update of n tokens. */
  int64_t (*initial_capacity)(const kvc_layer* layer, int64_t n);
} kvc_layer_ops;

struct kvc_layer {
  kvc_layer_kind kind;
  const kvc_layer_ops* ops;
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

/* Shared by the dynamic kinds. */
kvc_error* kvc_dynamic_check_update(const char* fn, uint32_t index, const kvc_layer* layer, int64_t n,
                                    const kvc_update_options* opts);
kvc_region kvc_dynamic_keep_for_update(const kvc_layer* layer, int64_t n, const kvc_update_options* opts,
                                       int64_t* append);

int kvc_kind_is_valid(kvc_layer_kind kind);
int kvc_kind_is_static(kvc_layer_kind kind);
int kvc_kind_is_sliding(kvc_layer_kind kind);
int kvc_kind_is_chunked(kvc_layer_kind kind);
const char* kvc_kind_name(kvc_layer_kind kind);

/* ------------------------------------------------------------------- cache */

struct kvc_cache {
  const kvc_backend* backend;
  kvc_device device;
  int lazy;               /* lazy DynamicCache: layers appear as they are updated */
  int64_t reserve;        /* kvc_cache_reserve hint, given to layers a lazy cache creates later */
  uint32_t num_layers;
  uint32_t cap_layers;
  kvc_layer** layers;
};

/* Layer lifecycle (layer.c). */
kvc_error* kvc_layer_new(const kvc_layer_options* spec, kvc_layer** out);
void kvc_layer_free(const kvc_cache* cache, kvc_layer* layer);
/* Allocates the store for the given geometry; the layer stays untouched on failure. */
kvc_error* kvc_layer_initialize(const kvc_cache* cache, kvc_layer* layer, kvc_dtype dtype, int64_t batch,
                                int64_t heads, int64_t k_dim, int64_t v_dim, int64_t n_first);
/* Frees the store and returns the layer to "not initialized". */
void kvc_layer_uninitialize(const kvc_cache* cache, kvc_layer* layer);
/* Makes [keep.begin, keep.end) followed by `extra` slots fit in the store (compacting or growing). */
kvc_error* kvc_layer_reserve(const kvc_cache* cache, kvc_layer* layer, kvc_region keep, int64_t extra);
/* Moves [keep.begin, keep.end) into the new store (k, v, cap) at slot 0, frees the old one and adopts the new. */
void kvc_layer_adopt_store(const kvc_cache* cache, kvc_layer* layer, void* k, void* v, int64_t cap, kvc_region keep);
/*
 * Copies rows src_rows[0..count) of the layer's store, whole capacity (so
 * start and end stay valid), into rows 0..count of a new store (dk, dv) of
 * the same heads, capacity and dims.
 */
void kvc_layer_copy_rows_to(const kvc_cache* cache, const kvc_layer* layer, void* dk, void* dv,
                            const int64_t* src_rows, int64_t count);
/* Recomputes the stored view descriptors after a mutation. */
void kvc_layer_sync_view(kvc_layer* layer);
/* Sets the return view to `r`. */
void kvc_layer_set_return(kvc_layer* layer, kvc_region r);
/* Copies the new tokens into the store at physical slot `slot` (contiguous) or at `positions`. */
void kvc_layer_write(const kvc_cache* cache, kvc_layer* layer, const kvc_tensor* key, const kvc_tensor* value,
                     int64_t slot, const int64_t* positions, int64_t n);
/* Zeroes physical slots [r.begin, r.end). */
void kvc_layer_zero(const kvc_cache* cache, kvc_layer* layer, kvc_region r);
/* A copy of the layer's description and counters without storage or views (NULL when out of memory). */
kvc_layer* kvc_layer_shell(const kvc_layer* src);
/* Deep copy of a layer (same capacity layout compacted to the stored region). */
kvc_error* kvc_layer_clone(const kvc_cache* src_cache, const kvc_layer* src, const kvc_cache* dst_cache,
                           kvc_layer** out);
uint64_t kvc_layer_bytes_reserved(const kvc_layer* layer);

/* The stored region length. */
static inline int64_t kvc_layer_stored(const kvc_layer* l) { return l->initialized ? l->end - l->start : 0; }

/* Zeroed K and V buffers [batch, heads, cap, kd|vd]; 0 on success, -1 (nothing allocated) on failure or overflow. */
int kvc_store_alloc(const kvc_cache* cache, int64_t batch, int64_t heads, int64_t cap, int64_t kd, int64_t vd,
                    size_t elem, void** k, void** v);

/* Strides of the store for K (which = 0) or V (which = 1). */
void kvc_store_strides(const kvc_layer* layer, int which, int64_t out[4]);

/* Cache helpers (cache.c). */
kvc_error* kvc_cache_new(const kvc_device* device, kvc_cache** out);
kvc_error* kvc_cache_append_layer(kvc_cache* cache, kvc_layer* layer);
kvc_error* kvc_cache_check(const char* fn, const kvc_cache* cache);
kvc_error* kvc_cache_check_layer(const char* fn, const kvc_cache* cache, uint32_t layer);
int kvc_cache_all_dynamic(const kvc_cache* cache);

/* Presets (presets.c): the layer list of a preset. `*out` is malloc'd. */
kvc_error* kvc_preset_layers(const kvc_cache_options* options, kvc_layer_options** out, uint32_t* count,
                             int* lazy);

/* Tensors (tensor.c). */
int kvc_data_type_equal(kvc_data_type a, kvc_data_type b);
/* Validates one K or V input tensor on its own (ndim, dtype, device, shape, data). */
kvc_error* kvc_check_input_tensor(const char* fn, const char* base, int64_t index, const kvc_tensor* t,
                                  const kvc_device* device);
/* "base" when index < 0, else "base[index]" formatted into buf. */
const char* kvc_arg_name(char buf[48], const char* base, int64_t index);
/* Element strides of a tensor (computing compact ones when strides is NULL). */
void kvc_tensor_strides(const kvc_tensor* t, int64_t out[4]);
const void* kvc_tensor_base(const kvc_tensor* t);
const char* kvc_dtype_name(kvc_dtype dtype);

/* Registry (registry.c). */
kvc_error* kvc_backend_for(const char* fn, const kvc_device* device, const kvc_backend** out);

/* Update engine (ops_update.c), used by create_from_tensors and encoder-decoder. */
kvc_error* kvc_update_layers(const char* fn, kvc_cache* cache, uint32_t first, uint32_t count, const kvc_tensor* keys,
                             const kvc_tensor* values, const kvc_update_options* opts, kvc_kv* out);

/* Batch helpers (ops_batch.c). */
kvc_error* kvc_check_indices(const char* fn, const char* arg, const int64_t* idx, size_t count, int64_t batch);

#endif /* KVC_CORE_INTERNAL_H */
