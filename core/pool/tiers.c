/*
 * core/pool/tiers.c: a pool's tiers (kvc_pool_add_tier) and the stores into
 * them: blocks a commit cached go to the WRITE_ON_COMMIT tiers at the end
 * of the commit, in one batch (one pipelined put for a shared tier); a
 * cached block about to be evicted goes to the WRITE_ON_EVICT tiers while
 * its bytes are still in memory. A store that fails is the tier's loss
 * (counted in its stats), never the pool's: nothing here returns an error.
 * The fetch side is tier_fetch.c.
 */
#include <stdlib.h>

#include "pool_internal.h"
#include "tier/tier_internal.h"
#include "tier_worker.h"

/* Staging buffers of a batch stay under this size; a larger block is staged alone. */
#define STAGE_BATCH_BYTES ((size_t)32 << 20)

kvc_error* kvc_pool_add_tier(kvc_pool* pool, kvc_tier* tier, kvc_tier_write_policy policy) {
  static const char* FN = "kvc_pool_add_tier";
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(pool), FN);
  KVCI_GUARD_EXCLUSIVE(kvci_guard_of(tier), FN);
  if (!pool) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: pool is NULL", FN);
  if (!tier) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tier is NULL", FN);
  if (tier->owner)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tier '%s' was given to a pool already (a tier belongs to one "
                    "pool; create another on the same store)", FN, tier->name);
  if (policy != KVC_TIER_WRITE_ON_COMMIT && policy != KVC_TIER_WRITE_ON_EVICT)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: policy is %d; it is KVC_TIER_WRITE_ON_COMMIT (0) or "
                    "KVC_TIER_WRITE_ON_EVICT (1)", FN, (int)policy);
  kvc_tier** tiers = realloc(pool->tiers, (pool->num_tiers + 1) * sizeof(*tiers));
  if (!tiers) return kvci_err_oom();
  pool->tiers = tiers;
  kvc_tier_write_policy* pol = realloc(pool->tier_policy, (pool->num_tiers + 1) * sizeof(*pol));
  if (!pol) return kvci_err_oom();
  pool->tier_policy = pol;
  if (!pool->num_tiers) kvci_pool_fingerprint(pool, pool->fingerprint);
  tiers[pool->num_tiers] = tier;
  pol[pool->num_tiers] = policy;
  pool->num_tiers++;
  if (policy == KVC_TIER_WRITE_ON_COMMIT) pool->commit_tiers++; else pool->evict_tiers++;
  tier->owner = pool;
  return NULL;
}

kvc_tier* kvc_pool_tier(const kvc_pool* pool, uint32_t index) {
  KVCI_GUARD_SHARED_WAIT(kvci_guard_of(pool)); /* kvc_pool_add_tier moves the array */
  return pool && index < pool->num_tiers ? pool->tiers[index] : NULL;
}

void kvci_pool_tiers_free(kvc_pool* pool) {
  /* Uncollected prefetches first (their jobs leave the queue), then the worker: nothing calls a tier after. */
  kvci_pool_prefetches_free(pool);
  kvci_tier_worker_shutdown(pool);
  for (uint32_t i = 0; i < pool->num_tiers; i++) kvc_tier_destroy(pool->tiers[i]);
  free(pool->tiers);
  free(pool->tier_policy);
  free(pool->pending);
  kvci_pool_stage_release(pool);
  pool->tiers = NULL;
  pool->tier_policy = NULL;
  pool->pending = NULL;
  pool->num_tiers = pool->commit_tiers = pool->evict_tiers = pool->pending_count = pool->pending_cap = 0;
}

void kvci_pool_tier_key(const kvc_pool* pool, uint32_t group, const uint8_t hash[KVC_BLOCK_HASH_SIZE],
                        kvc_tier_key* key) {
  memcpy(key->fingerprint, pool->fingerprint, KVC_BLOCK_HASH_SIZE);
  memcpy(key->block_hash, hash, KVC_BLOCK_HASH_SIZE);
  key->group = group;
  key->reserved = 0;
}

size_t kvci_pool_stage_batch(size_t frame) {
  return frame >= STAGE_BATCH_BYTES ? 1 : STAGE_BATCH_BYTES / frame;
}

/* Copies `n` blocks' bytes into a store job's frames (each after its header's room). 0, or -1: not staged. */
static int stage_job(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t n, kvci_tier_job* j) {
  uint8_t** at = (uint8_t**)j->payloads; /* a store job's payload pointers: its frames' payloads */
  for (size_t i = 0; i < n; i++) at[i] = j->frames + i * j->frame + KVCI_TIER_HEADER_SIZE;
  return kvci_pool_stage_bounce(p, group, blocks, n, at, 1);
}

/* With a tier worker: the blocks' bytes are copied into jobs and queued; a job that does not fit is dropped. */
static void store_queued(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count,
                         kvc_tier_write_policy policy) {
  kvci_pool_group* g = &p->groups[group];
  /* A commit's blocks of a CPU pool are read by the worker in place (tier_worker.h, `held`); an evicted block's
     bytes are about to be reused, and a device's must come over: those are copied here. */
  int hold = policy == KVC_TIER_WRITE_ON_COMMIT && p->device.device_type == KVC_DEVICE_CPU;
  kvci_tier_worker_reap(p);
  size_t batch = kvci_pool_stage_batch(kvci_tier_frame_size_max(kvci_pool_block_payload(p, group)));
  for (size_t at = 0; at < count; at += batch) {
    size_t n = count - at < batch ? count - at : batch;
    int full;
    kvci_tier_job* j = kvci_tier_worker_job(p, 0, group, n, &full);
    if (j && hold) {
      j->held = (uint32_t*)(void*)(j->keys + n);
      for (size_t k = 0; k < n; k++) kvci_pool_block_ref(g, j->held[k] = blocks[at + k]);
    } else if (j && stage_job(p, group, blocks + at, n, j)) {
      kvci_tier_worker_discard(p, j);
      j = NULL;
    }
    if (!j) {
      kvci_tier_worker_dropped(p, group, blocks + at, n, policy);
      continue;
    }
    for (size_t k = 0; k < n; k++) kvci_pool_tier_key(p, group, g->blocks[blocks[at + k]].hash, &j->keys[k]);
    j->policy = policy;
    for (uint32_t t = 0; t < p->num_tiers; t++) {
      if (p->tier_policy[t] != policy)
        j->tiers[t] = NULL; /* the worker skips it */
      else
        kvci_tier_count(p->tiers[t], (kvci_tier_counts){.queued = n});
    }
    kvci_tier_worker_submit(p, j);
  }
}

/* Stores `count` cached blocks (a recurrent group's: checkpoints) of `group` in the tiers of `policy`, in batches of
   bounded staging memory. */
static void store(kvc_pool* p, uint32_t group, const uint32_t* blocks, size_t count, kvc_tier_write_policy policy) {
  const kvci_pool_group* g = &p->groups[group];
  if (p->tier_worker) {
    store_queued(p, group, blocks, count, policy);
    return;
  }
  /* A slot holds the value of either mode; each tier's seal writes its own trailer (frame_mac.c). */
  size_t payload = kvci_pool_block_payload(p, group), frame = kvci_tier_frame_size_max(payload);
  size_t batch = kvci_pool_stage_batch(frame);
  if (batch > count) batch = count;
  uint8_t* buf = kvci_pool_stage_alloc(p, batch * frame);
  kvc_tier_key* keys = malloc(batch * sizeof(*keys));
  uint8_t** payloads = malloc(batch * sizeof(*payloads));
  const void** values = malloc(batch * sizeof(*values));
  size_t* sizes = malloc(batch * sizeof(*sizes));
  if (buf && keys && payloads && values && sizes) {
    for (size_t at = 0; at < count; at += batch) {
      size_t n = count - at < batch ? count - at : batch;
      for (size_t j = 0; j < n; j++) {
        payloads[j] = buf + j * frame + KVCI_TIER_HEADER_SIZE;
        values[j] = buf + j * frame;
      }
      if (kvci_pool_stage_out(p, group, blocks + at, n, payloads)) break;
      for (size_t j = 0; j < n; j++) kvci_pool_tier_key(p, group, g->blocks[blocks[at + j]].hash, &keys[j]);
      const kvc_tier* sealed = NULL; /* the tier the values are sealed for; tiers with its key reuse them */
      for (uint32_t t = 0; t < p->num_tiers; t++) {
        kvc_tier* tier = p->tiers[t];
        if (p->tier_policy[t] != policy) continue;
        if (!sealed || !kvci_tier_same_seal(sealed, tier)) {
          for (size_t j = 0; j < n; j++) {
            kvci_tier_value_seal(tier, buf + j * frame, &keys[j], payload, g->num_layers);
            sizes[j] = kvci_tier_value_size(tier, payload);
          }
          sealed = tier;
        }
        kvci_tier_lock(tier);
        kvci_tier_put_many(tier, keys, values, sizes, n);
        kvci_tier_unlock(tier);
      }
    }
  } else {
    /* No staging memory: the stores are skipped, and counted as such. */
    for (uint32_t t = 0; t < p->num_tiers; t++)
      if (p->tier_policy[t] == policy) kvci_tier_count(p->tiers[t], (kvci_tier_counts){.put_failures = count});
  }
  kvci_pool_stage_free(p, buf, batch * frame);
  free(keys);
  free(payloads);
  free(values);
  free(sizes);
}

void kvci_pool_tiers_committed(kvc_pool* pool, uint32_t group, uint32_t block) {
  if (pool->pending_count == pool->pending_cap) {
    uint32_t cap = pool->pending_cap ? 2 * pool->pending_cap : 64;
    uint32_t* grown = realloc(pool->pending, 2 * (size_t)cap * sizeof(uint32_t));
    if (!grown) {
      for (uint32_t t = 0; t < pool->num_tiers; t++)
        if (pool->tier_policy[t] == KVC_TIER_WRITE_ON_COMMIT)
          kvci_tier_count(pool->tiers[t], (kvci_tier_counts){.put_failures = 1});
      return;
    }
    pool->pending = grown;
    pool->pending_cap = cap;
  }
  pool->pending[2 * pool->pending_count] = group;
  pool->pending[2 * pool->pending_count + 1] = block;
  pool->pending_count++;
}

void kvci_pool_tiers_flush(kvc_pool* pool) {
  /* Pending pairs arrive group by group (a commit walks the groups in order): one store per group's run. */
  uint32_t* blocks = malloc(pool->pending_count * sizeof(uint32_t));
  for (uint32_t i = 0; i < pool->pending_count;) {
    uint32_t group = pool->pending[2 * i], n = 0;
    for (; i < pool->pending_count && pool->pending[2 * i] == group; i++) {
      if (blocks) blocks[n++] = pool->pending[2 * i + 1];
      else store(pool, group, &pool->pending[2 * i + 1], 1, KVC_TIER_WRITE_ON_COMMIT);
    }
    if (blocks) store(pool, group, blocks, n, KVC_TIER_WRITE_ON_COMMIT);
  }
  free(blocks);
  pool->pending_count = 0;
}

void kvci_pool_tiers_evicting(kvc_pool* pool, uint32_t group, uint32_t block) {
  store(pool, group, &block, 1, KVC_TIER_WRITE_ON_EVICT);
}
