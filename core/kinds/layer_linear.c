/*
 * core/kinds/layer_linear.c: the linear-attention kinds (docs/semantics.md, 'Linear-attention layers'): LINEAR
 * (LinearAttentionLayer: conv and recurrent states, no K/V) and its four
 * hybrids with an attention part (LinearAttentionAnd{Full,SlidingWindow,
 * StaticFull,StaticSlidingWindow}AttentionLayer).
 *
 * The hybrids take K/V behaviour from their attention kind's table and the
 * state behaviour from here, resolving each method the way Python's MRO does
 * for those classes (docs/semantics.md, 'Hybrid linear-attention layers'): get_max_length is the linear mixin's (-1), crop
 * is linear-then-attention for the dynamic hybrids but linear only for the
 * static ones, reset touches both parts. The states themselves live in
 * linear_state.c; the entry points that write them in ops_recurrent.c.
 */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "linear_state.h"
#include "persist/record.h"

/* The attention part of a hybrid: the table of the kind it combines with (kvc_kind.store_ops). */
static const kvc_layer_ops* attention_ops(const kvc_layer* l) { return l->desc->store_ops; }

/* ------------------------------------------------- shared by all five kinds */

static int row_buffers(kvc_layer* l, kvc_row_buffer** out) {
  *out = kvci_linear_rows(l);
  return (int)(2 * kvci_linear_params_of(l)->num_states);
}

static int ext_shell(const kvc_layer* src, kvc_layer* dst) {
  size_t bytes = kvci_linear_ext_bytes(kvci_linear_params_of(src)->num_states);
  void* x = malloc(bytes);
  if (!x) return -1;
  memcpy(x, src->ext, bytes);
  dst->ext = x;
  kvc_row_buffer* rb = kvci_linear_rows(dst);
  for (uint32_t i = 0; i < 2 * kvci_linear_params_of(src)->num_states; i++) rb[i].ptr = NULL;
  return 0;
}

/* Files: every pair's geometry, region and flags (the states' bytes are the row buffers; views are recomputed). */
static void ext_save(const kvc_layer* l, kvci_record* r) {
  uint32_t n = kvci_linear_params_of(l)->num_states;
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  kvci_rec_i64(r, n);
  for (uint32_t i = 0; i < n; i++) {
    const int64_t v[9] = {p[i].conv_dtype, p[i].has_previous, p[i].channels, p[i].kernel, p[i].cap,
                          p[i].begin,      p[i].end,          p[i].rec_dtype, p[i].rec_ndim};
    for (int k = 0; k < 9; k++) kvci_rec_i64(r, v[k]);
    for (int k = 0; k < KVC_LINEAR_MAX_REC_DIMS; k++) kvci_rec_i64(r, p[i].rec_shape[k]);
  }
}

static kvc_error* ext_load(const char* fn, kvc_layer* l, kvci_record_reader* in) {
  uint32_t n = kvci_linear_params_of(l)->num_states;
  int64_t count, v[9 + KVC_LINEAR_MAX_REC_DIMS];
  if (kvci_rec_get_range(in, n, n, &count))
    return kvci_err(KVC_ERROR_IO, "%s: the linear layer's record does not have its %u state pairs", fn, n);
  if (kvci_linear_ext_ensure(l)) return kvci_err_oom();
  kvc_linear_pair* p = kvci_linear_pairs(l);
  for (uint32_t i = 0; i < n; i++) {
    static const int64_t hi[9] = {3, 1, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, INT32_MAX, 3,
                                  KVC_LINEAR_MAX_REC_DIMS};
    int bad = 0;
    for (int k = 0; k < 9 + KVC_LINEAR_MAX_REC_DIMS; k++)
      bad |= kvci_rec_get_range(in, 0, k < 9 ? hi[k] : INT32_MAX, &v[k]);
    if (bad || v[5] > v[6] || v[6] > v[4]) {
      free(l->ext); /* no row buffer is allocated yet */
      l->ext = NULL;
      return kvci_err(KVC_ERROR_IO, "%s: the linear layer's record of state pair %u is malformed", fn, i);
    }
    p[i].conv_dtype = (kvc_dtype)v[0];
    p[i].has_previous = (int32_t)v[1];
    p[i].channels = v[2], p[i].kernel = v[3], p[i].cap = v[4], p[i].begin = v[5], p[i].end = v[6];
    p[i].rec_dtype = (kvc_dtype)v[7];
    p[i].rec_ndim = (int32_t)v[8];
    for (int k = 0; k < KVC_LINEAR_MAX_REC_DIMS; k++) p[i].rec_shape[k] = v[9 + k];
  }
  return NULL;
}

static void ext_free(const kvc_cache* c, kvc_layer* l) {
  kvci_layer_rows_free(c, l);
  free(l->ext);
  l->ext = NULL;
}

static void fill_info(const kvc_layer* l, kvc_layer_info* info) {
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  info->num_states = kvci_linear_params_of(l)->num_states;
  info->conv_kernel_size = kvci_linear_params_of(l)->conv_kernel;
  info->has_previous_state = (uint8_t)kvci_linear_all_previous(l);
  if (p && p[0].conv_dtype != KVC_DTYPE_UNSET) info->conv_kernel_size = p[0].kernel;
  if (kvci_layer_is(l, KVC_TRAIT_HAS_KV)) return; /* the hybrids: their attention part answers */
  /* No K/V: "initialized" means a state exists; LinearAttentionLayer is compileable (static shapes). */
  info->is_compileable = 1;
  info->is_initialized = (uint8_t)kvci_linear_any_state(l);
  /* The dtype of the first allocated state, conv states first (states may differ: SSM states are often float32). */
  for (uint32_t i = 0; p && i < kvci_linear_params_of(l)->num_states && info->dtype == KVC_DTYPE_UNSET; i++) info->dtype = p[i].conv_dtype;
  for (uint32_t i = 0; p && i < kvci_linear_params_of(l)->num_states && info->dtype == KVC_DTYPE_UNSET; i++) info->dtype = p[i].rec_dtype;
}

static kvc_error* check_stack(const char* fn, const kvc_layer* a, const kvc_layer* b, uint32_t index, size_t which) {
#define KVC_STACK_DIFF(what, va, vb)                                                                           \
  return kvci_err(KVC_ERROR_INVALID_STATE,                                                                      \
                 "%s: layer %u of splits[%zu] has %s %" PRId64 " but splits[0] has %" PRId64                   \
                 "; the recurrent states of splits must agree to be stacked (splits of one cache that received " \
                 "the same calls do)",                                                                         \
                 fn, index, which, what, (int64_t)(vb), (int64_t)(va))
  if (kvci_linear_params_of(a)->num_states != kvci_linear_params_of(b)->num_states) KVC_STACK_DIFF("num_states", kvci_linear_params_of(a)->num_states, kvci_linear_params_of(b)->num_states);
  if (a->record_past != b->record_past) KVC_STACK_DIFF("past recording", a->record_past, b->record_past);
  const kvc_linear_pair *pa = kvci_linear_pairs(a), *pb = kvci_linear_pairs(b);
  for (uint32_t i = 0; i < kvci_linear_params_of(a)->num_states; i++) {
    kvc_linear_pair za, zb;
    memset(&za, 0, sizeof za);
    memset(&zb, 0, sizeof zb);
    const kvc_linear_pair* x = pa ? &pa[i] : &za;
    const kvc_linear_pair* y = pb ? &pb[i] : &zb;
    if (x->has_previous != y->has_previous) KVC_STACK_DIFF("has_previous_state", x->has_previous, y->has_previous);
    if (x->conv_dtype != y->conv_dtype) KVC_STACK_DIFF("conv state dtype", x->conv_dtype, y->conv_dtype);
    if (x->conv_dtype != KVC_DTYPE_UNSET) {
      if (x->channels != y->channels) KVC_STACK_DIFF("conv channels", x->channels, y->channels);
      if (x->kernel != y->kernel) KVC_STACK_DIFF("conv kernel size", x->kernel, y->kernel);
      if (x->cap != y->cap) KVC_STACK_DIFF("conv capacity", x->cap, y->cap);
      if (x->begin != y->begin) KVC_STACK_DIFF("conv region start", x->begin, y->begin);
      if (x->end != y->end) KVC_STACK_DIFF("conv region end", x->end, y->end);
    }
    if (x->rec_dtype != y->rec_dtype) KVC_STACK_DIFF("recurrent state dtype", x->rec_dtype, y->rec_dtype);
    if (x->rec_dtype != KVC_DTYPE_UNSET) {
      if (x->rec_ndim != y->rec_ndim) KVC_STACK_DIFF("recurrent state ndim", x->rec_ndim, y->rec_ndim);
      for (int32_t d = 1; d < x->rec_ndim; d++)
        if (x->rec_shape[d] != y->rec_shape[d]) KVC_STACK_DIFF("a recurrent state size", x->rec_shape[d], y->rec_shape[d]);
    }
  }
#undef KVC_STACK_DIFF
  return NULL;
}

/* ------------------------------------------------------------ LINEAR */

static kvc_error* refuse_update(const char* fn, uint32_t index, const kvc_layer* l, int64_t n,
                                const kvc_update_options* o) {
  (void)l;
  (void)o;
  return kvci_err(KVC_ERROR_UNSUPPORTED,
                 "%s: layer %u is a linear (recurrent state) layer with no key/value cache, so it cannot take %" PRId64
                 " tokens; use kvc_cache_update_conv_state and kvc_cache_update_recurrent_state",
                 fn, index, n);
}

static void reset_linear(const kvc_cache* c, kvc_layer* l) { kvci_linear_reset(c, l); }

/* keep_for_update, apply_update and initial_capacity stay NULL: check_update refuses every update first. */
const kvc_layer_ops kvc_linear_layer_ops = {
    .check_update = refuse_update,
    .seq_length = kvci_no_kv_seq_length,
    .max_length = kvci_unbounded_max_length, /* LinearAttentionCacheLayerMixin.get_max_length */
    .mask_sizes = kvci_no_kv_mask_sizes,
    .check_crop = kvci_linear_check_crop,
    .apply_crop = kvci_linear_apply_crop,
    .reset = reset_linear,
    .row_buffers = row_buffers,
    KVC_OWN_STATE_OPS,
    .fill_info = fill_info,
    .sync_ext = kvci_linear_sync,
};

/* ------------------------------------------------------------ hybrids */

/* Dynamic hybrids crop the linear part, then the attention part; static ones only the linear part ('Hybrid linear-attention layers'). */
static int crops_attention(const kvc_layer* l) { return !kvci_layer_is(l, KVC_TRAIT_STATIC); }

static kvc_error* check_crop(const kvc_layer* l, int64_t tokens) {
  kvc_error* e = kvci_linear_check_crop(l, tokens);
  if (!e && crops_attention(l)) e = attention_ops(l)->check_crop(l, tokens);
  return e;
}

static void apply_crop(const kvc_cache* c, kvc_layer* l, int64_t tokens) {
  kvci_linear_apply_crop(c, l, tokens);
  if (crops_attention(l)) attention_ops(l)->apply_crop(c, l, tokens);
}

/*
 * LinearAttentionCacheLayerMixin.is_croppable (5.17), also the hybrids' (the
 * MRO puts the mixin first): a recurrent state cannot be rolled back, and
 * before any state exists the layer cannot tell yet.
 */
static int is_croppable(const kvc_layer* l, uint32_t release) {
  (void)release;
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  if (!p) return 0;
  uint32_t n = ((const kvc_linear_ext*)l->ext)->num_states;
  int conv = 0;
  for (uint32_t i = 0; i < n; i++) {
    if (p[i].rec_dtype != KVC_DTYPE_UNSET) return 0;
    if (p[i].conv_dtype != KVC_DTYPE_UNSET) conv = 1;
  }
  return conv;
}

static void reset(const kvc_cache* c, kvc_layer* l) {
  kvci_linear_reset(c, l);
  attention_ops(l)->reset(c, l);
}

#define KVC_HYBRID_OPS                                                                                       \
  {                                                                                                          \
    KVC_STORE_DELEGATE_OPS, .max_length = kvci_unbounded_max_length, .check_crop = check_crop,              \
    .apply_crop = apply_crop, .reset = reset,                                                                \
    .row_buffers = row_buffers, KVC_OWN_STATE_OPS, .fill_info = fill_info, .sync_ext = kvci_linear_sync,    \
  }

const kvc_layer_ops kvc_linear_dynamic_layer_ops = KVC_HYBRID_OPS;
const kvc_layer_ops kvc_linear_dynamic_sliding_layer_ops = KVC_HYBRID_OPS;
const kvc_layer_ops kvc_linear_static_layer_ops = KVC_HYBRID_OPS;
const kvc_layer_ops kvc_linear_static_sliding_layer_ops = KVC_HYBRID_OPS;

/* ------------------------------------------------------------ the kinds */

static kvc_error* check_options(const char* fn, uint32_t i, const kvc_layer_options* l) {
  if (l->num_states > 64)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->layers[%u].num_states is %u; it must be in [0, 64]", fn,
                   i, l->num_states);
  if (l->conv_kernel_size < 0 || l->conv_kernel_size > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->layers[%u].conv_kernel_size is %" PRId64 "; use 0 (from the first input) or [1, 2^31)",
                   fn, i, l->conv_kernel_size);
  return NULL;
}

static void configure(kvc_layer* l, const kvc_layer_options* spec) {
  kvc_linear_params* p = kvci_layer_params(kvc_linear_params, l);
  p->num_states = spec->num_states ? spec->num_states : 1;
  p->conv_kernel = spec->conv_kernel_size;
}

static void describe(const kvc_layer* l, kvc_layer_options* spec, kvc_quant_options* quant) {
  (void)quant;
  spec->num_states = kvci_linear_params_of(l)->num_states;
  spec->conv_kernel_size = kvci_linear_params_of(l)->conv_kernel;
}

/* Past recording (conv and SSM inputs) is a trait of the whole family. */
#define KVC_LINEAR_TRAITS (KVC_TRAIT_LINEAR | KVC_TRAIT_RECORDS_PAST)

const kvc_kind kvc_linear_kind = {
    .id = KVC_LAYER_LINEAR,
    .name = "linear",
    .traits = KVC_LINEAR_TRAITS | KVC_TRAIT_IS_LINEAR,
    .ops = &kvc_linear_layer_ops,
    .check_options = check_options,
    .configure = configure,
    .describe = describe,
    .capacity = kvci_no_kv_capacity,
    .is_croppable = is_croppable,
    .check_loaded = kvci_linear_check_loaded,
};

/* Files: the state pairs, then (hybrids) the attention part's store as its own kind checks it. */
static kvc_error* check_loaded_with(const char* fn, const char* where, const kvc_layer* l,
                                    kvc_error* (*store)(const char*, const char*, const kvc_layer*)) {
  kvc_error* e = kvci_linear_check_loaded(fn, where, l);
  return e ? e : store(fn, where, l);
}
static kvc_error* check_loaded_dynamic(const char* fn, const char* where, const kvc_layer* l) {
  return check_loaded_with(fn, where, l, kvci_loaded_store_only);
}
static kvc_error* check_loaded_sliding(const char* fn, const char* where, const kvc_layer* l) {
  return check_loaded_with(fn, where, l, kvci_sliding_check_loaded);
}
static kvc_error* check_loaded_static(const char* fn, const char* where, const kvc_layer* l) {
  return check_loaded_with(fn, where, l, kvci_static_check_loaded);
}
static kvc_error* check_loaded_static_sliding(const char* fn, const char* where, const kvc_layer* l) {
  return check_loaded_with(fn, where, l, kvci_static_sliding_check_loaded);
}

/* A hybrid: the family's traits and options, plus its attention part's traits, capacity and file checks. */
#define KVC_HYBRID_KIND(ID, NAME, TRAITS, OPS, CAPACITY, STORE, CHECK_LOADED)                         \
  {                                                                                                   \
    .id = ID, .name = NAME, .traits = KVC_LINEAR_TRAITS | KVC_TRAIT_HAS_KV | (TRAITS), .ops = &(OPS), \
    .check_options = check_options, .configure = configure, .describe = describe, .capacity = CAPACITY, \
    .is_croppable = is_croppable, .store_ops = &(STORE), .check_loaded = CHECK_LOADED,               \
  }

/* transformers' prefetch offloads the full-attention hybrid only: it is the one that is not is_linear. */
const kvc_kind kvc_linear_dynamic_kind = KVC_HYBRID_KIND(KVC_LAYER_LINEAR_DYNAMIC, "linear + dynamic", KVC_TRAIT_OFFLOADS,
                                                         kvc_linear_dynamic_layer_ops, NULL, kvc_dynamic_layer_ops,
                                                         check_loaded_dynamic);
const kvc_kind kvc_linear_dynamic_sliding_kind =
    KVC_HYBRID_KIND(KVC_LAYER_LINEAR_DYNAMIC_SLIDING, "linear + dynamic sliding",
                    KVC_TRAIT_IS_LINEAR | KVC_TRAIT_SLIDING, kvc_linear_dynamic_sliding_layer_ops, kvci_capacity_window,
                    kvc_dynamic_sliding_layer_ops, check_loaded_sliding);
const kvc_kind kvc_linear_static_kind =
    KVC_HYBRID_KIND(KVC_LAYER_LINEAR_STATIC, "linear + static", KVC_TRAIT_IS_LINEAR | KVC_TRAIT_STATIC,
                    kvc_linear_static_layer_ops, kvci_capacity_slots, kvc_static_layer_ops, check_loaded_static);
const kvc_kind kvc_linear_static_sliding_kind =
    KVC_HYBRID_KIND(KVC_LAYER_LINEAR_STATIC_SLIDING, "linear + static sliding",
                    KVC_TRAIT_IS_LINEAR | KVC_TRAIT_STATIC | KVC_TRAIT_SLIDING, kvc_linear_static_sliding_layer_ops,
                    kvci_capacity_slots, kvc_static_sliding_layer_ops, check_loaded_static_sliding);
