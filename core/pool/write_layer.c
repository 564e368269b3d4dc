/*
 * core/pool/write_layer.c: kvc_pool_write_layer, one layer's K/V of a step
 * through the step's slot mapping (the call a forward pass makes per layer).
 *
 * The write itself is two row copy jobs (K and V) in one backend call, as
 * kvc_pool_write makes them per layer. What must not be paid per layer is
 * the check of the slot mapping (the range and holder of every slot, and a
 * sort for the duplicate check): every layer of a step passes the same
 * mapping, so the group keeps the row it accepted last, with the valid slots
 * and their tokens already listed, and a later call whose row is equal (one
 * memcmp) reuses them. An accepted row can only turn invalid when a block
 * of the group loses its last reference (its slots then belong to nobody):
 * the group counts those releases and the memo holds while the count stands.
 * Range, null block and duplicates depend on the row alone.
 */
#include <inttypes.h>
#include <stdlib.h>

#include "pool_internal.h"

void kvci_pool_slot_memo_free(kvc_pool* pool) {
  for (uint32_t g = 0; g < pool->num_groups; g++) {
    kvci_pool_slot_memo* m = &pool->groups[g].memo;
    free(m->row);
    free(m->src);
    free(m->dst);
    free(m->scratch);
    free(m->vrows);
    memset(m, 0, sizeof(*m));
  }
}

/* Room for rows of n entries (-1: out of memory; the memo is then invalid but intact). */
static int memo_reserve(kvci_pool_slot_memo* m, size_t n) {
  if (n <= m->cap) return 0;
  size_t cap = m->cap ? m->cap : 64;
  while (cap < n) cap *= 2;
  int64_t* a[5] = {m->row, m->src, m->dst, m->scratch, m->vrows};
  m->valid = 0;
  for (int i = 0; i < 5; i++) {
    int64_t* grown = (int64_t*)realloc(a[i], cap * sizeof(int64_t));
    if (!grown) {
      m->row = a[0], m->src = a[1], m->dst = a[2], m->scratch = a[3], m->vrows = a[4];
      return -1;
    }
    a[i] = grown;
  }
  m->row = a[0], m->src = a[1], m->dst = a[2], m->scratch = a[3], m->vrows = a[4];
  m->cap = cap;
  return 0;
}

/* The valid slots of group gi's row and their tokens: from the memo when it holds this row, else checked. */
static kvc_error* accepted_row(const char* fn, kvc_pool* p, uint32_t gi, const int64_t* row, size_t n) {
  kvci_pool_group* g = &p->groups[gi];
  kvci_pool_slot_memo* m = &g->memo;
  if (m->valid && m->n == n && m->released == g->released && !memcmp(m->row, row, n * sizeof(int64_t))) return NULL;
  if (memo_reserve(m, n)) return kvci_err_oom();
  m->valid = 0;
  size_t count = 0;
  kvc_error* e = kvci_pool_check_slots(fn, p, gi, row, n, m->scratch, &count);
  if (e) return e;
  size_t k = 0;
  for (size_t i = 0; i < n; i++)
    if (row[i] != -1) {
      m->src[k] = (int64_t)i;
      m->dst[k++] = row[i];
    }
  memcpy(m->row, row, n * sizeof(int64_t));
  m->n = n;
  m->count = count;
  m->released = g->released;
  m->valid = 1;
  return NULL;
}

kvc_error* kvc_pool_write_layer(kvc_pool* pool, uint32_t layer, const kvc_tensor* key, const kvc_tensor* value,
                                const int64_t* slot_mapping, size_t num_tokens) {
  static const char* FN = "kvc_pool_write_layer";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  kvc_error* e = kvci_pool_check_usable(FN, pool);
  if (e) return e;
  if (layer >= pool->num_layers)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %u but the pool has %u layers", FN, layer,
                    pool->num_layers);
  const kvci_pool_layer* l = &pool->layers[layer];
  kvci_pool_group* g = &pool->groups[l->group];
  if (kvci_pool_is_recurrent(g))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layer %u is in recurrent group %u, which holds states, not "
                    "K/V (kvc_pool_recurrent_state gives them)", FN, layer, l->group);
  const int parts = kvci_pool_parts(l);
  if (!key || (!value && parts == 2))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, key ? "value" : "key");
  if (value && parts == 1)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: value is set but layer %u is in group %u, a latent group: one "
                    "row per token (key) and no V; pass NULL", FN, layer, l->group);
  if (!slot_mapping && num_tokens)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: slot_mapping is NULL but num_tokens is %zu", FN, num_tokens);
  if (num_tokens > (size_t)INT32_MAX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: num_tokens is %zu; at most 2^31 - 1 per call", FN, num_tokens);
  if ((e = kvci_pool_check_input(FN, pool, "key", -1, layer, key, l->kdim, num_tokens)) ||
      (parts == 2 && (e = kvci_pool_check_input(FN, pool, "value", -1, layer, value, l->vdim, num_tokens))))
    return e;
  if (!num_tokens) return NULL;
  if ((e = accepted_row(FN, pool, l->group, slot_mapping + (size_t)l->group * num_tokens, num_tokens))) return e;
  const kvci_pool_slot_memo* m = &g->memo;
  if (!m->count) return NULL;
  /* A slot is its own row in compact NHD storage; otherwise the layer's rows go to the scratch (free once the row
     is accepted), and V's to their own array when they differ from K's. */
  const int64_t* dst[2] = {m->dst, m->dst};
  int64_t bs = g->block_size;
  int64_t* own[2] = {m->scratch, m->vrows};
  for (int kv = 0; kv < parts; kv++) {
    if (l->rows_per_block[kv] == bs && l->rows_per_token[kv] == 1) continue;
    if (kv && kvci_pool_same_rows(l, 0, l, 1)) {
      dst[1] = dst[0];
      continue;
    }
    for (size_t k = 0; k < m->count; k++) own[kv][k] = kvci_pool_slot_row(l, kv, m->dst[k], bs);
    dst[kv] = own[kv];
  }
  kvc_copy_rows_job jobs[2];
  const kvc_tensor* in[2] = {key, value};
  float scales[2];
  for (int kv = 0; kv < parts; kv++) {
    scales[kv] = kvci_pool_job_scale(l, kv);
    kvci_pool_row_job(&jobs[kv], pool, l, kv, in[kv], dst[kv], m->src, m->count);
  }
  kvci_pool_issue_row_jobs(pool, jobs, scales, parts);
  return kvci_pool_result(FN, pool, NULL);
}
