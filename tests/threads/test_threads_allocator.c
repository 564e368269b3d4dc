/*
 * tests/threads/test_threads_allocator.c: caches made from one another share
 * their allocator (kvcache/allocator.h, "Threads") and the library's record
 * of its live allocations: clones of one cache, used from different threads
 * at once (distinct handles), grow their stores concurrently. Every store
 * must come from the allocator and go back to it exactly once; `make tsan`
 * runs this under ThreadSanitizer, which fails it on any data race in that
 * shared record.
 */
#define _POSIX_C_SOURCE 200809L /* posix_memalign */

#include <pthread.h>
#include <stdlib.h>

#include "test_util.h"

#define THREADS 4
#define TOKENS 300 /* several growths of a dynamic layer (first store: 64 slots) */

/* A thread-safe counting allocator over the heap: the contract asks it of allocators shared across threads. */
typedef struct counting {
  pthread_mutex_t mu;
  long allocs, frees;
  long long live_bytes;
} counting;

static void* counting_alloc(void* ctx, size_t bytes, size_t alignment, kvc_device device, void* stream) {
  counting* c = (counting*)ctx;
  (void)device, (void)stream;
  void* p = NULL;
  if (posix_memalign(&p, alignment, bytes)) return NULL;
  pthread_mutex_lock(&c->mu);
  c->allocs++;
  c->live_bytes += (long long)bytes;
  pthread_mutex_unlock(&c->mu);
  return p;
}

static void counting_free(void* ctx, void* ptr, size_t bytes, kvc_device device, void* stream) {
  counting* c = (counting*)ctx;
  (void)device, (void)stream;
  pthread_mutex_lock(&c->mu);
  c->frees++;
  c->live_bytes -= (long long)bytes;
  pthread_mutex_unlock(&c->mu);
  free(ptr);
}

typedef struct job {
  kvc_cache* cache;
  int failures;
} job;

static void* grow(void* arg) {
  job* j = (job*)arg;
  for (int64_t s = 1; s < TOKENS; s++) {
    kvc_error* e = tu_update_tokens(j->cache, 0, 2, 2, 1, 4, 4, s, NULL, NULL);
    if (e) {
      j->failures++;
      kvc_error_destroy(e);
    }
  }
  return NULL;
}

static void test_clones_grow_concurrently(void) {
  counting c = {PTHREAD_MUTEX_INITIALIZER, 0, 0, 0};
  kvc_allocator al = KVC_ALLOCATOR_INIT;
  al.ctx = &c;
  al.alloc = counting_alloc;
  al.free = counting_free;
  kvc_layer_options l = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options o = tu_custom_options(1, &l);
  o.allocator = &al;
  kvc_cache* source = NULL;
  REQUIRE_OK(kvc_cache_create(&o, &source));
  REQUIRE_OK(tu_update_tokens(source, 0, 2, 2, 1, 4, 4, 0, NULL, NULL));
  job jobs[THREADS];
  pthread_t threads[THREADS];
  for (int i = 0; i < THREADS; i++) {
    jobs[i].failures = 0;
    jobs[i].cache = NULL;
    REQUIRE_OK(kvc_cache_clone(source, &jobs[i].cache));
  }
  kvc_cache_destroy(source); /* the clones keep the shared record alive */
  for (int i = 0; i < THREADS; i++) CHECK(pthread_create(&threads[i], NULL, grow, &jobs[i]) == 0);
  for (int i = 0; i < THREADS; i++) pthread_join(threads[i], NULL);
  for (int i = 0; i < THREADS; i++) {
    CHECK_EQ_I64(jobs[i].failures, 0);
    kvc_kv kv = tu_view(jobs[i].cache, 0);
    CHECK_EQ_I64(kv.key.shape[2], TOKENS);
    kvc_cache_destroy(jobs[i].cache);
  }
  CHECK(c.allocs > 2 * (THREADS + 1)); /* the clones grew */
  CHECK_EQ_I64(c.frees, c.allocs);
  CHECK_EQ_I64(c.live_bytes, 0);
}

int main(void) {
  TU_RUN(test_clones_grow_concurrently);
  return tu_finish();
}
