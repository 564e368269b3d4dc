/*
 * core/kinds/base/base_kinds.h: the four store disciplines (dynamic, dynamic sliding, static, static sliding)
 * whose entries the other kinds reuse, and the delegation of a kind that adds state to another kind's store.
 * Kinds above build on these; these never call a kind above them.
 */
#ifndef KVC_CORE_KINDS_BASE_BASE_KINDS_H
#define KVC_CORE_KINDS_BASE_BASE_KINDS_H

#include "model/model.h"

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

/*
 * The entries of a kind with state of its own beside the store (kvc_layer.ext): its file names them ext_shell,
 * ext_free, check_stack, ext_save and ext_load, and its ops table lists them together with this, so that none is
 * left out (a split, a stack or a file would then lose the state).
 */
#define KVC_OWN_STATE_OPS                                                                                   \
  .ext_shell = ext_shell, .ext_free = ext_free, .check_stack = check_stack, .ext_save = ext_save,           \
  .ext_load = ext_load

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
/*
 * The static store discipline's entries (a fixed number of slots: StaticLayer, StaticSlidingWindowLayer):
 * its file names its own check_update, keep_for_update, apply_update, mask_sizes, apply_crop and
 * initial_capacity, and every such table shares the length queries; a kind's table starts with
 * KVC_STATIC_STORE_OPS and adds its check_crop and reset.
 */
#define KVC_STATIC_STORE_OPS                                                                               \
  .check_update = check_update, .keep_for_update = keep_for_update, .apply_update = apply_update,          \
  .seq_length = kvci_static_seq_length, .max_length = kvci_static_max_length, .mask_sizes = mask_sizes,    \
  .apply_crop = apply_crop, .initial_capacity = initial_capacity
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

/* check_loaded of kinds whose only state is their store (the generic rules cover it). */
kvc_error* kvci_loaded_store_only(const char* fn, const char* where, const kvc_layer* layer);

#endif /* KVC_CORE_KINDS_BASE_BASE_KINDS_H */
