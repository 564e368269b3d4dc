/*
 * core/kinds/layer_quantized_shared.c: what the quantized kind's modes (layer_quantized_incremental.c,
 * layer_quantized_transformers.c, layer_quantized_compact.c) and the FP8 kind build on: the quantizer's spec
 * per side, the group records' size, the views of dequantized memory, and the staging and scratch buffers.
 * It calls no mode, so the modes and the kind's table (layer_quantized.c) depend on it one way.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "layer_quantized.h"

int kvci_quant_axis(const kvc_quant_options* q, int which) { return which ? q->axis_value : q->axis_key; }

int kvci_quant_per_channel(const kvc_quant_options* q, int which) {
  int axis = kvci_quant_axis(q, which);
  return q->quantizer == KVC_QUANTIZER_QUANTO ? axis == -1 : axis == 0;
}

kvc_quant_spec kvci_quant_spec(const kvc_layer* l, int which) {
  kvc_quant_spec s;
  memset(&s, 0, sizeof s);
  s.quantizer = (int32_t)kvci_quant_opts(l)->quantizer;
  s.nbits = (int32_t)kvci_quant_opts(l)->nbits;
  s.dtype = (int32_t)l->dtype;
  s.axis = (int32_t)kvci_quant_axis(kvci_quant_opts(l), which);
  return s;
}

int64_t kvci_quant_record_bytes(const kvc_layer* l, int64_t group) {
  return kvc_quant_record_bytes(group, (int32_t)kvci_quant_opts(l)->nbits, l->elem);
}

kvc_error* kvci_quant_unsupported(const char* fn, const kvc_cache* c, const char* what, const char* op, int rc) {
  if (rc && rc != KVC_BACKEND_UNSUPPORTED) return kvci_fault_error(fn, c->backend, op, rc, "the cache is unchanged");
  return kvci_err(KVC_ERROR_UNSUPPORTED,
                 "%s: %s layers quantize through the backend table's %s operation, which the %s backend %s; "
                 "use a cache on a backend that implements it, such as the CPU (KVC_DEVICE_CPU)",
                 fn, what, op, c->backend->name, rc ? "refused for this layer" : "does not provide");
}

void kvci_quant_set_view(kvc_layer* l, int which, void* data, uint64_t byte_offset, int64_t len, int64_t cap) {
  kvc_tensor* t = which ? &l->views[1].value : &l->views[1].key;
  const int64_t d = which ? l->v_dim : l->k_dim;
  int64_t* shape = l->shape[1][which];
  int64_t* strides = l->strides[1][which];
  shape[0] = l->batch;
  shape[1] = l->heads;
  shape[2] = len;
  shape[3] = d;
  strides[0] = l->heads * cap * d;
  strides[1] = cap * d;
  strides[2] = d;
  strides[3] = 1;
  t->data = data;
  t->byte_offset = byte_offset;
  t->device = kvci_tier_device(l);
  t->ndim = 4;
  t->dtype = kvc_dtype_to_data_type(l->dtype);
  t->shape = shape;
  t->strides = strides;
}

/* ------------------------------------------------------------ ext state */

int kvci_quant_reserve_scratch(const kvc_cache* c, kvc_quant_ext* x, size_t bytes) {
  if (x->scratch_bytes >= bytes) return 0;
  const kvc_backend* be = c->backend;
  void* p = be->alloc_zeroed(be->ctx, &c->exec, bytes ? bytes : 1);
  if (!p) return -1;
  if (x->scratch) be->free(be->ctx, &c->exec, x->scratch);
  x->scratch = p;
  x->scratch_bytes = bytes;
  return 0;
}

int kvci_quant_stage_rows(const kvc_cache* c, const kvc_layer* l, kvc_quant_ext* x, int which, int64_t row_bytes,
                         int64_t unit_bytes) {
  const kvc_backend* be = c->backend;
  if (x->staged[which]) be->free(be->ctx, &c->exec, x->staged[which]);
  x->staged[which] = NULL;
  uint64_t bytes;
  if (row_bytes <= 0 || __builtin_mul_overflow((uint64_t)row_bytes, (uint64_t)l->batch, &bytes) ||
      bytes > (uint64_t)SIZE_MAX / 2)
    return -1;
  x->staged[which] = be->alloc_zeroed(be->ctx, &c->exec, (size_t)bytes);
  if (!x->staged[which]) return -1;
  x->staged_row_bytes[which] = row_bytes;
  x->staged_unit_bytes[which] = unit_bytes;
  return 0;
}

void kvci_quant_trim_scratch(const kvc_cache* c, kvc_quant_ext* x) {
  /* A prefill's or a flush's working memory is large and not needed again soon; a decode step's is kept. */
  if (x->scratch_bytes > ((size_t)1 << 20)) {
    c->backend->free(c->backend->ctx, &c->exec, x->scratch);
    x->scratch = NULL;
    x->scratch_bytes = 0;
  }
}

void kvci_quant_release_staged(const kvc_cache* c, kvc_quant_ext* x) {
  const kvc_backend* be = c->backend;
  for (int i = 0; i < 2; i++) {
    if (x->staged[i]) be->free(be->ctx, &c->exec, x->staged[i]);
    x->staged[i] = NULL;
  }
  kvci_store_free(c, 0, x->staged_store[0], x->staged_store[1]);
  x->staged_store[0] = x->staged_store[1] = NULL;
  kvci_quant_trim_scratch(c, x);
}

void kvci_quant_drop_returned(const kvc_cache* c, kvc_quant_ext* x) {
  kvci_store_free(c, 0, x->ret[0], x->ret[1]);
  x->ret[0] = x->ret[1] = NULL;
  x->ret_cap = x->ret_start = 0;
  x->ret_bytes = 0;
  x->ret_len = -1;
}

void kvci_quant_drop_groups(const kvc_cache* c, kvc_quant_ext* x) {
  for (int i = 0; i < 2; i++) {
    if (x->rows[i].ptr) c->backend->free(c->backend->ctx, &c->exec, x->rows[i].ptr);
    x->rows[i].ptr = NULL;
    x->rows[i].row_bytes = 0;
    x->units[i] = 0;
  }
}

/* QuantizedLayer.is_croppable by release (the FP8 kind's too). */
int kvci_quant_is_croppable(const kvc_layer* l, uint32_t release) {
  (void)l;
  return release != 0 && release < 52400;
}
