/*
 * kvcache_redis_tier.i: the Redis tier (kvcache/redis_tier.h) in the SWIG module, %included by kvcache.i after
 * the pool (whose `kvc_pool* pool` typemaps enter the pool's guard). The public API is kvcache/redis_tier.py.
 * A tier is owned by the pool it is given to, so Python never holds a kvc_tier: one call creates the tier and
 * gives it to the pool, the other counts the pool's tiers (a tier's counters: Pool.tier_stats, kvcache_tier.i).
 */

%{
/*
 * kvc_redis_tier_create from Python's arguments; auth_key is the key already taken from Python
 * (kvc_py_auth_key_in: None gives NULL, 0). Then, for add_redis_tier, kvc_pool_add_tier; the tier is destroyed
 * when the pool refuses it.
 */
static kvc_error* kvc_py_redis_tier_make(const char* seeds, int cluster, const char* key_prefix,
                                         const char* username, const char* password, unsigned int connect_timeout_ms,
                                         unsigned int command_timeout_ms, unsigned int reconnect_interval_ms,
                                         unsigned int ttl_seconds, unsigned int max_pipeline,
                                         unsigned int call_timeout_ms, const Py_buffer* auth_key, kvc_tier** tier) {
  kvc_redis_tier_options o;
  kvc_redis_tier_options_init(&o);
  o.cluster = cluster;
  o.seeds = seeds;
  o.key_prefix = key_prefix;
  o.username = username;
  o.password = password;
  o.connect_timeout_ms = connect_timeout_ms;
  o.command_timeout_ms = command_timeout_ms;
  o.reconnect_interval_ms = reconnect_interval_ms;
  o.ttl_seconds = ttl_seconds;
  o.max_pipeline = max_pipeline;
  o.call_timeout_ms = call_timeout_ms;
  o.auth_key = (const uint8_t*)auth_key->buf;
  o.auth_key_len = (size_t)auth_key->len;
  return kvc_redis_tier_create(&o, tier);
}

static kvc_error* kvc_py_pool_add_redis_tier_keyed(kvc_pool* pool, const char* seeds, int cluster,
                                                   const char* key_prefix, const char* username,
                                                   const char* password, unsigned int connect_timeout_ms,
                                                   unsigned int command_timeout_ms,
                                                   unsigned int reconnect_interval_ms, unsigned int ttl_seconds,
                                                   unsigned int max_pipeline, unsigned int call_timeout_ms,
                                                   int policy, const Py_buffer* auth_key) {
  kvc_tier* tier = NULL;
  kvc_error* e = kvc_py_redis_tier_make(seeds, cluster, key_prefix, username, password, connect_timeout_ms,
                                        command_timeout_ms, reconnect_interval_ms, ttl_seconds, max_pipeline,
                                        call_timeout_ms, auth_key, &tier);
  if (e) return e;
  e = kvc_pool_add_tier(pool, tier, policy);
  if (e) kvc_tier_destroy(tier);
  return e;
}

%}

/* It takes the key from Python itself: no automatic release of the GIL around it (it releases it for the call). */
%feature("nothread") kvc_py_pool_add_redis_tier;

%inline %{
/* The Python form: the same, with auth_key None or bytes-like; raises on error. */
static PyObject* kvc_py_pool_add_redis_tier(kvc_pool* pool, const char* seeds, int cluster, const char* key_prefix,
                                            const char* username, const char* password,
                                            unsigned int connect_timeout_ms, unsigned int command_timeout_ms,
                                            unsigned int reconnect_interval_ms, unsigned int ttl_seconds,
                                            unsigned int max_pipeline, unsigned int call_timeout_ms, int policy,
                                            PyObject* auth_key) {
  Py_buffer key;
  if (kvc_py_auth_key_in(auth_key, "add_redis_tier", &key) < 0) return NULL;
  kvc_error* err;
  Py_BEGIN_ALLOW_THREADS
  err = kvc_py_pool_add_redis_tier_keyed(pool, seeds, cluster, key_prefix, username, password, connect_timeout_ms,
                                         command_timeout_ms, reconnect_interval_ms, ttl_seconds, max_pipeline,
                                         call_timeout_ms, policy, &key);
  Py_END_ALLOW_THREADS
  if (key.obj) PyBuffer_Release(&key);
  if (err) return kvc_py_raise(err), NULL;
  Py_RETURN_NONE;
}

/* How many tiers the pool has. */
static unsigned int kvc_py_pool_tier_count(const kvc_pool* pool) {
  unsigned int n = 0;
  while (kvc_pool_tier(pool, n)) n++;
  return n;
}

%}

/* The raw ABI of the header, like every other: kvc_redis_tier_create hands back the tier as an opaque pointer
   for a program that gives it to a pool through the raw ABI itself. */
%typemap(in, numinputs=0) kvc_tier** out (kvc_tier* tmp = NULL) "$1 = &tmp;"
%typemap(argout) kvc_tier** out {
  $result = SWIG_Python_AppendOutput($result, SWIG_NewPointerObj(tmp$argnum, $*1_descriptor, 0), 1);
}
KVC_OPTIONS_CTOR_MACRO(kvc_redis_tier_options, KVC_REDIS_TIER_OPTIONS_INIT)
%include "kvcache/redis_tier.h"

