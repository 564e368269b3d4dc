/*
 * tests/tier/redis/redis_pool_tier.h: a Redis tier written on commit, added
 * to a pool through the public API, as the pool-level Redis tests set it up
 * (their own key prefix and deadlines on top of the defaults).
 */
#ifndef KVC_TESTS_REDIS_POOL_TIER_H
#define KVC_TESTS_REDIS_POOL_TIER_H

#include "kvcache.h"

/* The default options on `seeds` under `prefix`, with a command timeout of command_ms. */
static inline kvc_redis_tier_options rp_options(const char* seeds, const char* prefix, uint32_t command_ms) {
  kvc_redis_tier_options o;
  kvc_redis_tier_options_init(&o);
  o.seeds = seeds;
  o.key_prefix = prefix;
  o.command_timeout_ms = command_ms;
  return o;
}

/* Creates the tier of `o` and adds it to `pool` (which then owns it); the error of either call, the tier
 * destroyed when the pool refused it. */
static inline kvc_error* rp_add_tier(kvc_pool* pool, const kvc_redis_tier_options* o) {
  kvc_tier* tier = NULL;
  kvc_error* e = kvc_redis_tier_create(o, &tier);
  if (!e && (e = kvc_pool_add_tier(pool, tier, KVC_TIER_WRITE_ON_COMMIT)) != NULL) kvc_tier_destroy(tier);
  return e;
}

#endif /* KVC_TESTS_REDIS_POOL_TIER_H */
