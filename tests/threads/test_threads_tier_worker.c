/*
 * tests/threads/test_threads_tier_worker.c: the pool's tier worker thread
 * against the caller's: commits queue stores (some dropped by a small
 * queue) while the caller reads the counters the worker moves, prefetches are
 * collected, collected late and abandoned while their lookups run, and the
 * pool is destroyed with work queued. `make tsan` runs it under
 * ThreadSanitizer, which fails it on any data race between the worker, the
 * caller; the checks below hold the counts together.
 */
#include "../tier/memory_store.h" /* first: it sets the feature macros */

enum { PROMPT = 17, ROUNDS = 40 };

static void test_worker_against_callers(void) {
  kvc_pool* p = NULL;
  ms_store* m = NULL;
  REQUIRE_OK(ms_pool(64, "memory", &p, &m));
  atomic_store(&m->put_delay_us, 300); /* the network */
  atomic_store(&m->get_delay_us, 300);
  kvc_tier* t = kvc_pool_tier(p, 0);
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  o.max_jobs = 3; /* small: some commits find the queue full */
  o.events = 1;
  o.drain_timeout_ms = 0;
  REQUIRE_OK(kvc_pool_start_tier_worker(p, &o));
  int32_t tok[PROMPT];
  uint64_t matched_total = 0;
  for (int round = 0; round < ROUNDS; round++) {
    tt_prompt(tok, PROMPT, 1 + 1000 * (round % 8));
    kvc_pool_sequence* s = NULL;
    REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
    if (round % 4 == 3) {
      /* A prompt computed before: its blocks are in the store (or were dropped); fetch them back. */
      REQUIRE_OK(kvc_pool_clear_cache(p));
      kvc_pool_prefetch* f = NULL;
      REQUIRE_OK(kvc_pool_prefetch_start(s, tok, PROMPT, &f));
      uint64_t matched = 0;
      REQUIRE_OK(kvc_pool_prefetch_collect(f, s, round % 8 == 3 ? 0 : 2000, &matched));
      matched_total += matched;
      kvc_pool_prefetch_destroy(f);
      kvc_pool_prefetch* g = NULL; /* abandoned while its lookups may run */
      kvc_pool_sequence* s2 = NULL;
      REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s2));
      REQUIRE_OK(kvc_pool_prefetch_start(s2, tok, PROMPT, &g));
      kvc_pool_prefetch_destroy(g);
      kvc_pool_sequence_destroy(s2);
    } else {
      REQUIRE_OK(pt_step(p, 1, 2, s, tok, PROMPT));
    }
    kvc_pool_sequence_destroy(s);
    kvc_pool_event ev[64];
    size_t n = 0;
    kvc_error_destroy(kvc_pool_events_pull(p, ev, 64, &n));
    /* The counters while the worker moves them (its own lock and the tier's counter lock). */
    kvc_tier_stats st = tt_stats(t);
    kvc_tier_worker_stats ws;
    memset(&ws, 0, sizeof ws);
    ws.struct_size = sizeof ws;
    REQUIRE_OK(kvc_pool_tier_worker_stats(p, &ws));
    CHECK(st.puts + st.put_failures + st.dropped <= st.queued);
  }
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 5000));
  kvc_tier_stats st = tt_stats(t);
  CHECK(st.queued > 0);
  CHECK_EQ_U64(st.puts + st.put_failures + st.dropped, st.queued);
  (void)matched_total;
  /* Destroyed with work queued behind a sleeping store. */
  REQUIRE_OK(kvc_pool_start_tier_worker(p, &o));
  for (int round = 0; round < 6; round++) {
    tt_prompt(tok, PROMPT, 50000 + 1000 * round);
    kvc_pool_sequence* s = NULL;
    REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
    REQUIRE_OK(pt_step(p, 1, 2, s, tok, PROMPT));
    kvc_pool_sequence_destroy(s);
  }
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_worker_against_callers);
  return tu_finish();
}
