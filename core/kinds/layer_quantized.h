/*
 * core/kinds/layer_quantized.h: what the files of the QUANTIZED layer kind share
 * (layer_quantized.c: the kind table and the operations both modes have in
 * common; layer_quantized_incremental.c and layer_quantized_transformers.c:
 * the two update timelines of kvcache/quantized.h).
 *
 * The store (core/model/layer.c) always holds what the next update builds on: the
 * first `quantized` tokens are the dequantized values of quantized tokens,
 * the rest is the full-precision residual. The packed groups live in two row
 * buffers (keys, values) so that batch operations, split, stack and clone
 * move them with the store's rows. They are never read back to produce an
 * output: the store already holds their dequantized values.
 *
 * A row of a group buffer is a sequence of units, every row holding the same
 * number. A unit is one token (per-token groups), q_group_size tokens
 * (per-channel groups) or, in transformers mode, every group of the row.
 * A unit is [heads][groups per head] records (transformers mode: the row's
 * groups in the quantizer's order); a record is
 * [scale][zero point][packed codes], the scale and zero point in the
 * layer's dtype, unaligned (read and written with memcpy).
 */
#ifndef KVC_CORE_LAYER_QUANTIZED_H
#define KVC_CORE_LAYER_QUANTIZED_H

#include "backend.h"
#include "kinds/base/base_kinds.h"

enum { KVC_Q_KEYS = 0, KVC_Q_VALUES = 1 };

typedef struct kvc_quant_ext {
  kvc_row_buffer rows[2];   /* packed groups of keys and values (KVC_ROWS_QUANTIZED) */
  int64_t unit_bytes[2];    /* bytes of one unit */
  int64_t units[2];         /* units held, in every row */
  int64_t quantized;        /* tokens at the front of the store holding dequantized values */

  /* Allocated by prepare_update, consumed by apply_update; invisible until then. */
  void* staged[2];          /* a group buffer replacing rows[i] (grown, or a flush's new groups) */
  int64_t staged_row_bytes[2];
  int64_t staged_unit_bytes[2];
  void* scratch;            /* the backend's memory: the quantizer's working memory and staged dequantized values */
  size_t scratch_bytes;

  /* Transformers mode. A quantizing update computes the dequantization of what it quantized into a new store
   * (staged_store, prepare phase), adopts it, and returns the values it quantized from the old store, which it
   * keeps (ret) until the next update: the returned view stays valid until then, as every view does. */
  void* staged_store[2];
  void* ret[2];             /* the old store: K and V, [B, H, ret_cap, D] */
  int64_t ret_cap, ret_start;
  uint64_t ret_bytes;       /* of both */
  int64_t ret_len;          /* tokens the last update returned from ret; -1: it returned the store */

  /* Compact mode: the store holds the residual only. The last update's return lives at byte ret_off of the
   * cache's shared scratch (kvc_quant_scratch). Dequantizing needs no memory of its own (the backend's
   * dequantize_groups takes no scratch), so crop, which cannot fail, can dequantize a block back into the residual. */
  size_t ret_off;
  void* ret_base;           /* the region's address, set by apply once the scratch is final */
} kvc_quant_ext;

/*
 * The working copy shared by the compact layers of a cache: each update
 * gives every compact layer of the call its own region (so update_all's
 * views all stay valid), sized in the room phase (staged when it must grow)
 * and adopted in the write phase. Grows geometrically; never shrinks.
 */
struct kvc_quant_scratch {
  void* buf;
  size_t bytes;
  void* staged;
  size_t staged_bytes;
  size_t used; /* bytes given to the layers of the current call */
};

/* The layer's quantization options (its parameter block). */
static inline const kvc_quant_options* kvci_quant_opts(const kvc_layer* l) {
  return kvci_layer_params(const kvc_quant_options, l);
}

static inline int kvci_quant_compact(const kvc_layer* l) { return kvci_quant_opts(l)->mode == KVC_QUANT_MODE_COMPACT; }

/* Reads quant options (NULL: defaults) into *out and checks them as transformers does, plus our bounds. */
kvc_error* kvci_quant_read_checked(const char* fn, const char* arg, const kvc_quant_options* in,
                                  kvc_quant_options* out);

static inline kvc_quant_ext* kvci_quant_ext_of(const kvc_layer* l) { return (kvc_quant_ext*)l->ext; }

/*
 * The compact layers' shared scratch, the kind's cache-wide state
 * (kvc_kind hooks): begin is prepare_call (creates it, starts the call's
 * regions), bytes is state_bytes, free is free_state.
 */
kvc_error* kvci_quant_scratch_begin(const kvc_call* call, kvc_cache* cache, uint32_t first, uint32_t count);
uint64_t kvci_quant_scratch_bytes(const kvc_cache* cache);
void kvci_quant_scratch_free(kvc_cache* cache);

/* Per-channel groups (quanto axis -1, HQQ axis 0): a channel over tokens; else consecutive head_dim elements. */
int kvci_quant_per_channel(const kvc_quant_options* q, int which);
int kvci_quant_axis(const kvc_quant_options* q, int which);
/* The quantizer's description (backend table) for the layer's dtype and the keys' (0) or values' (1) axis. */
kvc_quant_spec kvci_quant_spec(const kvc_layer* l, int which);
/* Bytes of one group's record: scale, zero point and packed codes. */
int64_t kvci_quant_record_bytes(const kvc_layer* l, int64_t group);

/*
 * The error of a quantizer entry of the backend table for layers of `what`
 * ("quantized", "fp8 quantized"): rc 0, the backend lacks the entry (NULL);
 * KVC_BACKEND_UNSUPPORTED, it refused the job: both UNSUPPORTED, naming the
 * operation and the backend; any other rc: out of (device) memory.
 */
kvc_error* kvci_quant_unsupported(const char* fn, const kvc_cache* c, const char* what, const char* op, int rc);

/* Element (b, h, s, d) of the store's keys (which 0) or values (1): s is a physical slot. */
static inline int64_t kvci_quant_store_index(const kvc_layer* l, int which, int64_t b, int64_t h, int64_t s,
                                            int64_t d) {
  int64_t dim = which ? l->v_dim : l->k_dim;
  return ((b * l->heads + h) * l->cap + s) * dim + d;
}

/*
 * Lays out a scratch block: the part of `bytes` bytes at *at (16-byte
 * aligned), and *at moves past it. With base NULL it only measures (the
 * first pass of a layout) and returns NULL.
 */
static inline void* kvci_quant_take(char* base, size_t* at, size_t bytes) {
  void* p = base ? (void*)(base + *at) : NULL;
  *at = (*at + bytes + 15) & ~(size_t)15;
  return p;
}

/*
 * Points the returned view's keys (which 0) or values (1) at `len` tokens
 * of a [B, H, cap, D] buffer other than the store: the modes whose return
 * is a copy of their own.
 */
void kvci_quant_set_view(kvc_layer* l, int which, void* data, uint64_t byte_offset, int64_t len, int64_t cap);

/* Scratch of at least `bytes` in ext, the backend's memory (prepare phase); -1 when out of memory. */
int kvci_quant_reserve_scratch(const kvc_cache* c, kvc_quant_ext* x, size_t bytes);
/* Stages a zeroed group buffer of `row_bytes` per row for tensor `which` (prepare phase); -1 when out of memory. */
int kvci_quant_stage_rows(const kvc_cache* c, const kvc_layer* l, kvc_quant_ext* x, int which, int64_t row_bytes,
                         int64_t unit_bytes);
/* Frees what prepare_tokens staged and apply did not adopt (apply phase or a later prepare), and large scratch. */
void kvci_quant_release_staged(const kvc_cache* c, kvc_quant_ext* x);
/* Frees the scratch when it is large (a prefill's or a flush's). */
void kvci_quant_trim_scratch(const kvc_cache* c, kvc_quant_ext* x);
/* Frees the store the last quantizing update returned from (transformers mode). */
void kvci_quant_drop_returned(const kvc_cache* c, kvc_quant_ext* x);
/* Frees the group buffers and forgets their units. */
void kvci_quant_drop_groups(const kvc_cache* c, kvc_quant_ext* x);

/*
 * The modes' update timelines (incremental below; compact and transformers
 * after it). check and apply are the mode's ops-table entries. check: the
 * kind's preconditions of an update (const; none for an uninitialized
 * layer, whose first update check_first_update checks). prepare: the room
 * phase, once the store has room for the n new tokens: writes them past the
 * stored region, quantizes and stages everything apply will adopt (may
 * fail, changing nothing visible). apply: the write phase (cannot fail).
 * crop: after the store was cut to `keep` tokens. Each phase has one signature, whatever the mode.
 */
typedef kvc_error* kvci_quant_check_fn(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                       const kvc_update_options* o);
typedef kvc_error* kvci_quant_prepare_fn(const char* fn, const kvc_cache* c, kvc_layer* l, uint32_t index,
                                         const kvc_tensor* key, const kvc_tensor* value, int64_t n);
typedef kvc_region kvci_quant_apply_fn(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v,
                                       int64_t n, const kvc_update_options* o);
kvci_quant_check_fn kvci_quant_incremental_check;
kvci_quant_prepare_fn kvci_quant_incremental_prepare;
kvci_quant_apply_fn kvci_quant_incremental_apply;
void kvci_quant_incremental_crop(kvc_layer* l, int64_t keep);
/* Tokens of one block (incremental and compact modes): q_group_size when either tensor has per-channel groups. */
int64_t kvci_quant_block_tokens(const kvc_layer* l);
int64_t kvci_quant_unit_tokens(const kvc_layer* l, int which);

/*
 * Compact mode (layer_quantized_compact.c): the incremental timeline without
 * the dequantized history. prepare runs the incremental prepare, then claims
 * the layer's region of the shared scratch; apply adopts the grown scratch,
 * drops the quantized tokens from the store and dequantizes the history and
 * the residual into the region; set_return points the view at it. crop: the
 * kept tokens of a block it cuts into go back to the store as the residual.
 */
kvci_quant_prepare_fn kvci_quant_compact_prepare;
kvci_quant_apply_fn kvci_quant_compact_apply;
void kvci_quant_compact_set_return(kvc_layer* l, kvc_region r);
void kvci_quant_compact_crop(const kvc_cache* c, kvc_layer* l, int64_t keep);

/*
 * BaseQuantizedLayer.is_croppable: False since 5.24 (5.23 inherited
 * DynamicLayer's True); the kvc_kind.is_croppable of both quantized kinds.
 */
int kvci_quant_is_croppable(const kvc_layer* layer, uint32_t release);

/* Transformers mode (layer_quantized_transformers.c): transformers' own timeline, requantizing the whole tensor. */
/*
 * Files (kvc_kind.check_loaded by mode): the groups a layer read from a file holds against what the mode
 * allocates for its quantized tokens: incremental and compact keep quantized / unit_tokens units of a fixed size
 * in a buffer that holds them; transformers keeps the groups of its last quantization, when they lie within rows.
 */
kvc_error* kvci_quant_incremental_check_loaded(const char* fn, const char* where, const kvc_layer* l);
kvc_error* kvci_quant_transformers_check_loaded(const char* fn, const char* where, const kvc_layer* l);
kvci_quant_check_fn kvci_quant_transformers_check;
kvci_quant_prepare_fn kvci_quant_transformers_prepare;
kvci_quant_apply_fn kvci_quant_transformers_apply;
void kvci_quant_transformers_crop(kvc_layer* l, int64_t keep);
/* Points the returned view at the last quantizing update's own copy (transformers mode). */
void kvci_quant_transformers_set_return(kvc_layer* l, kvc_region r);

#endif /* KVC_CORE_LAYER_QUANTIZED_H */
