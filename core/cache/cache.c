/* core/cache/cache.c: creating, cloning, destroying and inspecting caches. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "cache_ops.h"

int kvci_cache_all_dynamic(const kvc_cache* c) {
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (kvci_layer_is(c->layers[i], KVC_TRAIT_STATIC)) return 0;
  return 1;
}

kvc_error* kvci_cache_new(const kvc_device* device, void* stream, kvc_cache** out) {
  const kvc_backend* b = NULL;
  kvc_error* e = kvci_backend_for("kvc_cache_create", device, &b);
  if (e) return e;
  kvc_cache* c = (kvc_cache*)calloc(1, sizeof(*c));
  if (!c) return kvci_err_oom();
  if (b->device_type != KVC_DEVICE_CPU && !(c->batch = (kvc_copy_batch*)calloc(1, sizeof(*c->batch)))) {
    free(c);
    return kvci_err_oom();
  }
  c->backend = b;
  c->device = *device;
  const char* check = getenv("KVC_CHECK_ALIAS_INDEX");
  c->check_alias_index = check && *check && strcmp(check, "0") != 0;
  c->exec.device_id = device->device_id;
  c->exec.stream = stream;
  if (b->exec_open(b->ctx, &c->exec)) {
    free(c->batch);
    free(c);
    /* The backend's words: a failed stream or event, or no kernel image for the device's architecture. */
    const char* why = b->last_error ? b->last_error(b->ctx) : NULL;
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY,
                   "kvc_cache_create: the %s backend could not prepare device %d for a cache (streams, events): %s",
                   b->name, (int)device->device_id, why && *why ? why : "it gave no reason");
  }
  *out = c;
  return NULL;
}

void kvc_cache_destroy(kvc_cache* c) {
  kvci_guard_retire(kvci_guard_of(c), "kvc_cache_destroy");
  if (!c) return;
  kvci_offload_settle(c); /* stream-ordered frees must come after a prefetch still writing the stores */
  for (uint32_t i = 0; i < c->num_layers; i++) kvci_layer_free(c, c->layers[i]);
  kvci_offload_free_state(c);
  kvci_kinds_free_state(c);
  kvci_alias_index_free(c);
  kvci_allocator_release(c->allocator); /* after the layers: their stores went back to it */
  c->backend->exec_close(c->backend->ctx, &c->exec);
  if (c->batch) free(c->batch->copies);
  free(c->batch);
  free(c->layers);
  free(c);
}

/* kvc_cache_create without adopting the allocator, so that kvc_cache_create_from_tensors can still fail. */
static kvc_error* cache_create(const kvc_cache_options* options, kvc_cache** out) {
  static const char* FN = "kvc_cache_create";
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass the address of a kvc_cache*", FN);
  kvc_cache_options opts = KVC_CACHE_OPTIONS_INIT;
  kvc_error* e = options ? kvci_read_cache_options(FN, "options", options, &opts) : NULL;
  if (e) return e;
  const kvc_cache_options* o = &opts;
  if ((e = kvci_query_offset_check(FN, o->query_offset_rule))) return e;
  if (o->transformers_release != 0 && (o->transformers_release < 40000 || o->transformers_release >= 1000000))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                    "%s: options->transformers_release is %u; pass 0 (the newest) or MAJOR*10000 + MINOR*100 of a "
                    "4.x or later release, e.g. 52300 for 5.23",
                    FN, o->transformers_release);
  kvc_layer_options* specs = NULL;
  kvc_layer_options lazy_spec = KVC_LAYER_OPTIONS_INIT;
  kvc_offload offload = KVC_OFFLOAD_NONE;
  uint32_t n = 0;
  int lazy = 0;
  kvci_allocator* allocator = NULL;
  if ((e = kvci_allocator_new(FN, "options->allocator", o->allocator, &allocator))) return e;
  e = kvci_preset_layers(o, &specs, &n, &lazy, &lazy_spec, &offload);
  kvc_cache* c = NULL;
  if (!e) e = kvci_cache_new(&o->device, NULL, &c);
  if (e) {
    free(specs);
    kvci_allocator_release(allocator);
    return e;
  }
  c->allocator = allocator;
  c->offload = offload;
  c->transformers_release = o->transformers_release;
  c->query_offset_rule = o->query_offset_rule;
  c->lazy_spec = lazy_spec;
  c->lazy_spec.quant = NULL; /* the preset's quant options are borrowed; lazy quantized layers do not exist */
  for (uint32_t i = 0; !e && i < n; i++) {
    kvc_layer* l = NULL;
    e = kvci_layer_new(&specs[i], &l);
    if (!e) {
      l->offloadable = kvci_offload_layer_takes_part(offload, l);
      e = kvci_cache_append_layer(c, l);
    }
  }
  free(specs);
  if (e) {
    kvc_cache_destroy(c);
    return e;
  }
  c->lazy = lazy;
  *out = c;
  return NULL;
}

kvc_error* kvc_cache_create(const kvc_cache_options* options, kvc_cache** out) {
  kvc_error* e = cache_create(options, out);
  if (!e) kvci_allocator_adopt((*out)->allocator);
  return e;
}

kvc_error* kvc_cache_create_from_tensors(const kvc_cache_options* options, uint32_t num_layers,
                                         const kvc_tensor* keys, const kvc_tensor* values, kvc_cache** out) {
  static const char* FN = "kvc_cache_create_from_tensors";
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass the address of a kvc_cache*", FN);
  if (num_layers > 0 && (!keys || !values))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL but num_layers is %u", FN, keys ? "values" : "keys",
                   num_layers);
  kvc_cache* c = NULL;
  kvc_error* e = cache_create(options, &c);
  if (e) return e;
  const kvc_call call = {FN, KVC_CALL_PER_LAYER_ARGS | KVC_CALL_FILLS_LAYERS};
  if (num_layers > 0) e = kvci_update_layers(&call, c, 0, num_layers, keys, values, NULL, NULL);
  /* A failed write has been reported by the update (as for a poisoned cache); the cache is not handed out. */
  if (e) {
    kvc_cache_destroy(c);
    return e;
  }
  kvci_allocator_adopt(c->allocator);
  *out = c;
  return NULL;
}

kvc_error* kvc_cache_clone(const kvc_cache* src, kvc_cache** out) {
  static const char* FN = "kvc_cache_clone";
  KVCI_GUARD_SHARED(kvci_guard_of(src), FN);
  kvc_error* e = kvci_cache_check(FN, src);
  if (e) return e;
  kvci_offload_settle(src);
  if ((e = kvci_cache_result(FN, src, NULL))) return e;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass the address of a kvc_cache*", FN);
  kvc_cache* c = NULL;
  e = kvci_cache_new(&src->device, src->exec.stream, &c);
  if (!e) c->allocator = kvci_allocator_share(src->allocator);
  for (uint32_t i = 0; !e && i < src->num_layers; i++) {
    kvc_layer* l = NULL;
    e = kvci_layer_clone(src, src->layers[i], c, &l);
    if (!e) e = kvci_cache_append_layer(c, l);
  }
  if (!e) e = kvci_cache_copy_settings(src, c);
  if (!e) e = kvci_fault_discard(FN, &c->fault, c->backend, "no clone was made; the source cache is unchanged");
  if (e) {
    kvc_cache_destroy(c);
    return e;
  }
  *out = c;
  return NULL;
}

kvc_error* kvci_cache_new_like(const kvc_cache* src, kvc_cache** out) {
  kvc_cache* c = NULL;
  kvc_error* e = kvci_cache_new(&src->device, src->exec.stream, &c);
  if (!e) c->allocator = kvci_allocator_share(src->allocator);
  if (!e && (e = kvci_cache_copy_settings(src, c))) kvc_cache_destroy(c);
  if (!e) *out = c;
  return e;
}

/* Alike only in shape: the pool's statistics are filled field by field the same way (pool/pool.c). */
kvc_error* kvci_cache_copy_settings(const kvc_cache* src, kvc_cache* dst) {
  dst->lazy = src->lazy;
  dst->reserve = src->reserve;
  dst->lazy_spec = src->lazy_spec;
  dst->offload = src->offload;
  dst->transformers_release = src->transformers_release;
  dst->query_offset_rule = src->query_offset_rule;
  dst->accepted_tokens = src->accepted_tokens;
  return kvci_kinds_clone_state(src, dst);
}

/*
 * transformers' supports_early_init is False for the linear kinds (their hybrids too) and for layers
 * without K/V (DummyLayer): they have nothing an early initialization could allocate.
 */
static int skips_early_init(const kvc_layer* l) {
  return kvci_layer_is(l, KVC_TRAIT_LINEAR) || !kvci_layer_is(l, KVC_TRAIT_HAS_KV);
}

kvc_error* kvc_cache_early_initialization(kvc_cache* c, const kvc_init_options* o) {
  static const char* FN = "kvc_cache_early_initialization";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_settled(FN, c);
  if (e) return e;
  if (!o) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options is NULL; pass a kvc_init_options", FN);
  if ((e = kvci_check_struct_size(FN, "options", o->struct_size, sizeof(kvc_init_options)))) return e;
  if (o->batch_size < 1 || o->batch_size > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->batch_size is %" PRId64 "; it must be in [1, 2^31)", FN,
                   o->batch_size);
  if (kvc_dtype_size(o->dtype) == 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: options->dtype is %d; use KVC_DTYPE_FLOAT32 (1), KVC_DTYPE_FLOAT16 (2) or KVC_DTYPE_BFLOAT16 (3)",
                   FN, (int)o->dtype);
  if (!o->num_kv_heads_per_layer && o->num_kv_heads < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->num_kv_heads is %" PRId64 "; it must be >= 1", FN,
                   o->num_kv_heads);
  if (!o->head_dim_per_layer && o->k_head_dim < 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->k_head_dim is %" PRId64 "; it must be >= 1", FN,
                   o->k_head_dim);
  if (!o->head_dim_per_layer && o->v_head_dim < 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options->v_head_dim is %" PRId64 "; it must be >= 1 (or 0: same as k_head_dim)", FN,
                   o->v_head_dim);
  for (uint32_t i = 0; i < c->num_layers; i++) {
    if (skips_early_init(c->layers[i])) continue; /* skipped below: their entries are not used */
    int64_t h = o->num_kv_heads_per_layer ? o->num_kv_heads_per_layer[i] : o->num_kv_heads;
    int64_t kd = o->head_dim_per_layer ? o->head_dim_per_layer[i] : o->k_head_dim;
    int64_t vd = o->head_dim_per_layer ? kd : (o->v_head_dim ? o->v_head_dim : o->k_head_dim);
    if (h < 1)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is %" PRId64 " for layer %u; it must be >= 1", FN,
                     o->num_kv_heads_per_layer ? "options->num_kv_heads_per_layer[i]" : "options->num_kv_heads", h, i);
    if (kd < 1 || vd < 1)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is %" PRId64 " for layer %u; head dims must be >= 1", FN,
                     o->head_dim_per_layer ? "options->head_dim_per_layer[i]"
                                           : (kd < 1 ? "options->k_head_dim" : "options->v_head_dim"),
                     kd < 1 ? kd : vd, i);
    /* A layer whose kind state already holds rows (an indexed layer's indexer keys) has its batch: the K/V
     * allocated here must take it, as a first update must (ops_update.c). */
    const kvc_layer* l = c->layers[i];
    if (!l->initialized && kvci_layer_row_bytes(l, 0) && o->batch_size != l->batch)
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH,
                     "%s: options->batch_size is %" PRId64 " but layer %u already holds rows of batch %" PRId64
                     " (its indexer keys); keys, values and the layer's other rows share one batch",
                     FN, o->batch_size, i, l->batch);
  }
  uint32_t done = 0;
  for (uint32_t i = 0; i < c->num_layers; i++, done++) {
    kvc_layer* l = c->layers[i];
    if (l->initialized || skips_early_init(l)) continue;
    int64_t h = o->num_kv_heads_per_layer ? o->num_kv_heads_per_layer[i] : o->num_kv_heads;
    int64_t kd = o->head_dim_per_layer ? o->head_dim_per_layer[i] : o->k_head_dim;
    int64_t vd = o->head_dim_per_layer ? kd : (o->v_head_dim ? o->v_head_dim : o->k_head_dim);
    e = kvci_layer_initialize(c, l, o->dtype, o->batch_size, h, kd, vd, 0);
    if (e) break;
    l->initialized = 2; /* marks "initialized by this call" for the rollback below */
  }
  for (uint32_t i = 0; i < done; i++) {
    kvc_layer* l = c->layers[i];
    if (l->initialized == 2) {
      if (e)
        kvci_layer_uninitialize(c, l);
      else
        l->initialized = 1;
    }
  }
  return kvci_cache_result(FN, c, e);
}

/* ----------------------------------------------------------------- queries */

/*
 * Sequence-length queries on a layer without K/V (linear or dummy; docs/semantics.md, 'The cache as a
 * whole'): index 0 means "the cache", answered by the first layer with K/V; another index is an
 * error, as is a cache with no such layer. Indices beyond the layers pass.
 */
static kvc_error* attention_layer_for(const char* fn, const kvc_cache* c, uint32_t* layer) {
  if (*layer >= c->num_layers || kvci_layer_is(c->layers[*layer], KVC_TRAIT_HAS_KV)) return NULL;
  if (*layer != 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: layer %u is a %s layer, which does not track a sequence length; ask an attention layer, "
                   "or layer 0 for the first one",
                   fn, *layer, c->layers[*layer]->desc->name);
  for (uint32_t i = 0; i < c->num_layers; i++)
    if (kvci_layer_is(c->layers[i], KVC_TRAIT_HAS_KV)) {
      *layer = i;
      return NULL;
    }
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                 "%s: layer 0 is a %s layer and the cache has no attention layer; sequence lengths exist only on "
                 "attention layers",
                 fn, c->layers[0]->desc->name);
}

uint32_t kvc_cache_num_layers(const kvc_cache* c) {
  KVCI_GUARD_SHARED_WAIT(kvci_guard_of(c)); /* a lazy cache's count grows with its updates */
  return c ? c->num_layers : 0;
}

kvc_error* kvc_cache_layer_info(const kvc_cache* c, uint32_t layer, kvc_layer_info* out) {
  static const char* FN = "kvc_cache_layer_info";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_layer(FN, c, layer);
  if (e) return e;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass a kvc_layer_info", FN);
  static const uint32_t SIZES[] = {96, 128};
  size_t write = 0;
  if ((e = kvci_out_struct_size(FN, "out", out->struct_size, SIZES, 2, &write))) return e;
  const kvc_layer* l = c->layers[layer];
  kvc_layer_info i;
  memset(&i, 0, sizeof i);
  i.struct_size = sizeof i;
  i.kind = l->kind;
  i.window = l->window;
  i.max_cache_len = l->max_cache_len;
  i.capacity = l->desc->capacity ? l->desc->capacity(l) : -1;
  i.is_initialized = (uint8_t)(l->initialized != 0);
  i.is_sliding = (uint8_t)kvci_layer_is(l, KVC_TRAIT_SLIDING);
  i.is_chunked = (uint8_t)kvci_layer_is(l, KVC_TRAIT_CHUNKED);
  i.is_compileable = (uint8_t)kvci_layer_is(l, KVC_TRAIT_STATIC);
  i.records_past = (uint8_t)l->record_past;
  i.dtype = l->dtype;
  i.batch_size = l->batch;
  i.num_kv_heads = l->heads;
  i.k_head_dim = l->k_dim;
  i.v_head_dim = l->v_dim;
  i.seq_length = l->initialized ? l->ops->seq_length(l) : 0;
  i.stored_length = kvci_layer_stored(l);
  /* transformers' is_linear (docs/semantics.md, 'Hybrid linear-attention layers'): 5.24 counts the linear layers
   * without K/V only; up to 5.23 every linear-attention layer but the plain hybrid with full attention. */
  i.is_linear = (uint8_t)(kvci_layer_is(l, KVC_TRAIT_IS_LINEAR) &&
                          ((c->transformers_release != 0 && c->transformers_release < 52400) ||
                           !kvci_layer_is(l, KVC_TRAIT_HAS_KV)));
  i.is_offloaded = (uint8_t)(l->offloaded != 0);
  if (l->ops->fill_info) l->ops->fill_info(l, &i);
  i.struct_size = out->struct_size;
  memcpy(out, &i, write);
  return NULL;
}

kvc_error* kvc_cache_layer_view(const kvc_cache* c, uint32_t layer, kvc_kv* out) {
  static const char* FN = "kvc_cache_layer_view";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_layer(FN, c, layer);
  if (e) return e;
  kvci_offload_settle(c);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass a kvc_kv", FN);
  const kvc_layer* l = c->layers[layer];
  if (!kvci_layer_is(l, KVC_TRAIT_HAS_KV))
    return kvci_err(KVC_ERROR_UNSUPPORTED, "%s: layer %u is a %s layer with no keys or values%s", FN, layer,
                    l->desc->name,
                    kvci_layer_is(l, KVC_TRAIT_LINEAR) ? "; use kvc_cache_state_view" : " (it stores nothing)");
  if (!l->initialized)
    return kvci_err(KVC_ERROR_INVALID_STATE,
                   "%s: layer %u is not initialized (no update or early initialization yet), so it has no storage", FN,
                   layer);
  *out = l->views[0];
  return NULL;
}

/* Alike only in shape: every entry point opens with its name, its guard and one check (kvc_cache_layer_view). */
kvc_error* kvc_cache_seq_length(const kvc_cache* c, uint32_t layer, int64_t* out) {
  static const char* FN = "kvc_cache_seq_length";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_query(FN, c, out);
  if (e) return e;
  if ((e = attention_layer_for(FN, c, &layer))) return e;
  const kvc_layer* l = layer < c->num_layers ? c->layers[layer] : NULL;
  *out = l && l->initialized ? l->ops->seq_length(l) : 0;
  return NULL;
}

kvc_error* kvc_cache_query_offset(const kvc_cache* c, uint32_t layer, int64_t* out) {
  KVCI_GUARD_SHARED(kvci_guard_of(c), "kvc_cache_query_offset");
  int64_t seq = 0;
  kvc_error* e = kvci_cache_check_query("kvc_cache_query_offset", c, out);
  if (!e) e = kvc_cache_seq_length(c, layer, &seq); /* its rules (and messages) for linear layers */
  if (e) return e;
  *out = seq + kvci_query_offset_added(c, layer);
  return NULL;
}

kvc_error* kvc_cache_max_length(const kvc_cache* c, int32_t layer, int64_t* out) {
  static const char* FN = "kvc_cache_max_length";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_query_any(FN, c, layer, out);
  if (e) return e;
  if (layer >= 0) {
    *out = (uint32_t)layer < c->num_layers ? c->layers[layer]->ops->max_length(c->layers[layer]) : -1;
    return NULL;
  }
  int64_t m = -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    int64_t x = c->layers[i]->ops->max_length(c->layers[i]);
    if (x > m) m = x;
  }
  *out = m;
  return NULL;
}

kvc_error* kvc_cache_usable_length(const kvc_cache* c, int64_t new_seq_length, uint32_t layer, int64_t* out) {
  static const char* FN = "kvc_cache_usable_length";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_query(FN, c, out);
  if (e) return e;
  if (new_seq_length < 0 || new_seq_length > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: new_seq_length is %" PRId64 "; it must be in [0, 2^31)", FN,
                   new_seq_length);
  const kvc_layer* l = layer < c->num_layers ? c->layers[layer] : NULL;
  int64_t max = l ? l->ops->max_length(l) : -1;
  int64_t prev = l && l->initialized ? l->ops->seq_length(l) : 0;
  *out = (max != -1 && prev + new_seq_length > max) ? max - new_seq_length : prev;
  return NULL;
}

kvc_error* kvc_cache_mask_sizes(const kvc_cache* c, int64_t q, uint32_t layer, int64_t* kv_length,
                                int64_t* kv_offset) {
  static const char* FN = "kvc_cache_mask_sizes";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  if (!kv_length || !kv_offset)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, kv_length ? "kv_offset" : "kv_length");
  if (q < 0 || q > INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: query_length is %" PRId64 "; it must be in [0, 2^31)", FN, q);
  uint32_t asked = layer;
  if (layer >= c->num_layers) {
    *kv_length = q;
    *kv_offset = 0;
  } else {
    if ((e = attention_layer_for(FN, c, &layer))) return e;
    const kvc_layer* l = c->layers[layer];
    l->ops->mask_sizes(l, q, kv_length, kv_offset);
  }
  kvci_query_offset_mask(c, asked, kv_length, kv_offset);
  return NULL;
}

kvc_error* kvc_cache_batch_size(const kvc_cache* c, int64_t* out) {
  static const char* FN = "kvc_cache_batch_size";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check_query(FN, c, out);
  if (e) return e;
  int64_t b = -1;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    if (!l->initialized || !kvci_layer_is(l, KVC_TRAIT_STATIC)) continue;
    if (b != -1 && l->batch != b)
      return kvci_err(KVC_ERROR_INVALID_STATE,
                     "%s: the batch size is not consistent across layers: layer %u has %" PRId64 ", earlier layers %" PRId64,
                     FN, i, l->batch, b);
    b = l->batch;
  }
  *out = b;
  return NULL;
}

kvc_error* kvc_cache_memory(const kvc_cache* c, kvc_memory_info* out) {
  static const char* FN = "kvc_cache_memory";
  KVCI_GUARD_SHARED(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL; pass a kvc_memory_info", FN);
  static const uint32_t SIZES[] = {24, 56};
  size_t write = 0;
  if ((e = kvci_out_struct_size(FN, "out", out->struct_size, SIZES, 2, &write))) return e;
  kvc_memory_info m;
  memset(&m, 0, sizeof m);
  m.struct_size = out->struct_size;
  for (uint32_t i = 0; i < c->num_layers; i++) {
    const kvc_layer* l = c->layers[i];
    uint64_t all = kvci_layer_bytes_reserved(l), rows = kvci_layer_row_bytes(l, 0);
    uint64_t extra = 0, quantized = kvci_layer_row_bytes(l, KVC_ROWS_QUANTIZED);
    if (l->ops->memory) l->ops->memory(l, &extra, &quantized); /* kind memory beyond store and rows */
    m.bytes_reserved += all;
    m.bytes_used += (uint64_t)(l->batch * l->heads * kvci_layer_stored(l) * (l->k_dim + l->v_dim)) * l->elem;
    if (l->offloaded) {
      m.bytes_host += all - rows - extra; /* K/V in the host tier; kind state stays on the device */
      m.bytes_device += rows + extra;
    } else {
      m.bytes_device += all;
    }
    m.bytes_quantized += quantized;
    m.bytes_state += kvci_layer_row_bytes(l, KVC_ROWS_STATE);
  }
  uint64_t retired = kvci_offload_retired_bytes(c), scratch = kvci_kinds_state_bytes(c);
  m.bytes_reserved += retired + scratch;
  m.bytes_device += retired + scratch;
  memcpy(out, &m, write);
  return NULL;
}

kvc_error* kvc_cache_set_stream(kvc_cache* c, void* stream) {
  static const char* FN = "kvc_cache_set_stream";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(c), FN);
  kvc_error* e = kvci_cache_check(FN, c);
  if (e) return e;
  if (stream == c->exec.stream) return NULL;
  if (c->device.device_type == KVC_DEVICE_CPU)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT,
                   "%s: stream is %p but the cache lives on the CPU, which has no streams; pass NULL", FN, stream);
  int rc = c->backend->exec_set_stream(c->backend->ctx, &c->exec, stream);
  if (rc) return kvci_fault_error(FN, c->backend, "exec_set_stream", rc, "the cache keeps its stream");
  return NULL;
}

void* kvc_cache_stream(const kvc_cache* c) {
  KVCI_GUARD_SHARED_WAIT(kvci_guard_of(c));
  return c ? c->exec.stream : NULL;
}
