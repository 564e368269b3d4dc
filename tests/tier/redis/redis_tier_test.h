/*
 * tests/tier/redis/redis_tier_test.h: the Redis tier's ops driven directly
 * (kvci_redis_tier_open), keys and values the tests can recognise: block i of
 * a test has a key made from i and a value whose every byte depends on i and
 * its position, so a value that came back under the wrong key, or cut, or
 * mixed from two writers, is caught.
 */
#ifndef KVC_TESTS_REDIS_TIER_TEST_H
#define KVC_TESTS_REDIS_TIER_TEST_H

#include "../tier_test.h" /* first: it sets the feature macros */
#include "redis_server.h"
#include "test_util.h"
#include "tier/redis/redis_tier_open.h"

typedef struct rt_tier {
  kvc_tier_ops ops;
  void* ctx;
} rt_tier;

/* Options for the servers at ports[0..n) with the given cluster mode. */
static RS_UNUSED kvc_redis_tier_options rt_options(const int* ports, int n, kvc_redis_cluster_mode mode, char* seeds,
                                         size_t cap) {
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  seeds[0] = 0;
  for (int i = 0; i < n; i++)
    snprintf(seeds + strlen(seeds), cap - strlen(seeds), "%s127.0.0.1:%d", i ? "," : "", ports[i]);
  o.seeds = seeds;
  o.cluster = mode;
  return o;
}

static RS_UNUSED kvc_error* rt_open(const kvc_redis_tier_options* o, rt_tier* t) {
  return kvci_redis_tier_open(o, &t->ops, &t->ctx);
}

static RS_UNUSED void rt_close(rt_tier* t) {
  if (t->ctx) t->ops.destroy(t->ctx);
  t->ctx = NULL;
}

static RS_UNUSED kvc_tier_key rt_key(uint32_t i, uint32_t model) {
  kvc_tier_key k;
  memset(&k, 0, sizeof k);
  for (int b = 0; b < KVC_BLOCK_HASH_SIZE; b++) {
    k.fingerprint[b] = (uint8_t)(model * 13 + b);
    k.block_hash[b] = (uint8_t)((i >> (8 * (b % 4))) ^ (uint32_t)(b * 29) ^ model);
  }
  k.group = i % 3;
  return k;
}

/* Value `variant` of block i: `size` bytes. */
static RS_UNUSED void rt_fill(uint8_t* v, size_t size, uint32_t i, uint32_t variant) {
  uint32_t x = i * 2654435761u ^ variant * 40503u;
  for (size_t b = 0; b < size; b++) {
    x = x * 1103515245u + 12345u;
    v[b] = (uint8_t)(x >> 16);
  }
}

/* A run of n blocks of `size` bytes: keys, values, buffers to read into. */
typedef struct rt_run {
  size_t n, size;
  kvc_tier_key* keys;
  uint8_t* data; /* n * size written values */
  uint8_t* read; /* n * size read back */
  const void** values;
  void** dst;
  size_t* sizes;
} rt_run;

static RS_UNUSED int rt_run_make(rt_run* r, size_t n, size_t size, uint32_t model) {
  memset(r, 0, sizeof *r);
  r->n = n, r->size = size;
  r->keys = calloc(n, sizeof *r->keys);
  r->data = malloc(n * size);
  r->read = malloc(n * size);
  r->values = calloc(n, sizeof *r->values);
  r->dst = calloc(n, sizeof *r->dst);
  r->sizes = calloc(n, sizeof *r->sizes);
  if (!r->keys || !r->data || !r->read || !r->values || !r->dst || !r->sizes) return -1;
  for (size_t i = 0; i < n; i++) {
    r->keys[i] = rt_key((uint32_t)i, model);
    rt_fill(r->data + i * size, size, (uint32_t)i, model);
    r->values[i] = r->data + i * size;
    r->dst[i] = r->read + i * size;
    r->sizes[i] = size;
  }
  return 0;
}

static RS_UNUSED void rt_run_free(rt_run* r) {
  free(r->keys), free(r->data), free(r->read), free(r->values), free(r->dst), free(r->sizes);
  memset(r, 0, sizeof *r);
}

static RS_UNUSED size_t rt_put(rt_tier* t, rt_run* r) {
  for (size_t i = 0; i < r->n; i++) r->sizes[i] = r->size;
  return t->ops.put_many(t->ctx, r->keys, (const void* const*)r->values, r->sizes, r->n);
}

/* Gets the run; returns how many were found, and counts a found value that differs as a failure. */
static RS_UNUSED size_t rt_get(rt_tier* t, rt_run* r, size_t* leading) {
  memset(r->read, 0xEE, r->n * r->size);
  size_t lead = t->ops.get_many(t->ctx, r->keys, (void* const*)r->dst, r->size, r->sizes, r->n);
  if (leading) *leading = lead;
  size_t found = 0;
  for (size_t i = 0; i < r->n; i++) {
    if (r->sizes[i] == 0) continue;
    found++;
    if (!CHECK(r->sizes[i] == r->size && memcmp(r->read + i * r->size, r->data + i * r->size, r->size) == 0))
      fprintf(stderr, "  block %zu came back wrong (%zu bytes)\n", i, r->sizes[i]);
  }
  return found;
}

#endif /* KVC_TESTS_REDIS_TIER_TEST_H */
