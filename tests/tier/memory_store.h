/*
 * tests/tier/memory_store.h: a program's own store in memory (kvc_tier_ops), for the tests of custom stores and
 * of the tier worker. put_many copies up to MS_CAP values, get_many answers the run it holds; every call is
 * counted, may sleep first (a slow or hung network) and get may answer with one byte flipped (a store that
 * corrupts). A mutex makes it safe to call from the pool's worker thread while the test reads it.
 */
#ifndef KVC_TESTS_TIER_MEMORY_STORE_H
#define KVC_TESTS_TIER_MEMORY_STORE_H

#include "tier_test.h" /* first: it sets the feature macros */

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

enum { MS_CAP = 4096 };

typedef struct ms_store {
  pthread_mutex_t mu;
  kvc_tier_key keys[MS_CAP];
  uint8_t* values[MS_CAP];
  size_t sizes[MS_CAP];
  size_t count, put_calls, get_calls;
  _Atomic long put_delay_us, get_delay_us; /* each call sleeps this long before it takes the lock */
  long flip;                               /* >= 0: get returns the value with this byte flipped */
} ms_store;

static TU_UNUSED void ms_nap_us(long us) {
  struct timespec ts = {us / 1000000L, (us % 1000000L) * 1000L};
  while (nanosleep(&ts, &ts) != 0) {
  }
}

static TU_UNUSED size_t ms_put(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                               size_t count) {
  ms_store* m = (ms_store*)ctx;
  ms_nap_us(atomic_load(&m->put_delay_us));
  pthread_mutex_lock(&m->mu);
  m->put_calls++;
  size_t i = 0;
  for (; i < count && m->count < MS_CAP; i++, m->count++) {
    m->keys[m->count] = keys[i];
    m->values[m->count] = (uint8_t*)malloc(sizes[i]);
    memcpy(m->values[m->count], values[i], sizes[i]);
    m->sizes[m->count] = sizes[i];
  }
  pthread_mutex_unlock(&m->mu);
  return i;
}

static TU_UNUSED size_t ms_get(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity,
                               size_t* sizes, size_t count) {
  ms_store* m = (ms_store*)ctx;
  ms_nap_us(atomic_load(&m->get_delay_us));
  pthread_mutex_lock(&m->mu);
  m->get_calls++;
  size_t i = 0;
  for (; i < count; i++) {
    size_t j = 0;
    while (j < m->count && memcmp(&m->keys[j], &keys[i], sizeof keys[i])) j++;
    if (j == m->count || m->sizes[j] > capacity) break;
    memcpy(values[i], m->values[j], m->sizes[j]);
    if (m->flip >= 0 && (size_t)m->flip < m->sizes[j]) ((uint8_t*)values[i])[m->flip] ^= 0x20;
    sizes[i] = m->sizes[j];
  }
  pthread_mutex_unlock(&m->mu);
  return i;
}

static TU_UNUSED ms_store* ms_new(void) {
  ms_store* m = (ms_store*)calloc(1, sizeof *m);
  pthread_mutex_init(&m->mu, NULL);
  m->flip = -1;
  return m;
}

static TU_UNUSED void ms_free(void* ctx) {
  ms_store* m = (ms_store*)ctx;
  if (!m) return;
  for (size_t i = 0; i < m->count; i++) free(m->values[i]);
  pthread_mutex_destroy(&m->mu);
  free(m);
}

/* The tier owns the store: destroying the tier frees it. */
static const kvc_tier_ops MS_OPS = {sizeof(kvc_tier_ops), ms_put, ms_get, ms_free, NULL};
/* The store outlives the tiers on it (a restart finds it): the test frees it with ms_free. */
static const kvc_tier_ops MS_OPS_KEPT = {sizeof(kvc_tier_ops), ms_put, ms_get, NULL, NULL};

/* A field of the store read under its lock (the worker thread may be moving it). */
static TU_UNUSED size_t ms_locked(ms_store* m, const size_t* field) {
  pthread_mutex_lock(&m->mu);
  size_t n = *field;
  pthread_mutex_unlock(&m->mu);
  return n;
}

/* A tier named `name` that owns a new store (into *m). */
static TU_UNUSED kvc_error* ms_tier(const char* name, kvc_tier** t, ms_store** m) {
  *m = ms_new();
  kvc_error* e = kvc_tier_create(&MS_OPS, *m, name, t);
  if (e) ms_free(*m), *m = NULL;
  return e;
}

/* A pool of `blocks` blocks (tt_pool, NHD) whose commit tier owns a new store (into *m) named `name`. */
static TU_UNUSED kvc_error* ms_pool(uint32_t blocks, const char* name, kvc_pool** p, ms_store** m) {
  kvc_tier* t = NULL;
  *m = NULL;
  kvc_error* e = tt_pool(p, blocks, KVC_POOL_LAYOUT_NHD);
  if (!e) e = ms_tier(name, &t, m);
  if (!e && (e = kvc_pool_add_tier(*p, t, KVC_TIER_WRITE_ON_COMMIT)) != NULL) kvc_tier_destroy(t), *m = NULL;
  return e;
}

#endif /* KVC_TESTS_TIER_MEMORY_STORE_H */
