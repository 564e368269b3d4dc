/*
 * core/kinds/linear_state.h: the conv and recurrent states of the LINEAR kinds
 * (docs/semantics.md, 'Linear-attention layers'), shared by layer_linear.c (the kind tables) and ops_recurrent.c
 * (the entry points); linear_state.c implements the storage.
 *
 * A layer's states live in its extension state (layer->ext): num_states
 * pairs, each a conv state and a recurrent state, each one row buffer
 * (KVC_ROWS_STATE) so that batch operations, split, stack and clone move them
 * with no code of their own.
 *
 * The conv state [batch, channels, K] lives in a buffer of `cap` time slots
 * (each slot holding all channels of a batch row together, so a column is
 * contiguous), with a live region [begin, end) along time, the way
 * attention layers keep K/V: an update appends its columns after the region
 * and returns [begin, end + n) (the stored columns followed by the new ones,
 * transformers' `full`) without copying history; the region then keeps its
 * last K columns. The region reaches the buffer's end once every cap - K
 * columns and is moved back to slot 0 then, so steady decoding copies O(1)
 * columns per step and allocates nothing. With past recording the region
 * grows (the buffer doubles when full) until crop trims it.
 */
#ifndef KVC_CORE_LINEAR_STATE_H
#define KVC_CORE_LINEAR_STATE_H

#include "kinds/base/base_kinds.h"

#define KVC_LINEAR_MAX_STATES 64
#define KVC_LINEAR_MAX_REC_DIMS 6

/* One state pair; a state whose dtype is KVC_DTYPE_UNSET is not allocated. */
typedef struct kvc_linear_pair {
  /* conv state: [batch, cap, channels] in memory (viewed as [batch, channels, time]), live region [begin, end) */
  kvc_dtype conv_dtype;
  int32_t has_previous; /* the first conv update happened (transformers' has_previous_state[i]) */
  int64_t channels;
  int64_t kernel; /* K */
  int64_t cap, begin, end;
  /* recurrent state: compact, batch first */
  kvc_dtype rec_dtype;
  int32_t rec_ndim;
  int64_t rec_shape[KVC_LINEAR_MAX_REC_DIMS];
  /* view descriptors (kept in sync with the state and the layer's batch) */
  int64_t conv_shape[3], conv_strides[3];
  int64_t rec_strides[KVC_LINEAR_MAX_REC_DIMS];
} kvc_linear_pair;

/*
 * The extension state: this header, then num_states pairs, then 2 *
 * num_states row buffers (conv state of pair i at 2i, recurrent state at
 * 2i + 1), in one allocation without internal pointers so that a shell is a
 * byte copy.
 */
typedef struct kvc_linear_ext {
  uint32_t num_states;
  uint32_t reserved;
  int64_t ret_shape[3], ret_strides[3]; /* the last update_conv_state return */
} kvc_linear_ext;

kvc_linear_pair* kvci_linear_pairs(const kvc_layer* layer); /* NULL while ext is not allocated */
kvc_row_buffer* kvci_linear_rows(const kvc_layer* layer);
/* Allocates the (empty) extension state if the layer has none; -1 when out of memory. */
int kvci_linear_ext_ensure(kvc_layer* layer);
/* The LINEAR kinds' parameters (kvc_layer.params). */
typedef struct kvc_linear_params {
  uint32_t num_states; /* >= 1 */
  int64_t conv_kernel; /* configured K, 0 = from the first input */
} kvc_linear_params;
KVC_PARAMS_FIT(kvc_linear_params);
static inline const kvc_linear_params* kvci_linear_params_of(const kvc_layer* l) {
  return kvci_layer_params(const kvc_linear_params, l);
}

size_t kvci_linear_ext_bytes(uint32_t num_states);

/*
 * A layer read from a file (kvc_kind.check_loaded of the LINEAR family): every state pair's geometry against the
 * buffers this file allocates for it (conv: [batch][cap x channels] elements, cap >= the kernel, its live region
 * inside; recurrent: [batch][shape[1..]] elements, shape[0] the batch; no region without a buffer).
 */
kvc_error* kvci_linear_check_loaded(const char* fn, const char* where, const kvc_layer* layer);

/* Whether any state of the layer is allocated (then layer->batch is fixed). */
int kvci_linear_any_state(const kvc_layer* layer);
/* Every state pair has had its first conv update. */
int kvci_linear_all_previous(const kvc_layer* layer);

/*
 * The conv state's storage. kvci_conv_make_room is the only step that can
 * fail (and then changes nothing): it makes the region the last `keep_len`
 * of its columns (0 for a state not allocated yet, which it allocates with
 * the given geometry) followed by `need` free slots, moving the region back
 * to slot 0 or growing the buffer when needed. The write functions that
 * follow cannot fail.
 */
kvc_error* kvci_conv_make_room(const kvc_cache* cache, kvc_layer* layer, uint32_t state, kvc_dtype dtype,
                              int64_t batch, int64_t channels, int64_t kernel, int64_t keep_len, int64_t need);
/* Copies x [batch, channels, n] (any strides) into time slots [slot, slot + n). */
void kvci_conv_write(const kvc_cache* cache, const kvc_layer* layer, uint32_t state, const kvc_tensor* x,
                    int64_t first_column, int64_t n, int64_t slot);
void kvci_conv_zero(const kvc_cache* cache, const kvc_layer* layer, uint32_t state, int64_t from, int64_t to);
/* Copies time slot `from` to slot `to` for every row and channel. */
void kvci_conv_copy_column(const kvc_cache* cache, const kvc_layer* layer, uint32_t state, int64_t from, int64_t to);

/* Allocates the recurrent state zeroed with the given shape (batch first); on failure nothing changed. */
kvc_error* kvci_rec_allocate(const kvc_cache* cache, kvc_layer* layer, uint32_t state, kvc_dtype dtype, int32_t ndim,
                            const int64_t* shape);
/* Copies s (same shape, any strides) into the recurrent state. */
void kvci_rec_write(const kvc_cache* cache, const kvc_layer* layer, uint32_t state, const kvc_tensor* s);

/* Recomputes every view descriptor from the states and layer->batch. */
void kvci_linear_sync(kvc_layer* layer);
/* Views of pair `state`'s states: data NULL and ndim 0 for a state not allocated. */
void kvci_linear_conv_view(const kvc_layer* layer, uint32_t state, kvc_tensor* out);
void kvci_linear_rec_view(const kvc_layer* layer, uint32_t state, kvc_tensor* out);
/* The view of conv time slots [from, to) described by ext's ret_* arrays (set by this call). */
void kvci_linear_conv_return(kvc_layer* layer, uint32_t state, int64_t from, int64_t to, kvc_tensor* out);

/* Zeroes every allocated state and clears has_previous (transformers' reset of the linear part). */
void kvci_linear_reset(const kvc_cache* cache, kvc_layer* layer);
/* The linear part of crop (docs/semantics.md, 'Linear-attention layers'): check refuses unless recording and tokens <= 0; apply trims conv states. */
kvc_error* kvci_linear_check_crop(const kvc_layer* layer, int64_t tokens);
void kvci_linear_apply_crop(const kvc_cache* cache, kvc_layer* layer, int64_t tokens);

#endif /* KVC_CORE_LINEAR_STATE_H */
