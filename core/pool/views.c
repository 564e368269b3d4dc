/*
 * core/pool/views.c: what attention kernels read: the K/V storage of a
 * layer (zero-copy, NHD or HND), the block tables of a batch (padded or CSR,
 * copied once into a pool-owned device buffer per group and format), and
 * the gather of a sequence into [1, heads, tokens, head_dim] tensors. Also
 * the whole-block copies copy-on-write and checkpoints use.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool_internal.h"

int kvci_pool_issue_copies(kvc_pool* pool, const kvc_copy_4d* c, int32_t count, kvci_fault* fault) {
  const kvc_backend* b = pool->backend;
  if (b->copy_4d_batch && count > 1)
    return kvci_fault_note(fault, b, b->copy_4d_batch(b->ctx, &pool->exec, c, count), "copy_4d_batch");
  int rc = 0;
  for (int32_t i = 0; i < count && !rc; i++)
    rc = kvci_fault_note(fault, b,
                         b->copy_4d(b->ctx, &pool->exec, c[i].dst, c[i].dst_strides, c[i].src, c[i].src_strides,
                                    c[i].shape, c[i].elem_size),
                         "copy_4d");
  return rc;
}

/* A block (or slot) of one layer's K or V as a flat 4-D copy: it is contiguous in either layout. */
static void flat_copy(kvc_copy_4d* c, const kvc_pool* p, const kvci_pool_layer* l, int kv, uint32_t src,
                      uint32_t dst) {
  int64_t per = kv ? l->v_block : l->k_block;
  size_t elem = l->elem;
  memset(c, 0, sizeof(*c));
  c->dst = kvci_pool_block_at(p, l, kv, dst);
  c->src = kvci_pool_block_at(p, l, kv, src);
  for (int i = 0; i < 4; i++) {
    c->shape[i] = i == 3 ? per : 1;
    c->dst_strides[i] = c->src_strides[i] = i == 3 ? 1 : per;
  }
  c->elem_size = elem;
}

void kvci_pool_copy_block(kvc_pool* pool, uint32_t group, uint32_t src, uint32_t dst) {
  const kvci_pool_group* g = &pool->groups[group];
  size_t n = 2 * (size_t)g->num_layers, k = 0;
  kvc_copy_4d* c = (kvc_copy_4d*)malloc(n * sizeof(*c));
  for (uint32_t i = 0; i < g->num_layers; i++) {
    kvci_pool_layer* l = &pool->layers[g->layers[i]];
    kvc_copy_4d one[2];
    kvc_copy_4d* at = c ? c + k : one; /* without memory for one batch: the same copies one layer at a time */
    for (int kv = 0; kv < kvci_pool_parts(l); kv++) flat_copy(&at[kv], pool, l, kv, src, dst);
    if (!c) kvci_pool_issue_copies(pool, one, kvci_pool_parts(l), &pool->fault);
    k += (size_t)kvci_pool_parts(l);
  }
  if (c) kvci_pool_issue_copies(pool, c, (int32_t)k, &pool->fault);
  free(c);
}

void kvci_pool_zero_slot(kvc_pool* pool, uint32_t group, uint32_t slot) {
  const kvci_pool_group* g = &pool->groups[group];
  const kvc_backend* b = pool->backend;
  for (uint32_t i = 0; i < g->num_layers; i++) {
    kvci_pool_layer* l = &pool->layers[g->layers[i]];
    kvc_copy_4d c[2];
    flat_copy(&c[0], pool, l, 0, slot, slot);
    flat_copy(&c[1], pool, l, 1, slot, slot);
    for (int k = 0; k < 2; k++)
      kvci_fault_note(&pool->fault, b,
                      b->fill_zero_4d(b->ctx, &pool->exec, c[k].dst, c[k].dst_strides, c[k].shape, c[k].elem_size),
                      "fill_zero_4d");
  }
}

kvc_error* kvc_pool_layer_storage(const kvc_pool* pool, uint32_t layer, kvc_pool_layout layout, kvc_kv* out) {
  static const char* FN = "kvc_pool_layer_storage";
  KVCI_GUARD_SHARED(kvci_guard_of(pool), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  if (layer >= pool->num_layers)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %u but the pool has %u layers", FN, layer, pool->num_layers);
  if (layout != KVC_POOL_LAYOUT_NHD && layout != KVC_POOL_LAYOUT_HND)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layout is %d; it must be KVC_POOL_LAYOUT_NHD (0) or "
                    "KVC_POOL_LAYOUT_HND (1)", FN, (int)layout);
  const kvci_pool_layer* l = &pool->layers[layer];
  if (kvci_pool_is_recurrent(&pool->groups[l->group]))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layer %u is in group %u, a recurrent group, which has no K/V "
                    "blocks (use kvc_pool_recurrent_state)", FN, layer, l->group);
  kvc_tensor* t[2] = {&out->key, &out->value};
  void* base[2] = {l->k, l->v};
  /* fp8 codes as uint8, the dtype vLLM gives its own fp8 cache tensors (and every DLPack reader knows). */
  const kvc_data_type codes = {KVC_TYPE_CODE_UINT, 8, 1};
  memset(&out->value, 0, sizeof out->value); /* a latent layer has no V */
  for (int kv = 0; kv < kvci_pool_parts(l); kv++) {
    memset(t[kv], 0, sizeof(*t[kv]));
    t[kv]->data = base[kv];
    t[kv]->device = pool->device;
    t[kv]->ndim = 4;
    t[kv]->dtype = kvci_pool_is_fp8(l) ? codes : kvc_dtype_to_data_type(pool->dtype);
    /* The descriptors live in the pool (const only for the caller: views never change them). */
    t[kv]->shape = (int64_t*)l->shape[layout][kv];
    t[kv]->strides = (int64_t*)l->strides[layout][kv];
  }
  return NULL;
}

/* Makes the group's table buffer of `format` hold `bytes` (it only grows). -1: out of memory, nothing changed. */
static int table_room(kvc_pool* p, kvci_pool_group* g, int format, size_t bytes) {
  if (bytes <= g->table_bytes[format]) return 0;
  size_t n = g->table_bytes[format] ? g->table_bytes[format] : 256;
  while (n < bytes) n *= 2;
  void* buf = p->backend->alloc_zeroed(p->backend->ctx, &p->exec, n);
  if (!buf) return -1;
  if (g->table_buf[format]) p->backend->free(p->backend->ctx, &p->exec, g->table_buf[format]);
  g->table_buf[format] = buf;
  g->table_bytes[format] = n;
  return 0;
}

/* Moves `bytes` of host data into the device buffer: directly on the CPU, else through a host-tier staging
   buffer released stream-ordered (a reused one could be overwritten while a copy still reads it). A failed copy
   or wait is noted in `f`. */
static int table_upload(kvc_pool* p, void* dst, const int32_t* host, size_t bytes, kvci_fault* f) {
  const kvc_backend* b = p->backend;
  if (p->device.device_type == KVC_DEVICE_CPU) {
    memcpy(dst, host, bytes);
    return 0;
  }
  void* stage = b->host_alloc ? b->host_alloc(b->ctx, &p->exec, bytes) : b->host_alloc_zeroed(b->ctx, &p->exec, bytes);
  if (!stage) return -1;
  memcpy(stage, host, bytes);
  int64_t shape[4] = {1, 1, 1, (int64_t)(bytes / sizeof(int32_t))}, st[4] = {shape[3], shape[3], shape[3], 1};
  int rc = kvci_fault_note(f, b, b->copy_tier_4d(b->ctx, &p->exec, 0, dst, st, stage, st, shape, sizeof(int32_t)),
                           "copy_tier_4d");
  if (!rc) rc = kvci_fault_note(f, b, b->tier_wait(b->ctx, &p->exec), "tier_wait");
  b->host_free(b->ctx, &p->exec, stage);
  return rc;
}

static void int_tensor(kvc_tensor* t, const kvc_pool* p, void* data, int64_t* shape, int ndim) {
  memset(t, 0, sizeof(*t));
  kvc_data_type i32 = {KVC_TYPE_CODE_INT, 32, 1};
  t->data = data;
  t->device = p->device;
  t->ndim = ndim;
  t->dtype = i32;
  t->shape = shape;
}

kvc_error* kvc_pool_block_table(kvc_pool* pool, const kvc_pool_sequence* const* seqs, size_t num_sequences,
                                uint32_t group, kvc_pool_table_format format, kvc_pool_table* out) {
  static const char* FN = "kvc_pool_block_table";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  kvc_error* refused = kvci_pool_check_usable(FN, pool);
  if (refused) return refused;
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  if (!seqs && num_sequences)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences is NULL but num_sequences is %zu", FN, num_sequences);
  if (group >= pool->num_groups)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: group is %u but the pool has %u groups", FN, group, pool->num_groups);
  kvci_pool_group* g = &pool->groups[group];
  if (kvci_pool_is_recurrent(g))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: group %u is recurrent: it has no block table", FN, group);
  if (format != KVC_POOL_TABLE_PADDED && format != KVC_POOL_TABLE_CSR)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: format is %d; it must be KVC_POOL_TABLE_PADDED (0) or "
                    "KVC_POOL_TABLE_CSR (1)", FN, (int)format);
  if (num_sequences > (size_t)INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_sequences is %zu; at most 2^31 - 1", FN, num_sequences);
  uint64_t widest = 0, total = 0;
  for (size_t i = 0; i < num_sequences; i++) {
    if (!seqs[i]) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] is NULL", FN, i);
    if (seqs[i]->pool != pool)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequences[%zu] belongs to another pool", FN, i);
    uint64_t nb = seqs[i]->groups[group].num_blocks;
    if (nb > widest) widest = nb;
    total += nb;
  }
  /* PADDED: [batch, widest]. CSR: indptr [batch + 1], indices [total], last_page_len [batch]. */
  uint64_t entries = format == KVC_POOL_TABLE_PADDED ? num_sequences * widest : 2 * num_sequences + 1 + total;
  if (entries > (UINT64_C(1) << 40) / sizeof(int32_t))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: the tables would hold %" PRIu64 " entries", FN, entries);
  size_t bytes = (size_t)(entries ? entries : 1) * sizeof(int32_t);
  int32_t* host = (int32_t*)calloc(entries ? entries : 1, sizeof(int32_t));
  if (!host) return kvci_err_oom();
  if (format == KVC_POOL_TABLE_PADDED) {
    for (size_t i = 0; i < num_sequences; i++) {
      const kvci_pool_seq_group* sg = &seqs[i]->groups[group];
      for (uint64_t k = 0; k < sg->num_blocks; k++) host[i * widest + k] = (int32_t)sg->table[k];
    }
  } else {
    int32_t* indptr = host;
    int32_t* indices = host + num_sequences + 1;
    int32_t* last = indices + total;
    uint64_t at = 0;
    for (size_t i = 0; i < num_sequences; i++) {
      const kvci_pool_seq_group* sg = &seqs[i]->groups[group];
      indptr[i] = (int32_t)at;
      for (uint64_t k = 0; k < sg->num_blocks; k++) indices[at++] = (int32_t)sg->table[k];
      last[i] = sg->num_blocks ? (int32_t)(seqs[i]->length - (sg->num_blocks - 1) * g->block_size) : 0;
    }
    indptr[num_sequences] = (int32_t)at;
  }
  kvci_fault f = {0};
  int rc = table_room(pool, g, format, bytes);
  if (!rc) rc = table_upload(pool, g->table_buf[format], host, bytes, &f);
  free(host);
  if (f.fresh) return kvci_fault_discard(FN, &f, pool->backend, "no table was made; the pool is unchanged");
  if (rc)
    return kvci_err(KVC_ERROR_OUT_OF_MEMORY, "%s: the %s backend could not hold or copy %zu bytes of block tables",
                    FN, pool->backend->name, bytes);
  int64_t(*shape)[2] = g->table_shape[format];
  memset(out, 0, sizeof(*out));
  char* buf = (char*)g->table_buf[format];
  if (format == KVC_POOL_TABLE_PADDED) {
    shape[0][0] = (int64_t)num_sequences;
    shape[0][1] = (int64_t)widest;
    int_tensor(&out->table, pool, buf, shape[0], 2);
  } else {
    shape[0][0] = (int64_t)total;
    shape[1][0] = (int64_t)num_sequences + 1;
    shape[2][0] = (int64_t)num_sequences;
    int_tensor(&out->indptr, pool, buf, shape[1], 1);
    int_tensor(&out->table, pool, buf + (num_sequences + 1) * sizeof(int32_t), shape[0], 1);
    int_tensor(&out->last_page_len, pool, buf + (num_sequences + 1 + total) * sizeof(int32_t), shape[2], 1);
  }
  return NULL;
}

kvc_error* kvc_pool_gather(const kvc_pool_sequence* s, uint32_t layer, const kvc_tensor* keys,
                           const kvc_tensor* values) {
  static const char* FN = "kvc_pool_gather";
  KVCI_GUARD_SHARED(kvci_guard_of(s ? s->pool : NULL), FN);
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  kvc_pool* p = s->pool;
  kvc_error* poisoned = kvci_pool_refusal(FN, p);
  if (poisoned) return poisoned;
  if (layer >= p->num_layers)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %u but the pool has %u layers", FN, layer, p->num_layers);
  const kvci_pool_layer* l = &p->layers[layer];
  const kvci_pool_group* g = &p->groups[l->group];
  if (kvci_pool_is_recurrent(g))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layer %u is in group %u, a recurrent group: it has no K/V to "
                    "gather (use kvc_pool_recurrent_state)", FN, layer, l->group);
  const kvc_tensor* t[2] = {keys, values};
  static const char* names[2] = {"keys", "values"};
  int64_t dims[2] = {l->kdim, l->vdim};
  const int parts = kvci_pool_parts(l);
  if (parts == 1 && values)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: values is set but layer %u is in group %u, a latent group: one "
                    "row per token (keys) and no V; pass NULL", FN, layer, l->group);
  for (int kv = 0; kv < parts; kv++) {
    kvc_error* e = kvci_check_input_tensor(FN, names[kv], -1, t[kv], &p->device);
    if (e) return e;
    int64_t want[4] = {1, l->heads, (int64_t)s->length, dims[kv]};
    const int64_t* sh = t[kv]->shape;
    if (sh[0] != want[0] || sh[1] != want[1] || sh[2] != want[2] || sh[3] != want[3])
      return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                      "] but layer %u of this sequence needs [1, %" PRId64 ", %" PRIu64 ", %" PRId64 "]", FN,
                      names[kv], sh[0], sh[1], sh[2], sh[3], layer, l->heads, s->length, dims[kv]);
    if (kvc_dtype_from_data_type(t[kv]->dtype) != p->dtype)
      return kvci_err(KVC_ERROR_DTYPE_MISMATCH, "%s: %s is %s but the pool stores %s", FN, names[kv],
                      kvci_dtype_name(kvc_dtype_from_data_type(t[kv]->dtype)), kvci_dtype_name(p->dtype));
  }
  const kvci_pool_seq_group* sg = &s->groups[l->group];
  for (uint64_t i = 0; i < sg->num_blocks; i++)
    if (!sg->table[i])
      return kvci_err(KVC_ERROR_INVALID_STATE, "%s: group %u gave back the block of tokens [%" PRIu64 ", %" PRIu64
                      ") (they left the window): token %" PRIu64 " has no bytes to gather", FN, l->group,
                      i * g->block_size, (i + 1) * g->block_size, i * g->block_size);
  if (!sg->num_blocks) return NULL;
  size_t n = (size_t)parts * (size_t)sg->num_blocks;
  kvc_copy_4d* c = (kvc_copy_4d*)malloc(n * sizeof(*c));
  float* scales = (float*)malloc(n * sizeof(float));
  if (!c || !scales) {
    free(c);
    free(scales);
    return kvci_err_oom();
  }
  void* base[2] = {l->k, l->v};
  for (int kv = 0; kv < parts; kv++) {
    int64_t dst_st[4];
    kvci_tensor_strides(t[kv], dst_st);
    const int64_t* src_st = l->strides[KVC_POOL_LAYOUT_HND][kv]; /* [block, head, token, dim] */
    char* dst0 = (char*)t[kv]->data + t[kv]->byte_offset;
    for (uint64_t i = 0; i < sg->num_blocks; i++) {
      kvc_copy_4d* x = &c[kv * sg->num_blocks + i];
      scales[kv * sg->num_blocks + i] = l->scale[kv];
      uint64_t first = i * g->block_size, cnt = s->length - first < g->block_size ? s->length - first : g->block_size;
      x->dst = dst0 + (ptrdiff_t)((int64_t)first * dst_st[2]) * (ptrdiff_t)p->elem;
      x->src = (const char*)base[kv] + (size_t)(src_st[0] * sg->table[i]) * l->elem;
      int64_t shape[4] = {1, l->heads, (int64_t)cnt, dims[kv]};
      int64_t ss[4] = {src_st[0], src_st[1], src_st[2], 1};
      memcpy(x->shape, shape, sizeof shape);
      memcpy(x->dst_strides, dst_st, sizeof dst_st);
      memcpy(x->src_strides, ss, sizeof ss);
      x->elem_size = p->elem;
    }
  }
  kvci_fault f = {0}; /* the caller's tensors, not the pool, hold what a failed copy left */
  const kvc_backend* b = p->backend;
  if (kvci_pool_is_fp8(l)) /* the codes decoded: dtype(code * scale); strides count codes on the source side */
    kvci_fault_note(&f, b, b->fp8_decode_4d(b->ctx, &p->exec, c, scales, (int32_t)n, (int32_t)p->dtype),
                    "fp8_decode_4d");
  else
    kvci_pool_issue_copies(p, c, (int32_t)n, &f);
  free(c);
  free(scales);
  return kvci_fault_discard(FN, &f, p->backend, "keys and values hold unspecified bytes; the pool is unchanged");
}
