/*
 * core/cache/ops_update.c: update and update_all.
 *
 * Three phases so that a failed call changes nothing: check every layer's
 * inputs against its state; then make room (initialize, compact or grow
 * stores: invisible to the caller, and undone for layers this call
 * initialized if a later allocation fails); then write, which has nothing
 * left to refuse. Only the device can still fail a write: the cache is then
 * poisoned and the update says so (backend_fault.h).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

static kvc_error* check_pair(const char* fn, const kvc_cache* c, uint32_t i, int indexed, const kvc_tensor* k,
                             const kvc_tensor* v, const kvc_update_options* o) {
  /* update names its arguments key/value, the all-layer calls keys[i]/values[i]; formatted only on error. */
  char kb[48], vb[48];
  int64_t ix = indexed ? (int64_t)i : -1;
#define kname kvci_arg_name(kb, indexed ? "keys" : "key", ix)
#define vname kvci_arg_name(vb, indexed ? "values" : "value", ix)
  kvc_error* e = kvci_check_input_tensor(fn, indexed ? "keys" : "key", ix, k, &c->device);
  if (!e) e = kvci_check_input_tensor(fn, indexed ? "values" : "value", ix, v, &c->device);
  if (e) return e;
  if (!kvci_data_type_equal(k->dtype, v->dtype))
    return kvci_err(KVC_ERROR_DTYPE_MISMATCH, "%s: %s is %s but %s is %s; key and value must have the same dtype",
                   fn, kname, kvci_dtype_name(kvci_dtype_from_data_type(k->dtype)), vname,
                   kvci_dtype_name(kvci_dtype_from_data_type(v->dtype)));
  static const char* dims[3] = {"batch", "heads", "seq"};
  for (int d = 0; d < 3; d++)
    if (k->shape[d] != v->shape[d])
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: %s.shape[%d] (%s) is %" PRId64 " but %s.shape[%d] is %" PRId64 "; they must agree", fn,
                     kname, d, dims[d], k->shape[d], vname, d, v->shape[d]);
  if (i >= c->num_layers) return NULL; /* a lazy layer created by this call takes any geometry */
  const kvc_layer* l = c->layers[i];
  if (!l->initialized && kvci_layer_row_bytes(l, 0) && k->shape[0] != l->batch)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                   "%s: %s.shape[0] (batch) is %" PRId64 " but layer %u holds states of batch %" PRId64
                   "; keys, values and states of a layer share one batch",
                   fn, kname, k->shape[0], i, l->batch);
  if (l->initialized) {
    kvc_dtype dt = kvci_dtype_from_data_type(k->dtype);
    if (dt != l->dtype)
      return kvci_err(KVC_ERROR_DTYPE_MISMATCH,
                     "%s: %s.dtype is %s but layer %u stores %s; kvcache never converts dtypes", fn, kname, kvci_dtype_name(dt),
                     i, kvci_dtype_name(l->dtype));
    const int64_t want[4] = {l->batch, l->heads, -1, l->k_dim};
    static const char* names[4] = {"batch", "num_kv_heads", "seq", "head_dim"};
    for (int d = 0; d < 4; d++)
      if (d != 2 && k->shape[d] != want[d])
        return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                       "%s: %s.shape[%d] (%s) is %" PRId64 " but layer %u holds %" PRId64
                       "; new tokens must match the stored batch, heads and head_dim",
                       fn, kname, d, names[d], k->shape[d], i, want[d]);
    if (v->shape[3] != l->v_dim)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: %s.shape[3] (head_dim) is %" PRId64 " but layer %u holds %" PRId64
                     "; new tokens must match the stored head_dim",
                     fn, vname, v->shape[3], i, l->v_dim);
  }
  if (!l->initialized && l->ops->check_first_update) {
    kvc_error* e = l->ops->check_first_update(fn, i, l, k, v, o);
    if (e) return e;
  }
  return l->ops->check_update(fn, i, l, k->shape[2], o);
#undef kname
#undef vname
}

kvc_error* kvci_update_layers(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count,
                             const kvc_tensor* keys, const kvc_tensor* values, const kvc_update_options* options,
                             kvc_kv* out) {
  const char* fn = call->fn;
  kvc_update_options opts;
  const kvc_update_options* o = NULL;
  if (options) {
    kvc_error* e = kvci_read_update_options(fn, "options", options, &opts);
    if (e) return e;
    o = &opts;
    if (!o->cache_position && o->cache_position_length)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->cache_position is NULL but cache_position_length is %u",
                     fn, o->cache_position_length);
  }
  uint64_t last = (uint64_t)first + count;
  if (!c->lazy && last > c->num_layers)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer %u is out of range: the cache has %u layer%s (valid: 0..%d)", fn,
                   (unsigned)(last - 1), c->num_layers, c->num_layers == 1 ? "" : "s", (int)c->num_layers - 1);
  if (last > (1u << 20))
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer %u is out of range: a cache has at most 1048576 layers", fn,
                   (unsigned)(last - 1));
  int indexed = (call->flags & KVC_CALL_PER_LAYER_ARGS) != 0;
  for (uint32_t j = 0; j < count; j++) {
    kvc_error* e = check_pair(fn, c, first + j, indexed, &keys[j], &values[j], o);
    if (e) return e;
  }
  {
    kvc_error* e = kvci_kinds_check_call(call, c, first, count, keys, o);
    if (e) return e;
  }
  /* Inputs that are views of this cache are copied first: room-making below may move their bytes. */
  kvc_update_inputs in;
  {
    kvc_error* e = kvci_update_inputs_unalias(c, count, keys, values, &in);
    if (e) return e;
  }
  keys = in.keys;
  values = in.values;

  /* Phase 2: room. */
  uint32_t layers_before = c->num_layers;
  kvc_error* e = NULL;
  while (!e && c->num_layers < last) {
    kvc_layer* l = NULL;
    e = kvci_layer_new(&c->lazy_spec, &l);
    if (!e) {
      l->reserve = c->reserve;
      l->offloadable = kvci_offload_layer_takes_part(c->offload, l);
      e = kvci_cache_append_layer(c, l);
    }
  }
  uint32_t j = 0;
  for (; !e && j < count; j++) {
    kvc_layer* l = c->layers[first + j];
    const kvc_tensor *k = &keys[j], *v = &values[j];
    if (l->initialized) continue;
    e = kvci_layer_initialize(c, l, kvci_dtype_from_data_type(k->dtype), k->shape[0], k->shape[1], k->shape[3],
                             v->shape[3], k->shape[2]);
    if (!e) l->initialized = 2; /* initialized by this call */
  }
  /* Before any store grows: the buffers of the call's tier moves, so that a refusal leaves capacities alone. */
  if (!e) e = kvci_kinds_prepare_call(call, c, first, count);
  if (!e) e = kvci_offload_prepare(call, c, first, count, keys, o);
  for (j = 0; !e && j < count; j++) {
    kvc_layer* l = c->layers[first + j];
    const kvc_tensor *k = &keys[j], *v = &values[j];
    int64_t n = k->shape[2];
    int64_t append = 0;
    kvc_region keep = l->ops->keep_for_update(l, n, o, &append);
    e = kvci_layer_reserve(c, l, keep, append);
    if (!e && l->ops->prepare_update) e = l->ops->prepare_update(fn, c, l, n, o);
    if (!e && l->ops->prepare_tokens) e = l->ops->prepare_tokens(fn, c, l, k, v, o);
  }
  if (e) {
    kvci_alias_index_touch(c); /* what room-making did for the kinds with their own state is undone or kept */
    kvci_offload_abort(c);
    for (uint32_t i = 0; i < count; i++) {
      kvc_layer* l = c->layers[first + i];
      if (l->initialized == 2) kvci_layer_uninitialize(c, l);
    }
    while (c->num_layers > layers_before) kvci_layer_free(c, c->layers[--c->num_layers]);
    kvci_update_inputs_free(c, &in);
    return e;
  }

  /* Phase 3: write. On a device the new tokens of every layer go out as one batch of copies (copy_batch.c). */
  kvci_offload_release_retired(c); /* device copies kept for the views of the previous update */
  kvci_copy_batch_reserve(c, 2 * (int64_t)count);
  kvci_copy_batch_begin(c);
  for (j = 0; j < count; j++) {
    kvc_layer* l = c->layers[first + j];
    kvci_offload_before_update(c, first + j);
    l->initialized = 1;
    kvc_region r = l->ops->apply_update(c, l, &keys[j], &values[j], keys[j].shape[2], o);
    kvci_layer_sync_view(l);
    if (l->ops->set_return)
      l->ops->set_return(l, r);
    else
      kvci_layer_set_return(l, r); /* a window of the store */
    /* Kinds with their own state or return may point views at working buffers or swap stores. */
    if (l->ext || l->ops->set_return) kvci_alias_index_touch(c);
    if (out) out[j] = l->views[1];
    if (l->offloadable) kvci_copy_batch_drain(c); /* the layer may leave the device tier next */
    kvci_offload_after_update(c, first + j);
  }
  kvci_copy_batch_flush(c);
  kvci_update_inputs_free(c, &in);
  c->returned_first = first;
  c->returned_count = count;
  return kvci_cache_result(call->fn, c, NULL);
}

/*
 * The body of kvc_cache_update (one layer's key and value) and kvc_cache_update_all (KVC_CALL_PER_LAYER_ARGS:
 * `count` layers from 0, one array entry each): the cache and the tensors' presence checked, then the update.
 */
static inline kvc_error* update_entry(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count,
                                      const kvc_tensor* keys, const kvc_tensor* values,
                                      const kvc_update_options* options, kvc_kv* out) {
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), call->fn);
  kvc_error* e = kvci_cache_check(call->fn, c);
  if (e) return e;
  if (!(call->flags & KVC_CALL_PER_LAYER_ARGS) && (!keys || !values))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass a 4-D [batch, heads, seq, head_dim] tensor",
                    call->fn, keys ? "value" : "key");
  if (count == 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_layers is 0; pass at least one layer", call->fn);
  if (!keys || !values)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but num_layers is %u", call->fn,
                    keys ? "values" : "keys", count);
  return kvci_update_layers(call, c, first, count, keys, values, options, out);
}

kvc_error* kvc_cache_update(kvc_cache* c, uint32_t layer, const kvc_tensor* key, const kvc_tensor* value,
                            const kvc_update_options* options, kvc_kv* out) {
  static const kvc_call call = {"kvc_cache_update", 0};
  return update_entry(&call, c, layer, 1, key, value, options, out);
}

kvc_error* kvc_cache_update_all(kvc_cache* c, uint32_t num_layers, const kvc_tensor* keys, const kvc_tensor* values,
                                const kvc_update_options* options, kvc_kv* out) {
  static const kvc_call call = {"kvc_cache_update_all", KVC_CALL_PER_LAYER_ARGS};
  return update_entry(&call, c, 0, num_layers, keys, values, options, out);
}
