/*
 * core/tier/redis/redis_tier.c: kvc_redis_tier_options checked and copied,
 * the seeds connected, standalone or cluster decided, and the tier's
 * kvc_tier_ops (put_many, get_many, destroy, exists_many) over the client.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "redis_internal.h"
#include "redis_tier_open.h"
#include "tier/tier_internal.h"

#define FN "kvc_redis_tier_create"
#define MAX_PREFIX 256

void kvc_redis_tier_options_init(kvc_redis_tier_options* options) {
  if (options) *options = (kvc_redis_tier_options)KVC_REDIS_TIER_OPTIONS_INIT;
}

static void tier_free(kvci_redis_tier* t) {
  if (!t) return;
  for (size_t i = 0; i < t->nnodes; i++) {
    kvci_redis_conn_free(&t->nodes[i]->conn);
    free(t->nodes[i]);
  }
  free(t->nodes);
  free(t->seeds);
  free(t->prefix);
  free(t->username);
  if (t->password) memset(t->password, 0, strlen(t->password));
  free(t->password);
  free(t->keys);
  free(t->key_lens);
  free(t->state);
  free(t->node_of);
  free(t->order);
  kvci_resp_out_free(&t->out);
  free(t);
}

static void destroy_op(void* ctx) { tier_free(ctx); }

/* Scratch for `count` keys; 0 or -1. */
static int reserve(kvci_redis_tier* t, size_t count) {
  if (count <= t->scratch_cap) return 0;
  size_t cap = t->scratch_cap ? t->scratch_cap : 64;
  while (cap < count) cap *= 2;
  char* keys = realloc(t->keys, cap * t->key_stride);
  if (keys) t->keys = keys;
  uint16_t* lens = realloc(t->key_lens, cap * sizeof *lens);
  if (lens) t->key_lens = lens;
  uint8_t* state = realloc(t->state, cap);
  if (state) t->state = state;
  int32_t* node_of = realloc(t->node_of, cap * sizeof *node_of);
  if (node_of) t->node_of = node_of;
  uint32_t* order = realloc(t->order, cap * sizeof *order);
  if (order) t->order = order;
  if (!keys || !lens || !state || !node_of || !order) return -1;
  t->scratch_cap = cap;
  return 0;
}

static size_t put_many_op(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                          size_t count) {
  kvci_redis_tier* t = ctx;
  if (count == 0 || count > UINT32_MAX || reserve(t, count) != 0) return 0;
  t->call = (kvci_redis_call){.put = 1, .count = count, .values = values, .value_sizes = sizes};
  kvci_redis_execute(t, keys);
  size_t stored = 0;
  for (size_t i = 0; i < count; i++) stored += t->state[i] == KVCI_KEY_DONE;
  return stored;
}

static size_t get_many_op(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                          size_t count) {
  kvci_redis_tier* t = ctx;
  for (size_t i = 0; i < count; i++) sizes[i] = 0;
  if (count == 0 || count > UINT32_MAX || reserve(t, count) != 0) return 0;
  t->call = (kvci_redis_call){.count = count, .dst = values, .capacity = capacity, .sizes = sizes};
  kvci_redis_execute(t, keys);
  size_t leading = 0;
  while (leading < count && t->state[leading] == KVCI_KEY_DONE) leading++;
  return leading;
}

/* One EXISTS per key, pipelined per node (EXISTS of many keys at once would be refused across cluster slots). */
static size_t exists_many_op(void* ctx, const kvc_tier_key* keys, uint8_t* found, size_t count) {
  kvci_redis_tier* t = ctx;
  for (size_t i = 0; i < count; i++) found[i] = 0;
  if (count == 0 || count > UINT32_MAX || reserve(t, count) != 0) return 0;
  t->call = (kvci_redis_call){.exists = 1, .count = count};
  kvci_redis_execute(t, keys);
  size_t n = 0;
  for (size_t i = 0; i < count; i++) n += found[i] = t->state[i] == KVCI_KEY_DONE;
  return n;
}

static char* copy_string(const char* s) {
  size_t n = strlen(s) + 1;
  char* c = malloc(n);
  if (c) memcpy(c, s, n);
  return c;
}

/* The sizes kvc_redis_tier_options had (redis_tier.h lists them); the last is the current one. */
static const uint32_t OPTIONS_SIZES[] = {64, 72, 88};
_Static_assert(sizeof(kvc_redis_tier_options) == 88, "kvc_redis_tier_options changed size");

/* The caller's options over the defaults: a caller built against an older header passes fewer bytes. */
static kvc_error* read_options(const kvc_redis_tier_options* in, kvc_redis_tier_options* o) {
  if (!in) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options is NULL", FN);
  *o = (kvc_redis_tier_options)KVC_REDIS_TIER_OPTIONS_INIT;
  for (size_t i = 0; i < sizeof OPTIONS_SIZES / sizeof OPTIONS_SIZES[0]; i++)
    if (in->struct_size == OPTIONS_SIZES[i]) {
      memcpy(o, in, in->struct_size);
      o->struct_size = sizeof *o;
      return NULL;
    }
  return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.struct_size is %u but this library knows only 64, 72 "
                  "and %zu; initialize it with KVC_REDIS_TIER_OPTIONS_INIT", FN, in->struct_size, sizeof *o);
}

/* call_timeout_ms 0: room for a connect, a slot-map refresh and the call's own commands. */
static uint32_t call_timeout(const kvc_redis_tier_options* o) {
  if (o->call_timeout_ms) return o->call_timeout_ms;
  uint64_t ms = (uint64_t)o->connect_timeout_ms + 2u * (uint64_t)o->command_timeout_ms;
  return ms > UINT32_MAX ? UINT32_MAX : (uint32_t)ms;
}

static kvc_error* check_options(const kvc_redis_tier_options* o) {
  if (o->cluster < KVC_REDIS_CLUSTER_AUTO || o->cluster > KVC_REDIS_CLUSTER_ON)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.cluster is %d; it is KVC_REDIS_CLUSTER_AUTO (0), _OFF "
                    "(1) or _ON (2)", FN, (int)o->cluster);
  if (!o->seeds || !o->seeds[0])
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.seeds is %s; it lists host:port[,host:port...]", FN,
                    o->seeds ? "empty" : "NULL");
  const char* prefix = o->key_prefix ? o->key_prefix : "";
  if (strlen(prefix) > MAX_PREFIX)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.key_prefix is %zu bytes long; at most %d", FN,
                    strlen(prefix), MAX_PREFIX);
  if (strpbrk(prefix, "{}"))
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.key_prefix '%s' contains a brace; no '{' or '}' "
                    "(a hash tag would put every block in one cluster slot)", FN, prefix);
  if (o->username && !o->password)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.username is '%s' but password is NULL; AUTH needs a "
                    "password", FN, o->username);
  if (o->connect_timeout_ms == 0 || o->command_timeout_ms == 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.%s is 0; a timeout must be at least 1 ms", FN,
                    o->connect_timeout_ms == 0 ? "connect_timeout_ms" : "command_timeout_ms");
  if (o->max_pipeline == 0 || o->max_pipeline > 65536)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.max_pipeline is %u; it is 1 to 65536", FN,
                    o->max_pipeline);
  if (o->reserved != 0)
    return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.reserved is %u; it must be 0", FN, o->reserved);
  return NULL;
}

/* Adds every seed to the node table, in order; the count or an error naming the bad seed. */
static kvc_error* add_seeds(kvci_redis_tier* t, size_t* count) {
  const char* s = t->seeds;
  *count = 0;
  for (;;) {
    const char* end = strchr(s, ',');
    size_t len = end ? (size_t)(end - s) : strlen(s);
    char host[KVCI_REDIS_HOST_MAX + 1];
    uint16_t port;
    if (kvci_redis_parse_address(s, len, host, sizeof host, &port) != 0)
      return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.seeds has '%.*s', which is not host:port (port 1 "
                      "to 65535, a host of at most %d bytes, [brackets] around an IPv6 address)", FN, (int)len, s,
                      KVCI_REDIS_HOST_MAX);
    size_t before = t->nnodes;
    if (kvci_redis_node_find(t, host, port, 1) < 0)
      return t->nnodes >= KVCI_REDIS_MAX_NODES
                 ? kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: options.seeds lists more than %d nodes", FN,
                            KVCI_REDIS_MAX_NODES)
                 : kvci_err_oom();
    *count += t->nnodes > before;
    if (!end) return NULL;
    s = end + 1;
  }
}

kvc_error* kvci_redis_tier_open(const kvc_redis_tier_options* options, kvc_tier_ops* ops, void** ctx) {
  kvc_redis_tier_options copy;
  const kvc_redis_tier_options* o = &copy;
  kvc_error* e = read_options(options, &copy);
  if (!e) e = check_options(o);
  if (e) return e;
  if (!ops || !ctx) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvci_redis_tier* t = calloc(1, sizeof *t);
  if (!t) return kvci_err_oom();
  t->seeds = copy_string(o->seeds);
  t->prefix = copy_string(o->key_prefix ? o->key_prefix : "");
  t->username = o->username ? copy_string(o->username) : NULL;
  t->password = o->password ? copy_string(o->password) : NULL;
  if (!t->seeds || !t->prefix || (o->username && !t->username) || (o->password && !t->password)) {
    tier_free(t);
    return kvci_err_oom();
  }
  t->connect_timeout_ms = o->connect_timeout_ms;
  t->command_timeout_ms = o->command_timeout_ms;
  t->reconnect_interval_ms = o->reconnect_interval_ms;
  t->ttl_seconds = o->ttl_seconds;
  t->max_pipeline = o->max_pipeline;
  t->call_timeout_ms = call_timeout(o);
  t->cluster = o->cluster == KVC_REDIS_CLUSTER_AUTO ? -1 : o->cluster == KVC_REDIS_CLUSTER_ON;
  t->key_stride = kvci_redis_key_bytes(t);
  for (size_t s = 0; s < KVCI_REDIS_SLOTS; s++) t->slots[s] = -1;
  size_t seeds = 0;
  e = add_seeds(t, &seeds);
  t->nseeds = t->nnodes;
  char why[240] = "";
  kvci_redis_call_begin(t);
  if (!e && kvci_redis_detect(t, seeds, why, sizeof why) != 0)
    e = kvci_err(KVC_ERROR_IO, "%s: no seed could be used%s; the last: %s (seeds '%s', connect_timeout_ms %u, "
                 "command_timeout_ms %u, call_timeout_ms %u)", FN,
                 o->cluster == KVC_REDIS_CLUSTER_ON ? " as a Redis Cluster" : "", why, t->seeds,
                 t->connect_timeout_ms, t->command_timeout_ms, t->call_timeout_ms);
  if (e) {
    tier_free(t);
    return e;
  }
  *ops = (kvc_tier_ops){sizeof(kvc_tier_ops), put_many_op, get_many_op, destroy_op, exists_many_op};
  *ctx = t;
  return NULL;
}

kvc_error* kvc_redis_tier_create(const kvc_redis_tier_options* options, kvc_tier** out) {
  if (!out) return kvci_err(KVC_ERROR_INVALID_ARGUMENT, "%s: out is NULL", FN);
  kvc_redis_tier_options full;
  kvc_error* e = read_options(options, &full);
  if (!e) e = kvci_tier_auth_check(FN, "options.auth_key", full.auth_key, full.auth_key_len);
  if (e) return e;
  kvc_tier_ops ops;
  void* ctx = NULL;
  e = kvci_redis_tier_open(&full, &ops, &ctx);
  if (e) return e;
  e = kvc_tier_create(&ops, ctx, "redis", out); /* it owns ctx from here, on error too */
  if (!e) kvci_tier_auth_set(*out, full.auth_key, full.auth_key_len);
  return e;
}
