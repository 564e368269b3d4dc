/*
 * core/persist/save_cache.c: the sections of one cache (docs/file-format.md,
 * 'A cache'): its fingerprint, its counters, then per layer its record
 * (generic fields, row buffer sizes, the kind's ext record), its stored
 * keys and values and its row buffers, then each kind's cache-wide state.
 * The layout of the record is load_cache.c's to read back, field by field.
 */
#include <string.h>

#include "persist_internal.h"

/* The generic fields of a layer record, in file order (load_cache.c reads the same list). */
static void layer_record(const kvc_layer* l, kvci_record* r) {
  const int64_t v[15] = {l->initialized != 0, l->dtype,       l->batch,       l->heads,      l->k_dim,
                         l->v_dim,            l->cap,         l->start,       l->end,        l->cum,
                         l->reserve,          l->record_past, l->offloadable, l->offloaded,  l->ext != NULL};
  for (int i = 0; i < 15; i++) kvci_rec_i64(r, v[i]);
  kvc_row_buffer* rb = NULL;
  int n = l->ext ? kvci_layer_rows((kvc_layer*)(uintptr_t)l, &rb) : 0;
  kvci_rec_i64(r, n);
  for (int i = 0; i < n; i++) {
    kvci_rec_i64(r, rb[i].ptr != NULL);
    kvci_rec_i64(r, rb[i].row_bytes);
  }
  if (l->ext && l->ops->ext_save) l->ops->ext_save(l, r);
}

/* The stored region [start, end) of K (which 0) or V (1) as a tensor section. */
static void save_store(kvci_out* out, kvci_stage* st, const kvc_layer* l, uint32_t part, uint32_t index, int which) {
  int64_t d = which ? l->v_dim : l->k_dim, strides[4];
  int64_t shape[4] = {l->batch, l->heads, l->end - l->start, d};
  kvci_store_strides(l, which, strides);
  kvcf_section s;
  memset(&s, 0, sizeof s);
  s.type = which ? KVCF_VALUES : KVCF_KEYS, s.part = part, s.index = index;
  s.payload_bytes = (uint64_t)(shape[0] * shape[1] * shape[2] * shape[3]) * l->elem;
  for (int i = 0; i < 4; i++) s.dims[i] = (uint32_t)shape[i];
  s.dtype = (uint32_t)l->dtype;
  s.elem_bytes = (uint32_t)l->elem;
  kvci_out_begin(out, &s);
  const char* base = (const char*)(which ? l->v : l->k) + (size_t)(l->start * d) * l->elem;
  kvci_xfer_save(out, st, base, strides, shape, l->elem);
  kvci_out_end(out);
}

/* Row buffer j of the layer: [batch][row_bytes] bytes. */
static void save_rows(kvci_out* out, kvci_stage* st, const kvc_layer* l, const kvc_row_buffer* rb, uint32_t part,
                      uint32_t index, uint32_t j) {
  kvcf_section s;
  memset(&s, 0, sizeof s);
  s.type = KVCF_ROWS, s.part = part, s.index = index, s.sub = j;
  s.payload_bytes = (uint64_t)(l->batch * rb->row_bytes);
  s.dims[0] = (uint32_t)l->batch, s.dims[1] = 1, s.dims[2] = 1;
  s.dims[3] = (uint32_t)(rb->row_bytes > UINT32_MAX ? 0 : rb->row_bytes); /* 0: larger than 2^32 (see the size) */
  kvci_out_begin(out, &s);
  const int64_t strides[4] = {rb->row_bytes, rb->row_bytes, rb->row_bytes, 1};
  const int64_t shape[4] = {l->batch, 1, 1, rb->row_bytes};
  kvci_xfer_save(out, st, rb->ptr, strides, shape, 1);
  kvci_out_end(out);
}

static void save_layer(kvci_out* out, kvci_stage* st, const kvc_layer* l, uint32_t part, uint32_t index) {
  kvci_record r = {0};
  layer_record(l, &r);
  kvci_out_record(out, KVCF_LAYER, part, index, &r);
  if (l->initialized) {
    save_store(out, st, l, part, index, 0);
    save_store(out, st, l, part, index, 1);
  }
  kvc_row_buffer* rb = NULL;
  int n = l->ext ? kvci_layer_rows((kvc_layer*)(uintptr_t)l, &rb) : 0;
  for (int j = 0; j < n; j++)
    if (rb[j].ptr) save_rows(out, st, l, &rb[j], part, index, (uint32_t)j);
}

void kvci_save_cache(kvci_out* out, const kvc_cache* c, uint32_t part) {
  kvci_offload_settle(c); /* a prefetch may still be writing a store */
  kvci_stage st;
  if (kvci_out_stage_open(out, c->backend, &c->exec, c->device, &st)) return;
  kvci_record r = {0};
  kvci_fingerprint_write(c, &r);
  kvci_out_record(out, KVCF_FINGERPRINT, part, 0, &r);
  kvci_rec_i64(&r, c->reserve);
  kvci_rec_i64(&r, c->accepted_tokens);
  kvci_out_record(out, KVCF_CACHE_STATE, part, 0, &r);
  for (uint32_t i = 0; i < c->num_layers && !out->err; i++) save_layer(out, &st, c->layers[i], part, i);
  for (size_t k = 0; kvci_kind_at(k); k++) {
    const kvc_kind* d = kvci_kind_at(k);
    if (!d->save_state || !c->kind_state[d->id]) continue;
    d->save_state(c, &r);
    kvci_out_record(out, KVCF_KIND_STATE, part, (uint32_t)d->id, &r);
  }
  kvci_stage_close(&st);
}
