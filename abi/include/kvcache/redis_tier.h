/*
 * kvcache/redis_tier.h: a pool tier shared between processes and machines,
 * on Redis or Valkey (standalone or Redis Cluster), spoken to over RESP2 by
 * the library's own client (no third-party library: docs/redis-tier.md
 * says why). Since 0.6.
 *
 * Keys (docs/redis-tier.md): key_prefix, then the pool's model
 * fingerprint, the group and the block hash, in lowercase hex:
 *   <prefix><fingerprint 64 hex>:<group>:<block hash 64 hex>
 * with no hash tag, so that in a cluster every block has its own slot and a
 * prompt's blocks spread over all nodes. The block hash already covers a
 * tenant's salt (kvc_pool_options), so tenants never share keys unless they
 * share a salt. Values are the framed bytes of kvcache/tier.h, stored as
 * given (SET key value [EX ttl]); a run of blocks is one pipeline per node
 * (GETs, not MGET: a cluster refuses MGET across slots).
 *
 * Failures are misses: a node that refuses the connection, times out or
 * breaks makes the keys it holds misses (get) or skipped stores (put) for
 * that call; its connection is closed and tried again after
 * reconnect_interval_ms (a call never waits on a node inside that
 * interval), and the cluster's slot map is read again (CLUSTER SLOTS). MOVED
 * updates the slot map and retries the key once; ASK sends ASKING and
 * retries once on the node named.
 *
 * The call deadline (since 0.7): kvc_redis_tier_create, and each store
 * (put_many) and lookup (get_many) the pool makes in the tier, returns
 * within call_timeout_ms of its start plus scheduling delay, whatever the
 * servers do (answer slowly, a byte at a time, redirect to many nodes, send
 * huge or endless replies): every connect, write and read of the call,
 * slot-map refreshes included, waits only for what is left of it, and when
 * it has passed the keys not done are misses (a store: not stored) or, at
 * creation, KVC_ERROR_IO. The one wait it does not bound is the resolution
 * of a seed or node given by name (getaddrinfo); numeric addresses never
 * resolve. Replies are read against caps fixed before their first byte
 * (docs/redis-tier.md lists them): a value larger than the pool's buffer by
 * more than 64 KiB, or any bulk string above Redis's own 512 MiB, closes the
 * connection unread; so does a reply nobody asked for.
 */
#ifndef KVCACHE_REDIS_TIER_H
#define KVCACHE_REDIS_TIER_H

#include "kvcache/tier.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Whether the servers are a Redis Cluster. */
typedef int32_t kvc_redis_cluster_mode;
#define KVC_REDIS_CLUSTER_AUTO 0 /**< ask the first seed that answers (CLUSTER SLOTS) */
#define KVC_REDIS_CLUSTER_OFF  1 /**< one standalone server: the first seed that answers */
#define KVC_REDIS_CLUSTER_ON   2 /**< a cluster: refused at creation if the seeds are not one */

/** Options of kvc_redis_tier_create. Published sizes: 64 (0.6), 72 and 88 (0.7: call_timeout_ms, then the auth key). */
typedef struct kvc_redis_tier_options {
  uint32_t struct_size;           /**< sizeof(kvc_redis_tier_options) */
  kvc_redis_cluster_mode cluster; /**< KVC_REDIS_CLUSTER_* */
  const char* seeds;              /**< "host:port[,host:port...]" ("[::1]:6379" for IPv6); borrowed for the call */
  const char* key_prefix;         /**< before every key; no '{' or '}' (a hash tag would put all blocks in one slot) */
  const char* username;           /**< AUTH username (Redis 6 ACL); NULL = the default user */
  const char* password;           /**< AUTH password; NULL = no AUTH */
  uint32_t connect_timeout_ms;    /**< the longest a TCP connect may take (> 0) */
  uint32_t command_timeout_ms;    /**< the longest a node may stay silent while a call waits on it (> 0) */
  uint32_t reconnect_interval_ms; /**< how long a failed node is left alone before it is tried again */
  uint32_t ttl_seconds;           /**< EX of every SET; 0 = none (the server's maxmemory-policy decides) */
  uint32_t max_pipeline;          /**< commands in flight on one connection (1..65536) */
  uint32_t reserved;              /**< 0 */
  /* since 0.7 */
  uint32_t call_timeout_ms;       /**< Since 0.7. The deadline of every call (see above); 0 = connect_timeout_ms
                                       + 2 x command_timeout_ms (450 with the defaults: a connect, a slot-map
                                       refresh and the call's own commands); a caller of an older size gets 0 */
  /**
   * The tier's authentication key (kvcache/tier.h, 'Authenticated tiers'): KVC_TIER_AUTH_KEY_MIN to _MAX bytes,
   * copied (borrowed for the call); NULL with auth_key_len 0 = no key, and then whoever can SET the tier's keys
   * can serve K/V to its readers. Unrelated to password (which only lets the client in). Since 0.7.
   */
  const uint8_t* auth_key;
  size_t auth_key_len; /**< bytes at auth_key. Since 0.7. */
} kvc_redis_tier_options;

#define KVC_REDIS_TIER_OPTIONS_INIT                                                                        \
  {sizeof(kvc_redis_tier_options), KVC_REDIS_CLUSTER_AUTO, NULL, "kvc:", NULL, NULL, 50, 200, 1000, 0, 32, 0, 0, \
   NULL, 0}

/** Sets `options` to KVC_REDIS_TIER_OPTIONS_INIT. Never fails; NULL is ignored. */
KVC_API void kvc_redis_tier_options_init(kvc_redis_tier_options* options);


/**
 * A tier on Redis or Valkey. Connects to the seeds (and authenticates) to
 * check the configuration and, in cluster mode, to read the slot map; after
 * that no failure of a server is an error (see above). The tier's name is
 * "redis". Returns within call_timeout_ms (see above). Errors:
 * INVALID_ARGUMENT (NULL, struct_size, a seed that is not host:port, a zero
 * timeout, max_pipeline, a key prefix with braces), IO (no seed answered
 * before the deadline, AUTH refused, CLUSTER_ON and the seeds are no
 * cluster).
 */
KVC_API kvc_error* kvc_redis_tier_create(const kvc_redis_tier_options* options, kvc_tier** out);

#ifdef __cplusplus
}
#endif

#endif /* KVCACHE_REDIS_TIER_H */
