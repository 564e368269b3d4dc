/*
 * core/cache/ops_recurrent.c: the recurrent-state entry points (kvcache/recurrent.h):
 * update_conv_state, update_recurrent_state, state views, has_previous_state.
 *
 * Each update runs in the phases of every mutating call: check the input
 * against the layer, make room (the only step that can fail, and then
 * nothing changed), write.
 */
#include <inttypes.h>
#include <string.h>

#include "cache_ops.h"
#include "kinds/linear_state.h"

/* The layer `layer` if it is one of the LINEAR kinds (docs/semantics.md, 'The cache as a whole': "Cannot call ... on a non-LinearAttention layer"). */
static kvc_error* linear_layer(const char* fn, const char* what, const kvc_cache* c, uint32_t layer, kvc_layer** out) {
  kvc_error* e = kvci_cache_check_layer(fn, c, layer);
  if (e) return e;
  kvc_layer* l = c->layers[layer];
  if (!kvci_layer_is(l, KVC_TRAIT_LINEAR))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: layer %u is a %s layer; cannot call %s on a non-LinearAttention layer (only the LINEAR kinds "
                   "hold recurrent states)",
                   fn, layer, l->desc->name, what);
  *out = l;
  return NULL;
}

static kvc_error* check_state_index(const char* fn, const kvc_layer* l, uint32_t layer, uint32_t state) {
  if (state >= kvci_linear_params_of(l)->num_states)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE,
                   "%s: state_index is %u but layer %u has %u state pair%s (valid: 0..%u)", fn, state, layer,
                   kvci_linear_params_of(l)->num_states, kvci_linear_params_of(l)->num_states == 1 ? "" : "s", kvci_linear_params_of(l)->num_states - 1);
  return NULL;
}

/* State pair s of linear layer `layer`, for the entry point `what` (docs/semantics.md, 'The cache as a whole''s refusals). */
static kvc_error* linear_state(const char* fn, const char* what, const kvc_cache* c, uint32_t layer, uint32_t s,
                               kvc_layer** out) {
  kvc_error* e = linear_layer(fn, what, c, layer, out);
  return e ? e : check_state_index(fn, *out, layer, s);
}

/* The layer's batch is fixed once it holds K/V or a state; new states must agree (ops_update.c checks K/V). */
static kvc_error* check_batch(const char* fn, const char* arg, const kvc_layer* l, uint32_t layer, int64_t batch) {
  if ((l->initialized || kvci_linear_any_state(l)) && batch != l->batch)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                   "%s: %s.shape[0] (batch) is %" PRId64 " but layer %u holds batch %" PRId64
                   "; keys, values and states of a layer share one batch",
                   fn, arg, batch, layer, l->batch);
  return NULL;
}

/* ----------------------------------------------------------- conv state */

/* K of a state: fixed once allocated, else the layer's configured one, else the option, else the input's length. */
static kvc_error* conv_kernel(const char* fn, const kvc_layer* l, uint32_t layer, uint32_t s, int64_t option,
                              int64_t n, int64_t* out) {
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  int allocated = p && p[s].conv_dtype != KVC_DTYPE_UNSET;
  int64_t fixed = allocated ? p[s].kernel : kvci_linear_params_of(l)->conv_kernel;
  if (fixed > 0) {
    if (option > 0 && option != fixed)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: options->conv_kernel_size is %" PRId64 " but conv state %u of layer %u %s %" PRId64
                     "; pass 0 or the same size",
                     fn, option, s, layer, allocated ? "was allocated with K =" : "is configured with K =", fixed);
    *out = fixed;
    return NULL;
  }
  *out = option > 0 ? option : n;
  if (*out < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: conv state %u of layer %u is not allocated, the layer has no configured conv_kernel_size and "
                   "options->conv_kernel_size is 0, so K would be the input's last dimension, which is 0; pass "
                   "options->conv_kernel_size",
                   fn, s, layer);
  return NULL;
}

kvc_error* kvc_cache_update_conv_state(kvc_cache* c, uint32_t layer, const kvc_tensor* x,
                                       const kvc_conv_update_options* options, kvc_tensor* out) {
  static const char* FN = "kvc_cache_update_conv_state";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  if (options) {
    if ((e = kvci_check_struct_size(FN, "options", options->struct_size, sizeof o))) return e;
    o = *options;
  }
  kvc_layer* l = NULL;
  uint32_t s = o.state_index;
  if ((e = linear_state(FN, "update_conv_state", c, layer, s, &l))) return e;
  if (o.conv_kernel_size < 0 || o.conv_kernel_size > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->conv_kernel_size is %" PRId64 "; use 0 (the configured or the input's size) or [1, 2^31)",
                   FN, o.conv_kernel_size);
  if (!o.cache_position && o.cache_position_length)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->cache_position is NULL but cache_position_length is %u",
                   FN, o.cache_position_length);
  if ((e = kvci_check_nd_input(FN, "x", x, &c->device, 3, 3, "[batch, channels, n] with time last", 2))) return e;
  int64_t n = x->shape[2];
  int legacy = o.cache_position != NULL;
  if (legacy && (int64_t)o.cache_position_length != n)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->cache_position_length is %u but x has %" PRId64
                   " columns (x.shape[2]); pass one position per column",
                   FN, o.cache_position_length, n);
  kvc_dtype dtype = kvc_dtype_from_data_type(x->dtype);
  kvc_linear_pair* ps = kvci_linear_pairs(l);
  kvc_linear_pair* p = ps ? &ps[s] : NULL;
  int allocated = p && p->conv_dtype != KVC_DTYPE_UNSET;
  if (allocated) {
    if (dtype != p->conv_dtype)
      return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                     "%s: x.dtype is %s but conv state %u of layer %u stores %s; kvcache never converts dtypes", FN,
                     kvci_dtype_name(dtype), s, layer, kvci_dtype_name(p->conv_dtype));
    if (x->shape[1] != p->channels)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: x.shape[1] (channels) is %" PRId64 " but conv state %u of layer %u has %" PRId64 " channels",
                     FN, x->shape[1], s, layer, p->channels);
  }
  if ((e = check_batch(FN, "x", l, layer, x->shape[0]))) return e;
  int64_t k = 0;
  if ((e = conv_kernel(FN, l, layer, s, o.conv_kernel_size, n, &k))) return e;
  int64_t len = allocated ? p->end - p->begin : 0;
  if (legacy && allocated && len != k)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "%s: conv state %u of layer %u holds %" PRId64 " recorded columns but the cache_position protocol "
                   "(MambaCache) works on exactly K = %" PRId64 "; crop the recorded columns first",
                   FN, s, layer, len, k);

  /* Room: what stays of the region and how many slots follow it. */
  int first = !allocated || !p->has_previous;
  int64_t keep, need;
  if (legacy) {
    keep = allocated ? k : 0;
    need = allocated ? 1 : k + 1; /* the roll moves the region by one slot */
  } else if (first) {
    keep = 0;
    need = l->record_past || n > k ? n : k;
  } else {
    keep = len;
    need = n;
  }
  if ((e = kvci_conv_make_room(c, l, s, dtype, x->shape[0], x->shape[1], k, keep, need))) return e;

  /* Write: refuses nothing (a failing device poisons the cache). */
  p = &kvci_linear_pairs(l)[s];
  int64_t ret_from, ret_to;
  if (legacy) {
    /* MambaCache (transformers <= 5.4): roll left by one, then write column j at clamp(cache_position[j], 0, K-1). */
    if (!allocated) p->end = p->begin + k; /* a fresh buffer is zeros */
    kvci_conv_copy_column(c, l, s, p->begin, p->end);
    p->begin++;
    p->end++;
    for (int64_t j = 0; j < n; j++) {
      int64_t pos = o.cache_position[j] < 0 ? 0 : o.cache_position[j] > k - 1 ? k - 1 : o.cache_position[j];
      kvci_conv_write(c, l, s, x, j, 1, p->begin + pos);
    }
    ret_from = p->begin;
    ret_to = p->end;
  } else if (first) {
    /* The first call returns x itself, left-padded with zeros to K columns unless recording. */
    int64_t pad = !l->record_past && n < k ? k - n : 0;
    kvci_conv_zero(c, l, s, p->begin, p->begin + pad);
    kvci_conv_write(c, l, s, x, 0, n, p->begin + pad);
    ret_from = p->begin;
    ret_to = p->begin + pad + n;
    p->end = ret_to;
    if (!l->record_past) p->begin = p->end - k;
  } else {
    /* Later calls return the stored columns followed by x, and keep the last K (all of them while recording). */
    kvci_conv_write(c, l, s, x, 0, n, p->end);
    ret_from = p->begin;
    ret_to = p->end + n;
    p->end = ret_to;
    if (!l->record_past && p->end - p->begin > k) p->begin = p->end - k;
  }
  p->has_previous = 1;
  kvci_linear_sync(l);
  if (out) kvci_linear_conv_return(l, s, ret_from, ret_to, out);
  return kvci_cache_result(FN, c, NULL);
}

/* ------------------------------------------------------ recurrent state */

kvc_error* kvc_cache_update_recurrent_state(kvc_cache* c, uint32_t layer, uint32_t s, const kvc_tensor* state,
                                            kvc_tensor* out) {
  static const char* FN = "kvc_cache_update_recurrent_state";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_layer* l = NULL;
  kvc_error* e = linear_state(FN, "update_recurrent_state", c, layer, s, &l); /* checks the cache too */
  if (e) return e;
  if ((e = kvci_check_nd_input(FN, "state", state, &c->device, 1, KVC_LINEAR_MAX_REC_DIMS, "[batch, ...], batch first", -1)))
    return e;
  kvc_dtype dtype = kvc_dtype_from_data_type(state->dtype);
  kvc_linear_pair* ps = kvci_linear_pairs(l);
  kvc_linear_pair* p = ps ? &ps[s] : NULL;
  if ((e = check_batch(FN, "state", l, layer, state->shape[0]))) return e;
  if (p && p->rec_dtype != KVC_DTYPE_UNSET) {
    if (dtype != p->rec_dtype)
      return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                     "%s: state.dtype is %s but recurrent state %u of layer %u stores %s; kvcache never converts "
                     "dtypes",
                     FN, kvci_dtype_name(dtype), s, layer, kvci_dtype_name(p->rec_dtype));
    if (state->ndim != p->rec_ndim)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: state.ndim is %d but recurrent state %u of layer %u has %d dimensions; the state is copied "
                     "in place and keeps its shape",
                     FN, (int)state->ndim, s, layer, (int)p->rec_ndim);
    for (int32_t d = 1; d < state->ndim; d++)
      if (state->shape[d] != p->rec_shape[d])
        return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                       "%s: state.shape[%d] is %" PRId64 " but recurrent state %u of layer %u has %" PRId64
                       "; the state is copied in place and keeps its shape",
                       FN, (int)d, state->shape[d], s, layer, p->rec_shape[d]);
  } else if ((e = kvci_rec_allocate(c, l, s, dtype, state->ndim, state->shape))) {
    return e;
  }
  kvci_rec_write(c, l, s, state);
  kvci_linear_sync(l);
  if (out) kvci_linear_rec_view(l, s, out);
  return kvci_cache_result(FN, c, NULL);
}

/* ---------------------------------------------------------------- queries */

/* Alike only in shape: every entry point opens with its name, its guard and one check (the state updates). */
kvc_error* kvc_cache_state_view(const kvc_cache* c, uint32_t layer, uint32_t s, kvc_tensor* conv_state,
                                kvc_tensor* recurrent_state) {
  static const char* FN = "kvc_cache_state_view";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_layer* l = NULL;
  kvc_error* e = linear_state(FN, "state_view", c, layer, s, &l); /* checks the cache too */
  if (e) return e;
  /* The cache's device also for a state not allocated yet (its layer has not been told the device). */
  if (conv_state) {
    kvci_linear_conv_view(l, s, conv_state);
    conv_state->device = c->device;
  }
  if (recurrent_state) {
    kvci_linear_rec_view(l, s, recurrent_state);
    recurrent_state->device = c->device;
  }
  return NULL;
}

kvc_error* kvc_cache_has_previous_state(const kvc_cache* c, int32_t layer, int32_t s, int* out) {
  static const char* FN = "kvc_cache_has_previous_state";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_query_any(FN, c, layer, out);
  if (e) return e;
  if (s < -1)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: state_index is %d; pass a state index >= 0 or -1 (all states)", FN,
                   (int)s);
  uint32_t i;
  if (layer == KVC_ALL_LAYERS) {
    /* The last linear layer (transformers: the last LinearAttentionCacheLayerMixin, hybrids included). */
    for (i = c->num_layers; i > 0 && !kvci_layer_is(c->layers[i - 1], KVC_TRAIT_LINEAR); i--) {
    }
    if (i == 0)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: layer is KVC_ALL_LAYERS (the last linear layer) but the cache has no linear (recurrent "
                     "state) layer; has_previous_state can only be asked of LinearAttention layers",
                     FN);
    i--;
  } else if ((uint32_t)layer >= c->num_layers) {
    *out = 0; /* as transformers: a layer not created yet has no previous state */
    return NULL;
  } else {
    i = (uint32_t)layer;
    if (!kvci_layer_is(c->layers[i], KVC_TRAIT_LINEAR))
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                     "%s: layer %u is a %s layer, not a linear (recurrent state) layer; has_previous_state can only "
                     "be asked of LinearAttention layers",
                     FN, i, c->layers[i]->desc->name);
  }
  const kvc_layer* l = c->layers[i];
  if (s >= 0 && (uint32_t)s >= kvci_linear_params_of(l)->num_states)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: state_index is %d but layer %u has %u state pair%s (valid: 0..%u)", FN,
                   (int)s, i, kvci_linear_params_of(l)->num_states, kvci_linear_params_of(l)->num_states == 1 ? "" : "s", kvci_linear_params_of(l)->num_states - 1);
  const kvc_linear_pair* p = kvci_linear_pairs(l);
  *out = s < 0 ? kvci_linear_all_previous(l) : (p ? p[s].has_previous : 0);
  return NULL;
}
