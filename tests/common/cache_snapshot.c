/*
 * cache_snapshot.c: see cache_snapshot.h.
 */
#include "cache_snapshot.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 0 and 1 (decode), a few tokens, and one past most windows and capacities of the tests (40). */
const int64_t snap_queries[SNAP_NQ] = {0, 1, 2, 5, 40};

int snap_kind_is_linear(kvc_layer_kind kind) {
  return kind >= KVC_LAYER_LINEAR && kind <= KVC_LAYER_LINEAR_STATIC_SLIDING;
}

static kvc_code take_code(kvc_error* e) {
  kvc_code c = kvc_error_code(e);
  kvc_error_destroy(e);
  return c;
}

void snap_tensor_take(const kvc_tensor* t, snap_tensor* out, int* bad) {
  memset(out, 0, sizeof *out);
  if (bad) *bad = 0;
  if (t->ndim <= 0 || t->ndim > SNAP_MAX_NDIM || !t->shape) {
    if (bad && t->ndim != 0) *bad = 1;
    return;
  }
  int64_t numel = 1;
  for (int32_t i = 0; i < t->ndim; i++) {
    if (t->shape[i] < 0) {
      if (bad) *bad = 1;
      return;
    }
    numel *= t->shape[i];
  }
  out->ndim = t->ndim;
  for (int32_t i = 0; i < t->ndim; i++) out->shape[i] = t->shape[i];
  out->dtype = t->dtype;
  out->device = t->device;
  out->elem = t->dtype.bits / 8u;
  if (numel == 0) return;
  if (!t->data || out->elem == 0) {
    if (bad) *bad = 1;
    out->ndim = 0;
    return;
  }
  int64_t st[SNAP_MAX_NDIM], size = 1;
  for (int32_t i = t->ndim - 1; i >= 0; i--) {
    st[i] = t->strides ? t->strides[i] : size;
    size *= t->shape[i];
  }
  out->nbytes = (size_t)numel * out->elem;
  out->bytes = malloc(out->nbytes);
  if (!out->bytes) abort();
  const unsigned char* base = (const unsigned char*)t->data + t->byte_offset;
  int64_t idx[SNAP_MAX_NDIM] = {0};
  for (int64_t k = 0; k < numel; k++) {
    int64_t off = 0;
    for (int32_t i = 0; i < t->ndim; i++) off += idx[i] * st[i];
    memcpy(out->bytes + (size_t)k * out->elem, base + off * (int64_t)out->elem, out->elem);
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
      if (++idx[i] < t->shape[i]) break;
      idx[i] = 0;
    }
  }
}

void snap_tensor_free(snap_tensor* t) {
  free(t->bytes);
  t->bytes = NULL;
  t->nbytes = 0;
}

int snap_tensor_equal(const snap_tensor* a, const snap_tensor* b, int ignore_device, char* why, size_t n) {
  if (a->ndim != b->ndim) {
    snprintf(why, n, "ndim %d vs %d", (int)a->ndim, (int)b->ndim);
    return 0;
  }
  for (int32_t i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) {
      snprintf(why, n, "shape[%d] %lld vs %lld", (int)i, (long long)a->shape[i], (long long)b->shape[i]);
      return 0;
    }
  if (a->ndim == 0) return 1;
  if (a->dtype.code != b->dtype.code || a->dtype.bits != b->dtype.bits || a->dtype.lanes != b->dtype.lanes) {
    snprintf(why, n, "dtype {%u,%u,%u} vs {%u,%u,%u}", a->dtype.code, a->dtype.bits, a->dtype.lanes, b->dtype.code,
             b->dtype.bits, b->dtype.lanes);
    return 0;
  }
  if (!ignore_device &&
      (a->device.device_type != b->device.device_type || a->device.device_id != b->device.device_id)) {
    snprintf(why, n, "device %d:%d vs %d:%d", (int)a->device.device_type, (int)a->device.device_id,
             (int)b->device.device_type, (int)b->device.device_id);
    return 0;
  }
  if (a->nbytes != b->nbytes || (a->nbytes && memcmp(a->bytes, b->bytes, a->nbytes) != 0)) {
    size_t at = 0;
    while (at < a->nbytes && at < b->nbytes && a->bytes[at] == b->bytes[at]) at++;
    snprintf(why, n, "elements differ (first at element %zu of %zu)", a->elem ? at / a->elem : at,
             a->elem ? a->nbytes / a->elem : a->nbytes);
    return 0;
  }
  return 1;
}

static void take_states(const kvc_cache* c, uint32_t layer, snap_layer* L) {
  if (L->info_code != KVC_OK || !snap_kind_is_linear(L->info.kind)) return;
  L->num_states = L->info.num_states;
  L->states = calloc(L->num_states ? L->num_states : 1, sizeof *L->states);
  if (!L->states) abort();
  for (uint32_t i = 0; i < L->num_states; i++) {
    snap_state* S = &L->states[i];
    kvc_tensor cv, rv;
    memset(&cv, 0, sizeof cv);
    memset(&rv, 0, sizeof rv);
    S->view_code = take_code(kvc_cache_state_view(c, layer, i, &cv, &rv));
    if (S->view_code == KVC_OK) {
      snap_tensor_take(&cv, &S->conv, NULL);
      snap_tensor_take(&rv, &S->rec, NULL);
    }
    S->prev = -7;
    S->prev_code = take_code(kvc_cache_has_previous_state(c, (int32_t)layer, (int32_t)i, &S->prev));
  }
  L->prev_all = -7;
  L->prev_all_code = take_code(kvc_cache_has_previous_state(c, (int32_t)layer, -1, &L->prev_all));
}

void snap_take(const kvc_cache* c, cache_snap* s) {
  memset(s, 0, sizeof *s);
  s->num_layers = kvc_cache_num_layers(c);
  s->layers = calloc(s->num_layers ? s->num_layers : 1, sizeof *s->layers);
  if (!s->layers) abort();
  for (uint32_t i = 0; i < s->num_layers; i++) {
    snap_layer* L = &s->layers[i];
    L->info.struct_size = sizeof L->info;
    L->info_code = take_code(kvc_cache_layer_info(c, i, &L->info));
    kvc_kv kv;
    memset(&kv, 0, sizeof kv);
    L->view_code = take_code(kvc_cache_layer_view(c, i, &kv));
    if (L->view_code == KVC_OK) {
      snap_tensor_take(&kv.key, &L->key, NULL);
      snap_tensor_take(&kv.value, &L->value, NULL);
    }
    L->seq = L->max_length = -7;
    L->seq_code = take_code(kvc_cache_seq_length(c, i, &L->seq));
    kvc_error_destroy(kvc_cache_max_length(c, (int32_t)i, &L->max_length));
    for (int q = 0; q < SNAP_NQ; q++) {
      L->mask_len[q] = L->mask_off[q] = L->usable[q] = -7;
      L->mask_code[q] = take_code(kvc_cache_mask_sizes(c, snap_queries[q], i, &L->mask_len[q], &L->mask_off[q]));
      kvc_error_destroy(kvc_cache_usable_length(c, snap_queries[q], i, &L->usable[q]));
    }
    take_states(c, i, L);
    kvc_tensor ix;
    memset(&ix, 0, sizeof ix);
    L->indexer_code = take_code(kvc_cache_indexer_view(c, i, &ix));
    if (L->indexer_code == KVC_OK) snap_tensor_take(&ix, &L->indexer, NULL);
  }
  s->max_all = s->batch = -7;
  kvc_error_destroy(kvc_cache_max_length(c, KVC_ALL_LAYERS, &s->max_all));
  s->batch_code = take_code(kvc_cache_batch_size(c, &s->batch));
  s->mem.struct_size = sizeof s->mem;
  s->mem_code = take_code(kvc_cache_memory(c, &s->mem));
  s->beyond_seq = s->beyond_max = s->beyond_mask_len = s->beyond_mask_off = -7;
  kvc_error_destroy(kvc_cache_seq_length(c, s->num_layers, &s->beyond_seq));
  kvc_error_destroy(kvc_cache_max_length(c, (int32_t)s->num_layers, &s->beyond_max));
  kvc_error_destroy(kvc_cache_mask_sizes(c, 3, s->num_layers, &s->beyond_mask_len, &s->beyond_mask_off));
  s->prev_last = -7;
  s->prev_last_code = take_code(kvc_cache_has_previous_state(c, KVC_ALL_LAYERS, -1, &s->prev_last));
}

void snap_free(cache_snap* s) {
  for (uint32_t i = 0; s->layers && i < s->num_layers; i++) {
    snap_layer* L = &s->layers[i];
    snap_tensor_free(&L->key);
    snap_tensor_free(&L->value);
    snap_tensor_free(&L->indexer);
    for (uint32_t j = 0; L->states && j < L->num_states; j++) {
      snap_tensor_free(&L->states[j].conv);
      snap_tensor_free(&L->states[j].rec);
    }
    free(L->states);
  }
  free(s->layers);
  memset(s, 0, sizeof *s);
}

#define SNAP_FIELD(fa, fb, ...)                                                                    \
  do {                                                                                             \
    if ((int64_t)(fa) != (int64_t)(fb)) {                                                          \
      int k_ = snprintf(why, n, __VA_ARGS__);                                                      \
      if (k_ >= 0 && (size_t)k_ < n) snprintf(why + k_, n - (size_t)k_, ": %lld vs %lld", (long long)(fa), \
                                              (long long)(fb));                                    \
      return 0;                                                                                    \
    }                                                                                              \
  } while (0)

int snap_info_equal(const kvc_layer_info* a, const kvc_layer_info* b, uint32_t l, unsigned flags, char* why,
                    size_t n) {
#define INFO(f) SNAP_FIELD(a->f, b->f, "layer %u info." #f, l)
  INFO(kind);
  INFO(window);
  INFO(max_cache_len);
  INFO(capacity);
  INFO(is_initialized);
  INFO(is_sliding);
  INFO(is_chunked);
  INFO(is_compileable);
  INFO(records_past);
  INFO(dtype);
  INFO(batch_size);
  INFO(num_kv_heads);
  INFO(k_head_dim);
  INFO(v_head_dim);
  INFO(seq_length);
  if (!(flags & SNAP_IGNORE_QUANT_STORE) || a->kind != KVC_LAYER_QUANTIZED) INFO(stored_length);
  INFO(is_linear);
  if (!(flags & SNAP_IGNORE_TIERS)) INFO(is_offloaded);
  INFO(has_previous_state);
  INFO(num_states);
  INFO(conv_kernel_size);
  INFO(num_sink_tokens);
  INFO(quantized_length);
#undef INFO
  return 1;
}

static int tensor_field(const snap_tensor* a, const snap_tensor* b, const char* what, char* why, size_t n) {
  char sub[160];
  if (snap_tensor_equal(a, b, 0, sub, sizeof sub)) return 1;
  snprintf(why, n, "%s: %s", what, sub);
  return 0;
}

static int layer_equal(const snap_layer* x, const snap_layer* y, uint32_t l, unsigned flags, char* why, size_t n) {
  char what[64];
  SNAP_FIELD(x->info_code, y->info_code, "layer %u layer_info code", l);
  if (x->info_code == KVC_OK && !snap_info_equal(&x->info, &y->info, l, flags, why, n)) return 0;
  SNAP_FIELD(x->view_code, y->view_code, "layer %u layer_view code", l);
  if (!(flags & SNAP_IGNORE_QUANT_STORE) || x->info.kind != KVC_LAYER_QUANTIZED) {
    snprintf(what, sizeof what, "layer %u stored keys", l);
    if (!tensor_field(&x->key, &y->key, what, why, n)) return 0;
    snprintf(what, sizeof what, "layer %u stored values", l);
    if (!tensor_field(&x->value, &y->value, what, why, n)) return 0;
  }
  SNAP_FIELD(x->seq_code, y->seq_code, "layer %u seq_length code", l);
  SNAP_FIELD(x->seq, y->seq, "layer %u seq_length", l);
  SNAP_FIELD(x->max_length, y->max_length, "layer %u max_length", l);
  for (int q = 0; q < SNAP_NQ; q++) {
    SNAP_FIELD(x->mask_code[q], y->mask_code[q], "layer %u mask_sizes(%lld) code", l, (long long)snap_queries[q]);
    SNAP_FIELD(x->mask_len[q], y->mask_len[q], "layer %u mask_sizes(%lld) kv_length", l, (long long)snap_queries[q]);
    SNAP_FIELD(x->mask_off[q], y->mask_off[q], "layer %u mask_sizes(%lld) kv_offset", l, (long long)snap_queries[q]);
    SNAP_FIELD(x->usable[q], y->usable[q], "layer %u usable_length(%lld)", l, (long long)snap_queries[q]);
  }
  SNAP_FIELD(x->num_states, y->num_states, "layer %u state pairs", l);
  for (uint32_t i = 0; i < x->num_states; i++) {
    const snap_state *a = &x->states[i], *b = &y->states[i];
    SNAP_FIELD(a->view_code, b->view_code, "layer %u state %u state_view code", l, i);
    snprintf(what, sizeof what, "layer %u conv state %u", l, i);
    if (!tensor_field(&a->conv, &b->conv, what, why, n)) return 0;
    snprintf(what, sizeof what, "layer %u recurrent state %u", l, i);
    if (!tensor_field(&a->rec, &b->rec, what, why, n)) return 0;
    SNAP_FIELD(a->prev_code, b->prev_code, "layer %u has_previous_state(%u) code", l, i);
    SNAP_FIELD(a->prev, b->prev, "layer %u has_previous_state(%u)", l, i);
  }
  SNAP_FIELD(x->prev_all_code, y->prev_all_code, "layer %u has_previous_state(-1) code", l);
  SNAP_FIELD(x->prev_all, y->prev_all, "layer %u has_previous_state(-1)", l);
  SNAP_FIELD(x->indexer_code, y->indexer_code, "layer %u indexer_view code", l);
  snprintf(what, sizeof what, "layer %u indexer keys", l);
  return tensor_field(&x->indexer, &y->indexer, what, why, n);
}

int snap_equal(const cache_snap* a, const cache_snap* b, unsigned flags, char* why, size_t n) {
  SNAP_FIELD(a->num_layers, b->num_layers, "num_layers");
  for (uint32_t l = 0; l < a->num_layers; l++)
    if (!layer_equal(&a->layers[l], &b->layers[l], l, flags, why, n)) return 0;
  SNAP_FIELD(a->max_all, b->max_all, "max_length(KVC_ALL_LAYERS)");
  SNAP_FIELD(a->batch_code, b->batch_code, "batch_size code");
  SNAP_FIELD(a->batch, b->batch, "batch_size");
  SNAP_FIELD(a->mem_code, b->mem_code, "memory code");
  if (!(flags & SNAP_IGNORE_QUANT_STORE)) SNAP_FIELD(a->mem.bytes_used, b->mem.bytes_used, "memory.bytes_used");
  SNAP_FIELD(a->mem.bytes_quantized, b->mem.bytes_quantized, "memory.bytes_quantized");
  SNAP_FIELD(a->mem.bytes_state, b->mem.bytes_state, "memory.bytes_state");
  if (!(flags & SNAP_IGNORE_RESERVED)) {
    SNAP_FIELD(a->mem.bytes_reserved, b->mem.bytes_reserved, "memory.bytes_reserved");
    if (!(flags & SNAP_IGNORE_TIERS)) {
      SNAP_FIELD(a->mem.bytes_device, b->mem.bytes_device, "memory.bytes_device");
      SNAP_FIELD(a->mem.bytes_host, b->mem.bytes_host, "memory.bytes_host");
    }
  }
  SNAP_FIELD(a->beyond_seq, b->beyond_seq, "seq_length(num_layers)");
  SNAP_FIELD(a->beyond_max, b->beyond_max, "max_length(num_layers)");
  SNAP_FIELD(a->beyond_mask_len, b->beyond_mask_len, "mask_sizes(3, num_layers) kv_length");
  SNAP_FIELD(a->beyond_mask_off, b->beyond_mask_off, "mask_sizes(3, num_layers) kv_offset");
  SNAP_FIELD(a->prev_last_code, b->prev_last_code, "has_previous_state(KVC_ALL_LAYERS) code");
  SNAP_FIELD(a->prev_last, b->prev_last, "has_previous_state(KVC_ALL_LAYERS)");
  return 1;
}

int snap_unchanged(const kvc_cache* c, const cache_snap* before, unsigned flags) {
  cache_snap now;
  char why[512];
  snap_take(c, &now);
  int same = snap_equal(before, &now, flags, why, sizeof why);
  if (!same) fprintf(stderr, "  the cache changed: %s\n", why);
  snap_free(&now);
  return same;
}
