/*
 * core/tier/tier.c: kvc_tier_create and the counters around a store's calls.
 *
 * A tier is a cache below the pool: whatever the store does (stores fewer
 * values, finds fewer keys), the pool only reads the counts it returns, so
 * a store's answer is clamped to what was asked and a misbehaving store
 * costs hits, never memory safety.
 */
#include <stdlib.h>
#include <string.h>

#include "tier_internal.h"

/* The sizes of kvc_tier_ops: 0.6 (three entries after struct_size), 0.7 (exists_many). */
#define OPS_SIZE_0_6 ((size_t)32)
/* The sizes of kvc_tier_stats: 0.6 (up to bytes_read), 0.7 (queued, dropped). */
#define STATS_SIZE_0_6 ((size_t)64)
_Static_assert(sizeof(kvc_tier_stats) == 80, "kvc_tier_stats changed size: add its new size to kvc_tier_stats_get");
_Static_assert(sizeof(kvc_tier_ops) == 40, "kvc_tier_ops changed size: add its new size to kvc_tier_create");

kvc_error* kvc_tier_create(const kvc_tier_ops* ops, void* ctx, const char* name, kvc_tier** out) {
  static const char* FN = "kvc_tier_create";
  kvc_error* e = NULL;
  if (!ops)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: ops is NULL", FN);
  else if (ops->struct_size != OPS_SIZE_0_6 && ops->struct_size != sizeof(kvc_tier_ops))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: ops->struct_size is %u; it is %zu (0.6) or %zu "
                    "(sizeof(kvc_tier_ops)); ctx was not freed: the ops cannot be trusted to free it",
                    FN, ops->struct_size, OPS_SIZE_0_6, sizeof(kvc_tier_ops));
  else if (!ops->put_many || !ops->get_many)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: ops->%s is NULL; a tier needs put_many and get_many", FN,
                 ops->put_many ? "get_many" : "put_many");
  else if (!name || !*name)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: name is %s; give the tier a name for stats and messages", FN,
                 name ? "empty" : "NULL");
  else if (!out)
    e = kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_tier* t = NULL;
  if (!e) {
    t = calloc(1, sizeof(*t));
    char* copy = t ? malloc(strlen(name) + 1) : NULL;
    if (!copy) {
      free(t);
      e = kvci_err_oom();
    } else {
      t->name = strcpy(copy, name);
    }
  }
  if (e) {
    /* The contract: ctx belongs to the tier from the call on, so an error frees it too. */
    if (ops && ops->destroy) ops->destroy(ctx);
    return e;
  }
  memcpy(&t->ops, ops, ops->struct_size); /* an older caller's ops lack the later entries: they stay NULL */
  t->ops.struct_size = sizeof(t->ops);
  t->ctx = ctx;
  t->stats.struct_size = sizeof(t->stats);
  pthread_mutex_init(&t->lock, NULL);
  pthread_mutex_init(&t->stats_lock, NULL);
  *out = t;
  return NULL;
}

void kvc_tier_destroy(kvc_tier* tier) {
  kvci_guard_retire(kvci_guard_of(tier), "kvc_tier_destroy");
  if (!tier) return;
  if (tier->ops.destroy) tier->ops.destroy(tier->ctx);
  kvci_hmac_sha256_key_wipe(&tier->auth.key);
  free(tier->stage);
  free(tier->name);
  pthread_mutex_destroy(&tier->lock);
  pthread_mutex_destroy(&tier->stats_lock);
  free(tier);
}

kvc_error* kvc_tier_stats_get(const kvc_tier* tier, kvc_tier_stats* out) {
  static const char* FN = "kvc_tier_stats_get";
  KVCI_GUARD_SHARED(kvci_guard_of(tier), FN);
  KVCI_GUARD_SHARED(kvci_pool_guard(tier ? tier->owner : NULL), FN); /* a given tier's counters move with its pool */
  if (!tier) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: tier is NULL", FN);
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  if (out->struct_size != STATS_SIZE_0_6 && out->struct_size != sizeof(*out))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out->struct_size is %u; it is %zu (0.6) or %zu "
                    "(sizeof(kvc_tier_stats)): set it before the call", FN, out->struct_size, STATS_SIZE_0_6,
                    sizeof(*out));
  uint32_t size = out->struct_size;
  kvc_tier* t = (kvc_tier*)tier; /* the lock only: a pool's worker moves the counters from its thread */
  pthread_mutex_lock(&t->stats_lock);
  memcpy(out, &tier->stats, size);
  pthread_mutex_unlock(&t->stats_lock);
  out->struct_size = size;
  return NULL;
}

void kvci_tier_count(kvc_tier* t, kvci_tier_counts c) {
  pthread_mutex_lock(&t->stats_lock);
  t->stats.hits += c.hits;
  t->stats.corrupt += c.corrupt;
  t->stats.put_failures += c.put_failures;
  t->stats.queued += c.queued;
  t->stats.dropped += c.dropped;
  pthread_mutex_unlock(&t->stats_lock);
}

size_t kvci_tier_put_many(kvc_tier* t, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                          size_t count) {
  if (!count) return 0;
  size_t stored = t->ops.put_many(t->ctx, keys, values, sizes, count);
  if (stored > count) stored = count;
  uint64_t bytes = 0;
  /* A store that stores fewer stops at its first failure (the usual case), so the leading ones count. */
  for (size_t i = 0; i < stored; i++) bytes += sizes[i];
  pthread_mutex_lock(&t->stats_lock);
  t->stats.puts += stored;
  t->stats.put_failures += count - stored;
  t->stats.bytes_written += bytes;
  pthread_mutex_unlock(&t->stats_lock);
  return stored;
}

size_t kvci_tier_get_many(kvc_tier* t, const kvc_tier_key* keys, void* const* values, size_t capacity,
                          size_t* sizes, size_t count) {
  if (!count) return 0;
  for (size_t i = 0; i < count; i++) sizes[i] = 0;
  size_t found = t->ops.get_many(t->ctx, keys, values, capacity, sizes, count);
  if (found > count) found = count;
  size_t run = 0;
  uint64_t bytes = 0;
  while (run < found && sizes[run] && sizes[run] <= capacity) run++; /* a size past capacity is a lie: a miss */
  for (size_t i = 0; i < run; i++) bytes += sizes[i];
  pthread_mutex_lock(&t->stats_lock);
  t->stats.gets += count;
  t->stats.bytes_read += bytes;
  pthread_mutex_unlock(&t->stats_lock);
  return run;
}

int kvci_tier_find(kvc_tier* t, const kvc_tier_key* key, size_t* size, intptr_t* handle) {
  int found = t->direct->find(t->ctx, key, size, handle) == 1;
  pthread_mutex_lock(&t->stats_lock);
  t->stats.gets++;
  pthread_mutex_unlock(&t->stats_lock);
  return found;
}

int kvci_tier_read_found(kvc_tier* t, intptr_t handle, size_t size, const struct iovec* parts, size_t count,
                         kvci_tier_landed_fn landed, void* arg) {
  int rc = t->direct->read(t->ctx, handle, parts, count, landed, arg) ? -1 : 0;
  if (!rc) {
    pthread_mutex_lock(&t->stats_lock);
    t->stats.bytes_read += size;
    pthread_mutex_unlock(&t->stats_lock);
  }
  return rc;
}

void kvci_tier_get_all(kvc_tier* t, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                       size_t count) {
  if (!count) return;
  for (size_t i = 0; i < count; i++) sizes[i] = 0;
  (void)t->ops.get_many(t->ctx, keys, values, capacity, sizes, count);
  uint64_t bytes = 0;
  for (size_t i = 0; i < count; i++) {
    if (sizes[i] > capacity) sizes[i] = 0; /* a size past capacity is a lie: a miss */
    bytes += sizes[i];
  }
  pthread_mutex_lock(&t->stats_lock);
  t->stats.gets += count;
  t->stats.bytes_read += bytes;
  pthread_mutex_unlock(&t->stats_lock);
}

size_t kvci_tier_exists_many(kvc_tier* t, const kvc_tier_key* keys, uint8_t* found, size_t count) {
  if (!count) return 0;
  memset(found, 0, count);
  (void)t->ops.exists_many(t->ctx, keys, found, count);
  size_t n = 0;
  for (size_t i = 0; i < count; i++) n += found[i] = found[i] != 0; /* counted here: a store's total may lie */
  return n;
}
