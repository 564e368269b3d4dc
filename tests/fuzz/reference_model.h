/*
 * reference_model.h: a deliberately naive model of kvcache's semantics, for
 * the differential fuzzer (fuzz_ops.c).
 *
 * Every layer is a plain [batch][head][position] grid of token ids (0 is a
 * zero slot); every operation rebuilds grids with the obvious loops, written
 * from the specification (docs/semantics.md (the dynamic, dynamic sliding, static and static sliding layer sections, 'Dummy layers', 'Indexed layers', 'Layer types and presets', 'The cache as a whole', 'Encoder-decoder caches'))
 * and from kvcache's documented differences from transformers. It never looks
 * at how the library stores anything: if the two disagree, one of them is
 * wrong, and docs/semantics.md decides which.
 *
 * Each mutating function first decides the error code the library must
 * return; a non-OK code leaves the model untouched (a failed call changes
 * nothing).
 */
#ifndef KVC_REFERENCE_MODEL_H
#define KVC_REFERENCE_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

/* A [B][H][L] grid of token ids: tok[(b * H + h) * L + l]. */
typedef struct ref_grid {
  int64_t B, H, L;
  uint32_t* tok;
} ref_grid;

typedef struct ref_layer {
  kvc_layer_kind kind;
  int64_t window;        /* sliding and chunked kinds */
  int64_t max_cache_len; /* static kinds, as configured */
  int initialized;
  int64_t B, H, Dk, Dv;
  kvc_dtype dtype;
  ref_grid stored; /* dynamic kinds: the kept tokens; static kinds: the whole buffer */
  int64_t cum;     /* tokens seen (sliding and static kinds) */
  int record;      /* dynamic sliding kinds: activate_past_recording was called */
  /* Indexed kinds: the indexer keys, one head ([B][1][position]); B is the layer's batch, which they share
   * with the K/V (and which they fix while the K/V is not initialized). */
  int ix_init;
  kvc_dtype ix_dtype;
  int64_t ix_D;
  ref_grid ix;    /* dynamic: the stored keys; static: the whole buffer of max_cache_len slots */
  int64_t ix_cum; /* static: the indexer's own counter */
} ref_layer;

typedef struct ref_cache {
  int lazy; /* a DynamicCache without config: layers appear on update */
  uint32_t num_layers;
  ref_layer* layers;
} ref_cache;

/* What the model needs to know about one input tensor. */
typedef struct ref_tensor {
  int present; /* 0: the argument is NULL */
  int on_cpu;  /* 0: the descriptor names another device */
  int no_data; /* 1: data is NULL */
  int32_t ndim;
  int64_t shape[4];
  kvc_dtype dtype; /* KVC_DTYPE_UNSET: a DLPack type kvcache cannot store */
} ref_tensor;

/* One layer's update: key, value and the token ids of the new tokens,
 * tok[(b * H + h) * S + s] (keys and values of one token share its id). */
typedef struct ref_input {
  ref_tensor key, value;
  const uint32_t* tok;
} ref_input;

/* Optional cache_position of kvc_update_options. */
typedef struct ref_positions {
  const int64_t* pos; /* NULL: none given */
  uint32_t count;
} ref_positions;

void ref_grid_free(ref_grid* g);

kvc_code ref_cache_create(const kvc_cache_options* options, ref_cache* out);
void ref_cache_free(ref_cache* cache);
void ref_cache_copy(const ref_cache* from, ref_cache* out);

int ref_is_static_kind(kvc_layer_kind kind);
int ref_is_sliding_kind(kvc_layer_kind kind);
int ref_is_indexed_kind(kvc_layer_kind kind);
/* The layer's batch exists: K/V initialized, or indexer keys stored. */
int ref_layer_has_batch(const ref_layer* layer);
int64_t ref_layer_capacity(const ref_layer* layer);
/* Tokens the layer's stored view holds (0 when not initialized). */
int64_t ref_layer_stored_length(const ref_layer* layer);
/* Every layer is of a dynamic kind (a lazy cache without layers counts). */
int ref_cache_all_dynamic(const ref_cache* cache);

/* The code kvc_cache_update would return, without changing anything. */
kvc_code ref_update_check(const ref_cache* cache, uint32_t layer, const ref_input* in,
                          const ref_positions* pos);
/* `ret` (may be NULL) receives the returned tokens; the caller frees it. */
kvc_code ref_update(ref_cache* cache, uint32_t layer, const ref_input* in, const ref_positions* pos,
                    ref_grid* ret);
/* `rets` has n entries (may be NULL). */
kvc_code ref_update_all(ref_cache* cache, uint32_t n, const ref_input* ins, const ref_positions* pos,
                        ref_grid* rets);
/* update_indexer of x ([B, n, D]: x->shape[0..2]) whose keys are the token ids tok[b * n + s]; `ret` (may be
 * NULL) receives the returned keys ([B][1][L]), the caller frees it. */
kvc_code ref_update_indexer_check(const ref_cache* cache, uint32_t layer, const ref_tensor* x);
kvc_code ref_update_indexer(ref_cache* cache, uint32_t layer, const ref_tensor* x, const uint32_t* tok,
                            ref_grid* ret);
kvc_code ref_crop(ref_cache* cache, int64_t tokens);
kvc_code ref_crop_check(const ref_cache* cache, int64_t tokens);
kvc_code ref_activate_past_recording(ref_cache* cache);
kvc_code ref_reorder(ref_cache* cache, const int64_t* idx, size_t count);
kvc_code ref_reorder_check(const ref_cache* cache, const int64_t* idx, size_t count);
kvc_code ref_repeat_interleave(ref_cache* cache, int64_t repeats);
kvc_code ref_repeat_interleave_check(const ref_cache* cache, int64_t repeats);
kvc_code ref_select_indices(ref_cache* cache, const int64_t* idx, size_t count);
kvc_code ref_select_indices_check(const ref_cache* cache, const int64_t* idx, size_t count);
/* On success `out` (capacity entries) receives *count new caches. */
kvc_code ref_batch_split(const ref_cache* cache, int64_t full_batch_size, int64_t split_size,
                         ref_cache* out, size_t capacity, size_t* count);
kvc_code ref_batch_split_check(const ref_cache* cache, int64_t full_batch_size, int64_t split_size,
                               size_t capacity, size_t* count);
kvc_code ref_from_batch_splits(const ref_cache* const* splits, size_t count, ref_cache* out);
kvc_code ref_reset(ref_cache* cache);
kvc_code ref_early_initialization(ref_cache* cache, const kvc_init_options* options);

/* Queries, as the header defines them. ref_seq_length is a layer's own count (kvc_layer_info.seq_length);
 * kvc_cache_seq_length and kvc_cache_mask_sizes redirect a layer without K/V (ref_query_layer). */
int64_t ref_seq_length(const ref_cache* cache, uint32_t layer);
/* The layer a sequence query of `layer` answers for: a dummy layer 0 stands for the first layer with K/V;
 * another dummy layer, or a cache of dummy layers only, is INVALID_ARGUMENT. */
kvc_code ref_query_layer(const ref_cache* cache, uint32_t* layer);
kvc_code ref_cache_seq_length(const ref_cache* cache, uint32_t layer, int64_t* out);
int64_t ref_max_length(const ref_cache* cache, int32_t layer);
int64_t ref_usable_length(const ref_cache* cache, int64_t new_seq_length, uint32_t layer);
kvc_code ref_mask_sizes(const ref_cache* cache, int64_t query_length, uint32_t layer, int64_t* kv_length,
                        int64_t* kv_offset);
kvc_code ref_batch_size(const ref_cache* cache, int64_t* out);

/* ------------------------------------------------------ encoder-decoder */

typedef struct ref_ed {
  ref_cache self, cross;
  uint32_t num_flags;
  uint8_t* updated; /* is_updated per cross layer; beyond num_flags: 0 */
} ref_ed;

/* Takes both caches (moved into `out`). Never fails in the model: the
 * argument checks (NULL, same handle) live in the fuzzer. */
void ref_ed_create(ref_cache* self, ref_cache* cross, ref_ed* out);
void ref_ed_free(ref_ed* ed);
void ref_ed_copy(const ref_ed* from, ref_ed* out);
int ref_ed_is_updated(const ref_ed* ed, uint32_t layer);
/* `in` NULL: key and value NULL. */
kvc_code ref_ed_update_cross(ref_ed* ed, uint32_t layer, const ref_input* in, ref_grid* ret);
kvc_code ref_ed_crop(ref_ed* ed, int64_t tokens);
kvc_code ref_ed_reorder(ref_ed* ed, const int64_t* idx, size_t count);
kvc_code ref_ed_repeat_interleave(ref_ed* ed, int64_t repeats);
kvc_code ref_ed_select_indices(ref_ed* ed, const int64_t* idx, size_t count);
kvc_code ref_ed_batch_split(const ref_ed* ed, int64_t full_batch_size, int64_t split_size, ref_ed* out,
                            size_t capacity, size_t* count);
kvc_code ref_ed_from_batch_splits(const ref_ed* const* splits, size_t count, ref_ed* out);
kvc_code ref_ed_reset(ref_ed* ed);

#endif /* KVC_REFERENCE_MODEL_H */
