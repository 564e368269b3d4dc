/*
 * cache_snapshot.h: everything a caller can observe of one cache, captured
 * through the public ABI, for the tests that compare a cache with itself
 * (before and after a failed call: the unit tests' snapshot() in
 * test_util.h, the fuzzers) or with another library cache that must behave
 * the same (an offloaded twin, a clone, a stack of its splits). The test
 * programs are one source each, so they include cache_snapshot.c itself.
 *
 * A snapshot holds, for every layer: kvc_layer_info, the stored K/V views
 * (shape, dtype, device and every byte, copied compact), seq_length,
 * max_length, mask_sizes and usable_length for a few query lengths, and for
 * the LINEAR kinds every state pair's conv and recurrent views and
 * has_previous_state, and the indexer keys of the indexed kinds
 * (kvc_cache_indexer_view; its code for every other kind); for the cache: num_layers, max_length of all layers,
 * batch_size, kvc_memory_info, the queries one index past the last layer,
 * and has_previous_state of the last linear layer. Every call's error code
 * is part of it.
 */
#ifndef KVC_TESTS_CACHE_SNAPSHOT_H
#define KVC_TESTS_CACHE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>

#include "kvcache.h"

#define SNAP_MAX_NDIM 8
#define SNAP_NQ 5 /* query lengths of mask_sizes and usable_length: snap_queries[] */
extern const int64_t snap_queries[SNAP_NQ];

/* One tensor view: its descriptor and its elements, read through its strides into a compact copy. */
typedef struct snap_tensor {
  int32_t ndim; /* 0 with no bytes: no view (or a state not allocated) */
  int64_t shape[SNAP_MAX_NDIM];
  kvc_data_type dtype;
  kvc_device device;
  unsigned char* bytes;
  size_t nbytes;
  size_t elem;
} snap_tensor;

typedef struct snap_state {
  kvc_code view_code;
  snap_tensor conv, rec;
  kvc_code prev_code;
  int prev;
} snap_state;

typedef struct snap_layer {
  kvc_code info_code;
  kvc_layer_info info;
  kvc_code view_code;
  snap_tensor key, value;
  kvc_code seq_code;
  int64_t seq;
  int64_t max_length;
  kvc_code mask_code[SNAP_NQ];
  int64_t mask_len[SNAP_NQ], mask_off[SNAP_NQ];
  int64_t usable[SNAP_NQ];
  uint32_t num_states; /* LINEAR kinds: pairs captured */
  snap_state* states;
  kvc_code prev_all_code; /* has_previous_state(layer, -1) */
  int prev_all;
  kvc_code indexer_code; /* kvc_cache_indexer_view */
  snap_tensor indexer;
} snap_layer;

typedef struct cache_snap {
  uint32_t num_layers;
  snap_layer* layers;
  int64_t max_all;
  kvc_code batch_code;
  int64_t batch;
  kvc_code mem_code;
  kvc_memory_info mem;
  int64_t beyond_seq, beyond_max, beyond_mask_len, beyond_mask_off;
  kvc_code prev_last_code; /* has_previous_state(KVC_ALL_LAYERS, -1) */
  int prev_last;
} cache_snap;

/* Whether `kind` is one of the five LINEAR kinds (which have state pairs). */
int snap_kind_is_linear(kvc_layer_kind kind);

/* Copies a view (any strides, up to SNAP_MAX_NDIM dims); a view of ndim 0 or data NULL with elements is
 * captured as ndim 0 (with `bad` set when it claimed elements). */
void snap_tensor_take(const kvc_tensor* t, snap_tensor* out, int* bad);
void snap_tensor_free(snap_tensor* t);
/* 1 when equal (descriptor, and device unless ignore_device, and bytes); else 0 with a description. */
int snap_tensor_equal(const snap_tensor* a, const snap_tensor* b, int ignore_device, char* why, size_t n);

void snap_take(const kvc_cache* c, cache_snap* out);
void snap_free(cache_snap* s);

/* What a comparison leaves out. */
enum {
  SNAP_IGNORE_RESERVED = 1, /* memory.bytes_reserved (and the tier split of it) */
  SNAP_IGNORE_TIERS = 2,    /* info.is_offloaded, memory.bytes_device and bytes_host */
  SNAP_IGNORE_QUANT_STORE = 4 /* QUANTIZED layers' stored views and stored_length, and memory.bytes_used
                                 (what a layer keeps in full precision differs between quantizer modes) */
};
/* 1 when equal under `flags`, else 0 with the first difference in `why`. */
int snap_info_equal(const kvc_layer_info* a, const kvc_layer_info* b, uint32_t layer, unsigned flags, char* why,
                    size_t n);
int snap_equal(const cache_snap* a, const cache_snap* b, unsigned flags, char* why, size_t n);
/* 1 when `c` now equals `before` under `flags` (a refused call left it as it was); else 0 with the first
 * difference printed to stderr. */
int snap_unchanged(const kvc_cache* c, const cache_snap* before, unsigned flags);

#endif /* KVC_TESTS_CACHE_SNAPSHOT_H */
