/*
 * core/tier/redis/redis_tier_open.h: the Redis tier as kvc_tier_ops and its
 * context, before kvc_tier_create wraps it (tests drive the ops directly).
 */
#ifndef KVC_CORE_TIER_REDIS_TIER_OPEN_H
#define KVC_CORE_TIER_REDIS_TIER_OPEN_H

#include "kvcache/redis_tier.h"

/* Checks the options, connects and fills *ops and *ctx (ops->destroy(ctx) frees it). */
kvc_error* kvci_redis_tier_open(const kvc_redis_tier_options* options, kvc_tier_ops* ops, void** ctx);

#endif
