/*
 * core/pool/write.c: kvc_pool_write, a step's K/V through a slot mapping.
 *
 * One row copy job per layer and K/V, all handed to the backend at once
 * (copy_rows_batch: one kernel launch on a GPU; backends without it get
 * copy_rows per job). A slot s of a group with block size B is token s % B
 * of block s / B; in the pool's layout that token of every head is one
 * "row" of copy_rows: NHD row s with row stride heads * dim, HND row
 * (s / B) * heads * B + s % B with row stride dim, its heads B * dim apart.
 * Everything is checked before the first byte moves. The checks and the
 * jobs serve kvc_pool_write_layer (write_layer.c) too.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool_internal.h"

static int cmp_i64(const void* a, const void* b) {
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return (x > y) - (x < y);
}

kvc_error* kvci_pool_check_slots(const char* fn, const kvc_pool* p, uint32_t gi, const int64_t* slots, size_t n,
                                 int64_t* scratch, size_t* valid) {
  const kvci_pool_group* g = &p->groups[gi];
  int64_t lo = g->block_size, hi = (int64_t)g->num_blocks * g->block_size;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    int64_t s = slots[i];
    if (s == -1) continue;
    if (s < lo || s >= hi)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot_mapping[%zu] (token %zu of group %u) is %" PRId64 "; a "
                      "slot is -1 (skip) or in [%" PRId64 ", %" PRId64 ") (block 0 is the null block)", fn,
                      (size_t)gi * n + i, i, gi, s, lo, hi);
    uint32_t b = (uint32_t)(s / g->block_size);
    if (!g->blocks[b].ref)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot_mapping[%zu] (token %zu of group %u) is %" PRId64 ", in "
                      "block %u, which no sequence holds (a stale slot mapping?)", fn, (size_t)gi * n + i, i, gi, s, b);
    if (g->blocks[b].group != gi) /* a shared budget's block of another group: its page holds that group's layers */
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot_mapping[%zu] (token %zu of group %u) is %" PRId64 ", in "
                      "block %u, which group %u holds (the groups share one budget; a stale slot mapping?)", fn,
                      (size_t)gi * n + i, i, gi, s, b, g->blocks[b].group);
    scratch[k++] = s;
  }
  qsort(scratch, k, sizeof(*scratch), cmp_i64);
  for (size_t i = 1; i < k; i++)
    if (scratch[i] == scratch[i - 1])
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot %" PRId64 " appears twice in group %u of slot_mapping; "
                      "each slot is written once per call", fn, scratch[i], gi);
  *valid = k;
  return NULL;
}

kvc_error* kvci_pool_check_input(const char* fn, const kvc_pool* p, const char* base, int64_t index, uint32_t layer,
                                 const kvc_tensor* t, int64_t dim, size_t n) {
  char buf[48];
  const char* arg = kvci_arg_name(buf, base, index);
  kvc_error* e = kvci_check_nd_input(fn, arg, t, &p->device, 3, 3, "[num_tokens, num_kv_heads, head_dim]", 0);
  if (e) return e;
  const kvci_pool_layer* l = &p->layers[layer];
  if (t->shape[0] != (int64_t)n || t->shape[1] != l->heads || t->shape[2] != dim)
    return kvci_err(KVC_ERROR_SHAPE_MISMATCH, "%s: %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 "] but layer %u "
                    "takes [num_tokens %zu, num_kv_heads %" PRId64 ", head_dim %" PRId64 "]", fn, arg, t->shape[0],
                    t->shape[1], t->shape[2], layer, n, l->heads, dim);
  if (kvc_dtype_from_data_type(t->dtype) != p->dtype)
    return kvci_err(KVC_ERROR_DTYPE_MISMATCH, "%s: %s is %s but the pool stores %s", fn, arg,
                    kvci_dtype_name(kvc_dtype_from_data_type(t->dtype)), kvci_dtype_name(p->dtype));
  return NULL;
}

void kvci_pool_row_job(kvc_copy_rows_job* j, const kvc_pool* p, const kvci_pool_layer* l, int kv, const kvc_tensor* t,
                     const int64_t* dst_rows, const int64_t* src_rows, size_t count) {
  const kvci_pool_group* g = &p->groups[l->group];
  int64_t d = kv ? l->vdim : l->kdim;
  int64_t st[3] = {l->heads * d, d, 1};
  if (t->strides) memcpy(st, t->strides, sizeof st);
  int nhd = p->layout == KVC_POOL_LAYOUT_NHD;
  memset(j, 0, sizeof(*j));
  j->dst = kv ? l->v : l->k;
  j->src = (const char*)t->data + t->byte_offset;
  j->dst_rows = dst_rows;
  j->src_rows = src_rows;
  int64_t head = nhd ? d : (int64_t)g->block_size * d;
  int64_t ds[4] = {l->row_unit[kv], head, head, 1}, ss[4] = {st[0], st[1], st[1], st[2]};
  int64_t shape[4] = {1, l->heads, 1, d};
  memcpy(j->dst_strides, ds, sizeof ds);
  memcpy(j->src_strides, ss, sizeof ss);
  memcpy(j->row_shape, shape, sizeof shape);
  j->count = (int64_t)count;
  j->elem_size = p->elem;
}

static int issue_plain_jobs(kvc_pool* pool, const kvc_copy_rows_job* jobs, int32_t count) {
  const kvc_backend* b = pool->backend;
  if (b->copy_rows_batch) return KVCI_BE(pool, copy_rows_batch, jobs, count);
  int rc = 0;
  for (int32_t i = 0; !rc && i < count; i++)
    rc = KVCI_BE(pool, copy_rows, jobs[i].dst, jobs[i].dst_strides, jobs[i].dst_rows, jobs[i].src,
                 jobs[i].src_strides, jobs[i].src_rows, jobs[i].count, jobs[i].row_shape, jobs[i].elem_size);
  return rc;
}

int kvci_pool_issue_row_jobs(kvc_pool* pool, const kvc_copy_rows_job* jobs, const float* scales, int32_t count) {
  int32_t nf = 0;
  for (int32_t i = 0; scales && i < count; i++) nf += scales[i] != 0;
  if (!nf) return issue_plain_jobs(pool, jobs, count);
  if (nf == count) return KVCI_BE(pool, fp8_encode_rows, jobs, scales, count, (int32_t)pool->dtype);
  /* A pool with fp8 and plain layers: two batches (two launches on a GPU). */
  kvc_copy_rows_job* split = (kvc_copy_rows_job*)malloc((size_t)count * sizeof(*split));
  float* fs = (float*)malloc((size_t)nf * sizeof(float));
  int rc = -1;
  if (split && fs) {
    int32_t plain = 0, fp8 = count - nf;
    for (int32_t i = 0; i < count; i++) {
      if (scales[i] != 0) fs[fp8 - (count - nf)] = scales[i], split[fp8++] = jobs[i];
      else split[plain++] = jobs[i];
    }
    rc = issue_plain_jobs(pool, split, count - nf);
    if (!rc) rc = KVCI_BE(pool, fp8_encode_rows, split + (count - nf), fs, nf, (int32_t)pool->dtype);
  }
  free(split);
  free(fs);
  return rc;
}

kvc_error* kvc_pool_write(kvc_pool* pool, const kvc_tensor* keys, const kvc_tensor* values, uint32_t num_layers,
                          const int64_t* slot_mapping, size_t num_tokens) {
  static const char* FN = "kvc_pool_write";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  kvc_error* refused = kvci_pool_check_usable(FN, pool);
  if (refused) return refused;
  if (num_layers != pool->num_layers)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_layers is %u but the pool has %u layers; pass one keys and "
                    "values entry per layer", FN, num_layers, pool->num_layers);
  int needs_values = 0; /* latent and recurrent layers read no V (0.7: values may then be NULL) */
  for (uint32_t i = 0; i < pool->num_layers; i++)
    needs_values |= !kvci_pool_is_recurrent(&pool->groups[pool->layers[i].group]) && kvci_pool_parts(&pool->layers[i]) == 2;
  if (!keys || (!values && needs_values))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL; pass num_layers entries", FN, keys ? "values" : "keys");
  if (!slot_mapping && num_tokens)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot_mapping is NULL but num_tokens is %zu", FN, num_tokens);
  if (num_tokens > (size_t)INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_tokens is %zu; at most 2^31 - 1 per call", FN, num_tokens);
  for (uint32_t i = 0; i < pool->num_layers; i++) {
    const kvci_pool_layer* l = &pool->layers[i];
    if (kvci_pool_is_recurrent(&pool->groups[l->group])) continue;
    kvc_error* e = kvci_pool_check_input(FN, pool, "keys", i, i, &keys[i], l->kdim, num_tokens);
    if (!e && kvci_pool_parts(l) == 2) e = kvci_pool_check_input(FN, pool, "values", i, i, &values[i], l->vdim, num_tokens);
    if (e) return e;
  }
  if (!num_tokens) return NULL;
  /* Per group: the valid slots (sorted, for the duplicate check) and the tokens they come from. */
  size_t ng = pool->num_groups, nl = pool->num_layers;
  int64_t* scratch = (int64_t*)malloc(num_tokens * sizeof(int64_t));
  int64_t* src_rows = (int64_t*)malloc(ng * num_tokens * sizeof(int64_t));
  int64_t* dst_rows = (int64_t*)malloc(2 * nl * num_tokens * sizeof(int64_t)); /* [layer][k|v] */
  size_t* count = (size_t*)calloc(ng, sizeof(size_t));
  kvc_copy_rows_job* jobs = (kvc_copy_rows_job*)malloc(2 * nl * sizeof(*jobs));
  float* scales = (float*)malloc(2 * nl * sizeof(float));
  kvc_error* e = (!scratch || !src_rows || !dst_rows || !count || !jobs || !scales) ? kvci_err_oom() : NULL;
  for (uint32_t g = 0; !e && g < ng; g++) {
    if (kvci_pool_is_recurrent(&pool->groups[g])) continue;
    e = kvci_pool_check_slots(FN, pool, g, slot_mapping + g * num_tokens, num_tokens, scratch, &count[g]);
    size_t k = 0;
    for (size_t i = 0; !e && i < num_tokens; i++)
      if (slot_mapping[g * num_tokens + i] != -1) src_rows[g * num_tokens + k++] = (int64_t)i;
  }
  int32_t nj = 0;
  for (uint32_t li = 0; !e && li < nl; li++) {
    const kvci_pool_layer* l = &pool->layers[li];
    const kvci_pool_group* g = &pool->groups[l->group];
    if (kvci_pool_is_recurrent(g) || !count[l->group]) continue;
    const int64_t* src = src_rows + l->group * num_tokens;
    /*
     * K and V of layers whose rows land at the same indices (one group and the same row geometry: in compact
     * NHD storage every layer of the group; in HND those of the same head count) share one array: a GPU
     * backend uploads each distinct index array once, which keeps a decode step's batch small enough to
     * travel in the launch's parameters.
     */
    const kvc_tensor* in[2] = {&keys[li], values ? &values[li] : NULL};
    for (int kv = 0; kv < kvci_pool_parts(l); kv++) {
      const int64_t* same = NULL;
      for (uint32_t lj = 0; lj <= li && !same; lj++)
        for (int kj = 0; kj < (lj < li ? kvci_pool_parts(&pool->layers[lj]) : kv) && !same; kj++)
          if (kvci_pool_same_rows(&pool->layers[lj], kj, l, kv)) same = dst_rows + (2 * lj + kj) * num_tokens;
      if (!same) {
        int64_t* dst = dst_rows + (2 * li + kv) * num_tokens;
        for (size_t k = 0; k < count[l->group]; k++)
          dst[k] = kvci_pool_slot_row(l, kv, slot_mapping[l->group * num_tokens + (size_t)src[k]], g->block_size);
        same = dst;
      }
      scales[nj] = kvci_pool_job_scale(l, kv);
      kvci_pool_row_job(&jobs[nj++], pool, l, kv, in[kv], same, src, count[l->group]);
    }
  }
  if (!e && nj) {
    kvci_pool_issue_row_jobs(pool, jobs, scales, nj);
    e = kvci_pool_result(FN, pool, e);
  }
  free(scratch);
  free(src_rows);
  free(dst_rows);
  free(count);
  free(jobs);
  free(scales);
  return e;
}
