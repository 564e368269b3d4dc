/*
 * core/kinds/layer_quantized_compact.c: KVC_QUANT_MODE_COMPACT.
 *
 * Tokens are quantized as in incremental mode (layer_quantized_incremental.c
 * does it), but the store keeps only the full-precision residual: the
 * quantized history exists as packed groups alone. Each update dequantizes
 * the history, then copies the residual, into the layer's region of a
 * scratch buffer the cache's compact layers share (struct
 * kvc_quant_scratch), and returns a view of that region. A step therefore
 * costs O(context) dequantization, and the layer holds its codes, scales and
 * residual only; the scratch holds one call's working copies.
 */
#include <stdlib.h>
#include <string.h>

#include "layer_quantized.h"

/* ------------------------------------------------------------ the shared scratch */

/* The cache-wide scratch lives in the quantized kind's slot of the cache. */
#define SCRATCH(c) ((struct kvc_quant_scratch*)(c)->kind_state[KVC_LAYER_QUANTIZED])

kvc_error* kvci_quant_scratch_begin(const kvc_call* call, kvc_cache* c, uint32_t first, uint32_t count) {
  (void)call;
  int any = 0;
  for (uint32_t i = first; i < first + count; i++)
    if (c->layers[i]->kind == KVC_LAYER_QUANTIZED && kvci_quant_compact(c->layers[i])) any = 1;
  if (!any) return NULL;
  if (!SCRATCH(c) && !(c->kind_state[KVC_LAYER_QUANTIZED] = calloc(1, sizeof(struct kvc_quant_scratch))))
    return kvci_err_oom();
  SCRATCH(c)->used = 0;
  return NULL;
}

uint64_t kvci_quant_scratch_bytes(const kvc_cache* c) {
  /* A staged buffer (a failed call's) is not counted: it is adopted or replaced by the next update. */
  return SCRATCH(c) ? (uint64_t)SCRATCH(c)->bytes : 0;
}

void kvci_quant_scratch_free(kvc_cache* c) {
  struct kvc_quant_scratch* s = SCRATCH(c);
  if (!s) return;
  const kvc_backend* be = c->backend;
  if (s->buf) be->free(be->ctx, &c->exec, s->buf);
  if (s->staged) be->free(be->ctx, &c->exec, s->staged);
  free(s);
  c->kind_state[KVC_LAYER_QUANTIZED] = NULL;
}

/* Claims `bytes` of the call's scratch (room phase), staging a larger buffer when the current one is too small. */
static int claim_region(const kvc_cache* c, uint64_t bytes, size_t* offset) {
  struct kvc_quant_scratch* s = SCRATCH(c);
  const kvc_backend* be = c->backend;
  uint64_t off = ((uint64_t)s->used + 63) & ~(uint64_t)63, need;
  if (__builtin_add_overflow(off, bytes, &need) || need > (uint64_t)SIZE_MAX / 4) return -1;
  if (need > s->bytes && need > s->staged_bytes) {
    /* Geometric growth: a context that grows token by token reallocates O(log n) times. */
    uint64_t grown = 2 * (uint64_t)(s->bytes > s->staged_bytes ? s->bytes : s->staged_bytes);
    if (grown < need) grown = need;
    void* p = be->alloc_zeroed(be->ctx, &c->exec, (size_t)grown);
    if (!p && grown > need) p = be->alloc_zeroed(be->ctx, &c->exec, (size_t)(grown = need));
    if (!p) return -1;
    if (s->staged) be->free(be->ctx, &c->exec, s->staged);
    s->staged = p;
    s->staged_bytes = (size_t)grown;
  }
  s->used = (size_t)need;
  *offset = (size_t)off;
  return 0;
}

/* ------------------------------------------------------------ dequantization */

static int64_t dim_of(const kvc_layer* l, int which) { return which ? l->v_dim : l->k_dim; }

/*
 * Tokens lo..hi-1 of `units` quantized units from unit `first` of every
 * batch row of tensor `which`, dequantized by the backend into a
 * [B][H][slots][D] buffer of the layer's dtype (`dst` is element (0, 0, 0,
 * 0)): token i of unit first + u goes to slot `to` + u * unit_tokens + i - lo.
 * One dequantize_groups job for every row and unit: one launch on a device.
 */
static void dequantize_units(const kvc_cache* c, const kvc_layer* l, int which, int64_t first, int64_t units,
                             int64_t lo, int64_t hi, void* dst, int64_t slots, int64_t to) {
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  const int64_t g = kvci_quant_opts(l)->q_group_size, d = dim_of(l, which), ut = kvci_quant_unit_tokens(l, which);
  const int channel = kvci_quant_per_channel(kvci_quant_opts(l), which);
  if (units <= 0 || l->batch <= 0) return;
  kvc_dequantize_job job;
  memset(&job, 0, sizeof job);
  job.spec = kvci_quant_spec(l, which);
  job.group = g;
  /* Per-channel: value i of a group is token i of the unit (lo..hi-1 written); per-token: all g elements of the
     unit's one token. */
  job.lo = channel ? lo : 0;
  job.hi = channel ? hi : g;
  job.records.base = (unsigned char*)x->rows[which].ptr + first * x->unit_bytes[which];
  job.records.call_strides[0] = x->rows[which].row_bytes;
  job.records.call_strides[1] = x->unit_bytes[which];
  job.records.record_stride = kvci_quant_record_bytes(l, g);
  job.dst = (unsigned char*)dst + to * d * (int64_t)l->elem;
  kvc_quant_span* s = &job.dst_span;
  s->calls[0] = l->batch;
  s->calls[1] = units;
  s->call_strides[0] = l->heads * slots * d;
  s->call_strides[1] = ut * d;
  s->groups[0] = l->heads;
  s->groups[1] = channel ? d : d / g;
  s->group_strides[0] = slots * d;
  s->group_strides[1] = channel ? 1 : g;
  s->value_stride = channel ? d : 1;
  /* Refuses nothing: the backend quantized these groups, so it has the entry, and dequantizing takes no memory
     (only a failing device fails it, which poisons the cache). */
  KVCI_BE(c, dequantize_groups, &job);
}

/* Dequantized history then residual, into the layer's scratch region. */
static void materialize(const kvc_cache* c, kvc_layer* l) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  const int64_t q = x->quantized, r = kvci_layer_stored(l), len = q + r;
  unsigned char* base = (unsigned char*)x->ret_base;
  if (len == 0 || !base) return; /* nothing to write (and no scratch to point into) */
  for (int w = 0; w < 2; w++) {
    const int64_t d = dim_of(l, w), ut = kvci_quant_unit_tokens(l, w);
    unsigned char* t = base + (w ? (uint64_t)(l->batch * l->heads * len * l->k_dim) * l->elem : 0);
    dequantize_units(c, l, w, 0, x->units[w], 0, ut, t, len, 0);
    if (!r) continue;
    int64_t ss[4], ds[4] = {l->heads * len * d, len * d, d, 1}, shape[4] = {l->batch, l->heads, r, d};
    kvci_store_strides(l, w, ss);
    KVCI_BE(c, copy_4d, t + (size_t)(q * d) * l->elem, ds,
            (const char*)(w ? l->v : l->k) + (size_t)(l->start * d) * l->elem, ss, shape, l->elem);
  }
}

/* ------------------------------------------------------------ the timeline */

/*
 * A prefill leaves a store sized for every token it brought, most of which
 * are now codes: the store is cut to the residual plus room for a block and
 * some steps, so that it costs what the residual does. Best effort (apply
 * cannot fail): when the smaller store cannot be allocated the large one
 * stays. The room kept is at least a block, which crop relies on.
 */
static void shrink_store(const kvc_cache* c, kvc_layer* l) {
  const int64_t stored = kvci_layer_stored(l), want = stored + kvci_quant_block_tokens(l) + 32;
  if (l->cap <= 2 * want) return;
  void *k = NULL, *v = NULL;
  if (kvci_store_alloc(c, l->batch, l->heads, want, l->k_dim, l->v_dim, l->elem, &k, &v)) return;
  kvci_layer_adopt_store(c, l, k, v, want, (kvc_region){l->start, l->end});
}

kvc_error* kvci_quant_compact_prepare(const char* fn, const kvc_cache* c, kvc_layer* l, uint32_t index,
                                     const kvc_tensor* key, const kvc_tensor* value, int64_t n) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  kvc_error* e = kvci_quant_incremental_prepare(fn, c, l, index, key, value, n);
  if (e) return e;
  /* The return holds every token: the history, the residual and the new tokens. */
  uint64_t len = (uint64_t)(x->quantized + kvci_layer_stored(l) + n), bytes;
  if (__builtin_mul_overflow((uint64_t)(l->batch * l->heads) * len, (uint64_t)(l->k_dim + l->v_dim) * l->elem,
                             &bytes) ||
      claim_region(c, bytes, &x->ret_off)) {
    kvci_quant_release_staged(c, x);
    return kvci_err_oom();
  }
  return NULL;
}

kvc_region kvci_quant_compact_apply(const kvc_cache* c, kvc_layer* l, const kvc_tensor* k, const kvc_tensor* v,
                                   int64_t n, const kvc_update_options* o) {
  struct kvc_quant_scratch* s = SCRATCH(c);
  if (s->staged) { /* the first compact layer of the call adopts the grown scratch: older views expire now */
    const kvc_backend* be = c->backend;
    if (s->buf) be->free(be->ctx, &c->exec, s->buf);
    s->buf = s->staged;
    s->bytes = s->staged_bytes;
    s->staged = NULL;
    s->staged_bytes = 0;
  }
  kvc_region r = kvci_quant_incremental_apply(c, l, k, v, n, o);
  shrink_store(c, l);
  /* An empty layer's region has no bytes and the scratch may not exist yet: no offset on NULL (undefined in C). */
  kvci_quant_ext_of(l)->ret_base = s->buf ? (unsigned char*)s->buf + kvci_quant_ext_of(l)->ret_off : NULL;
  materialize(c, l);
  return r;
}

void kvci_quant_compact_set_return(kvc_layer* l, kvc_region r) {
  (void)r;
  const kvc_quant_ext* x = kvci_quant_ext_of(l);
  /* The cache is not reachable from here: apply recorded the region's address. */
  const int64_t len = x->quantized + kvci_layer_stored(l);
  for (int w = 0; w < 2; w++) /* keys, then values, each [B, H, len, D] */
    kvci_quant_set_view(l, w, x->ret_base, w ? (uint64_t)(l->batch * l->heads * len * l->k_dim) * l->elem : 0, len,
                       len);
}

/*
 * Crop into the history: the kept tokens of the block it cuts into become
 * the residual again, as their dequantized values, at the store's first
 * slots (the residual after them is cut anyway). The store has room: it
 * once held that whole block, and capacities never shrink.
 */
void kvci_quant_compact_crop(const kvc_cache* c, kvc_layer* l, int64_t keep) {
  kvc_quant_ext* x = kvci_quant_ext_of(l);
  const int64_t q = x->quantized;
  if (keep >= q) {
    l->end = l->start + (keep - q);
    return;
  }
  const int64_t b = kvci_quant_block_tokens(l), nq = keep / b * b;
  l->start = 0;
  l->end = keep - nq;
  for (int w = 0; w < 2; w++) {
    /* Tokens nq..keep-1 of the history: whole per-token units, or the head of one per-channel unit. */
    const int64_t ut = kvci_quant_unit_tokens(l, w);
    if (keep > nq)
      dequantize_units(c, l, w, nq / ut, (keep - nq + ut - 1) / ut, 0, ut == 1 ? 1 : keep - nq, w ? l->v : l->k,
                       l->cap, 0);
  }
  x->quantized = nq;
  for (int w = 0; w < 2; w++) x->units[w] = nq / kvci_quant_unit_tokens(l, w);
}
