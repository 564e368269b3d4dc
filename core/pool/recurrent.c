/*
 * core/pool/recurrent.c: recurrent (Mamba/SSM) groups.
 *
 * A recurrent layer has no per-token K/V: a sequence has one live state (a
 * slot of the group, written in place by the model through
 * kvc_pool_recurrent_state). For prefix reuse, a commit that ends at a
 * multiple of the group's block size copies the live state into a spare slot
 * cached under the chain hash of the recurrent group at that point (the
 * same chain as an attention group's, in blocks of the recurrent group's
 * block size). match_prefix restores it; truncate restores it for rollback.
 * Checkpoints are cached blocks like any other: unreferenced, LRU-evicted,
 * pinnable, announced by events. A commit that finds no spare slot skips the
 * checkpoint (a later miss, never an error). Since 0.7 a checkpoint is stored in
 * the pool's commit tiers like a committed attention block (its payload: the
 * conv and SSM state of every layer of the group, docs/tiers.md), and
 * match_prefix fetches one from them (tier_fetch.c), so a hybrid model's
 * prefix survives a restart.
 */
#include <inttypes.h>

#include "pool_internal.h"

/* The copies of a slot (conv and SSM state of every layer of the group), from `src` to `dst`. */
void kvci_pool_restore(kvc_pool* pool, uint32_t group, uint32_t from, uint32_t live) {
  if (!from) {
    kvci_pool_zero_slot(pool, group, live);
    return;
  }
  kvci_pool_copy_block(pool, group, from, live);
}

void kvci_pool_checkpoint(kvc_pool* pool, kvc_pool_sequence* s, uint32_t group) {
  kvci_pool_group* g = &pool->groups[group];
  kvci_pool_seq_group* sg = &s->groups[group];
  uint64_t k = s->committed / g->block_size;
  if (!k || !sg->live || k > sg->hashed) return;
  const uint8_t* hash = sg->hashes[k - 1];
  uint32_t have = kvci_pool_map_find(g, hash);
  if (have) {
    if (!g->blocks[have].ref && !g->blocks[have].pinned) kvci_pool_block_touch(g, have);
    return;
  }
  if (!kvci_pool_available(g)) return;
  uint32_t b = kvci_pool_block_take(pool, group);
  kvci_pool_copy_block(pool, group, sg->live, b);
  /* Stored at the commit's end (kvci_pool_tiers_flush): nothing takes a slot of this group before then. */
  if (kvci_pool_block_cache(pool, group, b, s, s->tokens, k - 1) && pool->commit_tiers)
    kvci_pool_tiers_committed(pool, group, b);
  kvci_pool_block_release(g, b);
}

kvc_error* kvc_pool_recurrent_state(kvc_pool_sequence* s, uint32_t layer, kvc_tensor* conv_state,
                                    kvc_tensor* ssm_state) {
  static const char* FN = "kvc_pool_recurrent_state";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(s ? s->pool : NULL), FN);
  if (!s) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: sequence is NULL", FN);
  if (!conv_state || !ssm_state)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: %s is NULL", FN, conv_state ? "ssm_state" : "conv_state");
  kvc_pool* p = s->pool;
  kvc_error* poisoned = kvci_pool_refusal(FN, p);
  if (poisoned) return poisoned;
  if (layer >= p->num_layers)
    return kvci_err(KVC_ERROR_OUT_OF_RANGE, "%s: layer is %u but the pool has %u layers", FN, layer, p->num_layers);
  kvci_pool_layer* l = &p->layers[layer];
  if (!kvci_pool_is_recurrent(&p->groups[l->group]))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: layer %u is in group %u, an attention group; recurrent states "
                    "are in recurrent groups (use kvc_pool_layer_storage for K/V)", FN, layer, l->group);
  uint32_t live = s->groups[l->group].live;
  if (!live)
    return kvci_err(KVC_ERROR_INVALID_STATE, "%s: the sequence has no live state in group %u yet; kvc_pool_reserve "
                    "(or a match of a checkpoint) gives it one", FN, l->group);
  kvc_data_type dt = kvc_dtype_to_data_type(p->dtype);
  kvc_tensor* out[2] = {conv_state, ssm_state};
  for (int i = 0; i < 2; i++) {
    memset(out[i], 0, sizeof(*out[i]));
    out[i]->data = kvci_pool_block_at(p, l, i, live);
    out[i]->device = p->device;
    out[i]->ndim = i ? 4 : 3;
    out[i]->dtype = dt;
    out[i]->shape = l->state_shape[i];
  }
  return NULL;
}
