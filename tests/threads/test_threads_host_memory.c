/*
 * tests/threads/test_threads_host_memory.c: the library's own host memory
 * (kvc_host_memory_* in kvcache/allocator.h) is one process-wide list of
 * kept blocks. Threads create, fill, check and destroy caches whose stores
 * are large blocks (so they come from and go back to that list), while
 * another thread moves the retention limit and releases what is kept. Every
 * cache must read zeros where no token is and its own tokens elsewhere;
 * `make tsan` runs this under ThreadSanitizer, which fails it on any data
 * race in the list.
 */
#include <pthread.h>
#include <stdatomic.h>

#include "test_util.h"

#define THREADS 3
#define ROUNDS 12
enum { B = 1, H = 4, D = 64, CAP = 1024 }; /* static layers: 1 MiB stores of float32 */

static atomic_int workers_done;

static void* worker(void* arg) {
  intptr_t id = (intptr_t)arg;
  int ok = 1;
  for (int r = 0; ok && r < ROUNDS; r++) {
    kvc_layer_options l[2] = {tu_layer(KVC_LAYER_STATIC, 0, CAP), tu_layer(KVC_LAYER_STATIC, 0, CAP)};
    kvc_cache_options o = tu_custom_options(2, l);
    kvc_cache* c = NULL;
    kvc_error* e = kvc_cache_create(&o, &c); /* not the harness's checks: their counters are one thread's */
    if (e) {
      kvc_error_destroy(e);
      return (void*)1;
    }
    int64_t n = 1 + (id * 7 + r * 13) % 200;
    for (uint32_t layer = 0; ok && layer < 2; layer++) {
      kvc_kv out;
      e = tu_update_tokens(c, layer, B, H, n, D, D, 1000 * id + r, NULL, &out);
      ok = !e && tu_zero_from(&out.key, n) && tu_zero_from(&out.value, n);
      kvc_error_destroy(e);
    }
    kvc_cache_destroy(c);
  }
  atomic_fetch_add(&workers_done, 1);
  return ok ? NULL : (void*)1;
}

/* Moves the limit between nothing and plenty, releases, and asks, until the workers are done. */
static void* limit_mover(void* arg) {
  (void)arg;
  for (uint64_t i = 0; atomic_load(&workers_done) < THREADS; i++) {
    kvc_host_memory_set_retention(i % 3 == 0 ? 0 : (uint64_t)64 << 20);
    if (i % 5 == 0) kvc_host_memory_release();
    (void)kvc_host_memory_retained();
  }
  return NULL;
}

static void test_threads_share_the_kept_blocks(void) {
  uint64_t previous = kvc_host_memory_set_retention((uint64_t)64 << 20);
  pthread_t t[THREADS], mover;
  atomic_store(&workers_done, 0);
  for (intptr_t i = 0; i < THREADS; i++) REQUIRE(pthread_create(&t[i], NULL, worker, (void*)i) == 0);
  REQUIRE(pthread_create(&mover, NULL, limit_mover, NULL) == 0);
  for (int i = 0; i < THREADS; i++) {
    void* r;
    pthread_join(t[i], &r);
    CHECK(r == NULL); /* the thread's caches held its tokens and zeros, round after round */
  }
  pthread_join(mover, NULL);
  kvc_host_memory_set_retention((uint64_t)64 << 20);
  CHECK(kvc_host_memory_retained() <= (uint64_t)64 << 20);
  kvc_host_memory_release();
  CHECK_EQ_U64(kvc_host_memory_retained(), 0);
  kvc_host_memory_set_retention(previous);
}

int main(void) {
  TU_RUN(test_threads_share_the_kept_blocks);
  return tu_finish();
}
