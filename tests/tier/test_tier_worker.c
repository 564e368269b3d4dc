/*
 * test_tier_worker.c: the pool's tier worker (kvc_pool_start_tier_worker):
 * a commit queues its stores and returns while a slow store sleeps; a full
 * queue drops and counts (stats and TIER_DROPPED events); a stop with work
 * pending drains within its bound and drops the rest; a prefetch started
 * early is collected into a match with the right bytes; a prefetch too slow
 * for its collect, or destroyed uncollected, is abandoned without a leak;
 * bad arguments are refused with the pool unchanged.
 */
#include "memory_store.h" /* first: it sets the feature macros */

enum { PROMPT = 17 };

/* A pool of 64 blocks (room for blocks held by queued stores) with a store in memory as its commit tier; the
   tests slow the store down. */
static kvc_pool* pool_with_store(ms_store** out) {
  kvc_pool* p = NULL;
  kvc_error_destroy(ms_pool(64, "slow", &p, out));
  return p;
}

/* pool_with_store, each store taking delay_us, with its tier worker started with `o` (NULL: the defaults); NULL
 * when either failed. */
static kvc_pool* slow_worker_pool(ms_store** m, int delay_us, const kvc_tier_worker_options* o) {
  kvc_pool* p = pool_with_store(m);
  if (!CHECK(p != NULL)) return NULL;
  atomic_store(&(*m)->put_delay_us, delay_us);
  if (!CHECK_OK(kvc_pool_start_tier_worker(p, o))) {
    kvc_pool_destroy(p);
    return NULL;
  }
  return p;
}

static kvc_tier_worker_stats worker_stats(const kvc_pool* p) {
  kvc_tier_worker_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  kvc_error_destroy(kvc_pool_tier_worker_stats(p, &s));
  return s;
}

/* One prompt of PROMPT tokens from `base`, computed and committed in a fresh sequence (4 full blocks). */
static double commit_prompt(kvc_pool* p, int32_t base) {
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, base);
  return tt_commit_ms(p, tok, PROMPT);
}

static void test_commit_does_not_wait_for_a_slow_store(void) {
  ms_store* m;
  kvc_pool* p = slow_worker_pool(&m, 400000, NULL);
  REQUIRE(p);
  double took = commit_prompt(p, 1);
  CHECK(took < 200); /* the store sleeps 400 ms in the worker */
  CHECK_EQ_U64(worker_stats(p).blocks_queued, 4);
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 5000)); /* drains: the store runs to its end */
  CHECK_EQ_U64(m->count, 4);
  kvc_tier_stats ts = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(ts.queued, 4);
  CHECK_EQ_U64(ts.puts, 4);
  CHECK_EQ_U64(ts.dropped, 0);
  CHECK_EQ_U64(worker_stats(p).running, 0);
  kvc_pool_destroy(p);
}

static void test_full_queue_drops_and_counts(void) {
  ms_store* m;
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  o.max_jobs = 1;
  o.events = 1;
  kvc_pool* p = slow_worker_pool(&m, 300000, &o);
  REQUIRE(p);
  commit_prompt(p, 1); /* one job: the worker sleeps in it */
  double took = commit_prompt(p, 200); /* no room: dropped at once */
  CHECK(took < 150);
  kvc_tier_worker_stats ws = worker_stats(p);
  CHECK_EQ_U64(ws.blocks_queued, 4);
  CHECK_EQ_U64(ws.blocks_dropped, 4);
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 5000));
  kvc_tier_stats ts = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(ts.queued, 8);
  CHECK_EQ_U64(ts.dropped, 4);
  CHECK_EQ_U64(ts.puts + ts.put_failures + ts.dropped, ts.queued);
  kvc_pool_event ev[64];
  size_t n = 0, stored = 0, dropped = 0;
  REQUIRE_OK(kvc_pool_events_pull(p, ev, 64, &n));
  for (size_t i = 0; i < n; i++) {
    stored += ev[i].kind == KVC_POOL_EVENT_TIER_STORED;
    dropped += ev[i].kind == KVC_POOL_EVENT_TIER_DROPPED;
    if (ev[i].kind >= KVC_POOL_EVENT_TIER_STORED) CHECK_EQ_U64(ev[i].block_id, 0); /* the tier's index */
  }
  CHECK_EQ_U64(stored, 4);
  CHECK_EQ_U64(dropped, 4);
  kvc_pool_destroy(p);
}

static void test_shutdown_with_pending_work(void) {
  ms_store* m;
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  o.drain_timeout_ms = 0; /* kvc_pool_destroy abandons what is queued */
  kvc_pool* p = slow_worker_pool(&m, 150000, &o);
  REQUIRE(p);
  for (int32_t i = 0; i < 4; i++) commit_prompt(p, 1 + 300 * i);
  CHECK_EQ_U64(worker_stats(p).pending_jobs, 4);
  kvc_tier* t = kvc_pool_tier(p, 0);
  double t0 = tt_now_ms();
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 0));
  double took = tt_now_ms() - t0;
  CHECK(took < 1000); /* the store in flight (150 ms), not the four */
  kvc_tier_stats ts = tt_stats(t);
  CHECK(ts.puts <= 8);
  CHECK(ts.dropped >= 8);
  CHECK_EQ_U64(ts.puts + ts.put_failures + ts.dropped, 16);
  CHECK_EQ_U64(ms_locked(m, &m->count), ts.puts);
  /* Destroy with work queued: abandoned the same way, nothing leaked (the sanitizer build checks). */
  REQUIRE_OK(kvc_pool_start_tier_worker(p, &o));
  for (int32_t i = 0; i < 3; i++) commit_prompt(p, 5000 + 300 * i);
  kvc_pool_destroy(p);
}

/* Stores one prompt synchronously, clears the cache: the tier holds 4 blocks, memory none. */
static kvc_pool* pool_with_stored_prompt(ms_store** m, int32_t* tok) {
  kvc_pool* p = pool_with_store(m);
  tt_prompt(tok, PROMPT, 1);
  kvc_pool_sequence* s = NULL;
  kvc_error_destroy(kvc_pool_sequence_create(p, NULL, &s));
  kvc_error_destroy(pt_step(p, 1, 2, s, tok, PROMPT));
  kvc_pool_sequence_destroy(s);
  kvc_error_destroy(kvc_pool_clear_cache(p));
  return p;
}

static void test_prefetch_started_and_collected(void) {
  ms_store* m;
  int32_t tok[PROMPT];
  kvc_pool* p = pool_with_stored_prompt(&m, tok);
  CHECK_EQ_U64(m->count, 4);
  REQUIRE_OK(kvc_pool_start_tier_worker(p, NULL));
  atomic_store(&m->get_delay_us, 100000);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  kvc_pool_prefetch* f = NULL;
  double t0 = tt_now_ms();
  REQUIRE_OK(kvc_pool_prefetch_start(s, tok, PROMPT, &f));
  CHECK(tt_now_ms() - t0 < 80); /* the lookup sleeps 100 ms in the worker */
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_prefetch_collect(f, s, 10000, &matched));
  CHECK_EQ_U64(matched, 16);
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  CHECK_EQ_U64(ms_locked(m, &m->get_calls), 1); /* collect did not ask the tier again */
  kvc_tier_stats ts = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(ts.hits, 4);
  /* Collected once. */
  kvc_pool_sequence* s2 = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s2));
  CHECK_REFUSED(kvc_pool_prefetch_collect(f, s2, 0, &matched), KVC_ERROR_INVALID_STATE, "collected already");
  kvc_pool_prefetch_destroy(f);
  /* Into a sequence that is not empty: refused, the prefetch still collectable. */
  REQUIRE_OK(kvc_pool_prefetch_start(s2, tok, PROMPT, &f));
  CHECK_REFUSED(kvc_pool_prefetch_collect(f, s, 1000, &matched), KVC_ERROR_INVALID_ARGUMENT, "holds 16 tokens");
  REQUIRE_OK(kvc_pool_prefetch_collect(f, s2, 10000, &matched));
  CHECK_EQ_U64(matched, 16); /* from memory now: the first collect cached the blocks */
  kvc_pool_prefetch_destroy(f);
  kvc_tier_worker_stats ws = worker_stats(p);
  CHECK_EQ_U64(ws.prefetches, 2);
  CHECK_EQ_U64(ws.prefetches_late, 0);
  kvc_pool_sequence_destroy(s);
  kvc_pool_sequence_destroy(s2);
  kvc_pool_destroy(p);
}

static void test_prefetch_without_worker_is_a_match(void) {
  ms_store* m;
  int32_t tok[PROMPT];
  kvc_pool* p = pool_with_stored_prompt(&m, tok);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  kvc_pool_prefetch* f = NULL;
  REQUIRE_OK(kvc_pool_prefetch_start(s, tok, PROMPT, &f));
  CHECK_EQ_U64(ms_locked(m, &m->get_calls), 0);
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_prefetch_collect(f, s, 0, &matched));
  CHECK_EQ_U64(matched, 16);
  CHECK_EQ_U64(ms_locked(m, &m->get_calls), 1);
  kvc_pool_prefetch_destroy(f);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
}

static void test_prefetch_late_and_abandoned(void) {
  ms_store* m;
  int32_t tok[PROMPT];
  kvc_pool* p = pool_with_stored_prompt(&m, tok);
  REQUIRE_OK(kvc_pool_start_tier_worker(p, NULL));
  atomic_store(&m->get_delay_us, 300000);
  kvc_pool_sequence* s;
  double collect_ms = 0;
  /* Memory alone: the tier is not asked on the step. */
  CHECK_EQ_U64(tt_prefetch_collect(p, tok, PROMPT, 20, &s, &collect_ms), 0);
  CHECK(collect_ms < 250); /* its own deadline, not the store's */
  /* Destroyed without a collect, while its lookup sleeps in the worker, and one still queued behind it. */
  kvc_pool_sequence* s2 = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s2));
  kvc_pool_prefetch *g = NULL, *h = NULL;
  REQUIRE_OK(kvc_pool_prefetch_start(s2, tok, PROMPT, &g));
  REQUIRE_OK(kvc_pool_prefetch_start(s2, tok, PROMPT, &h));
  kvc_pool_prefetch_destroy(g);
  kvc_tier_worker_stats ws = worker_stats(p);
  CHECK_EQ_U64(ws.prefetches, 3);
  CHECK_EQ_U64(ws.prefetches_late, 1);
  CHECK_EQ_U64(ws.prefetches_abandoned, 1);
  /* h is left to kvc_pool_destroy, which abandons it and frees it. */
  kvc_pool_sequence_destroy(s);
  kvc_pool_sequence_destroy(s2);
  kvc_pool_destroy(p);
}

static void test_bad_arguments(void) {
  ms_store* m;
  kvc_pool* p = pool_with_store(&m);
  kvc_tier_worker_options o;
  kvc_tier_worker_options_init(&o);
  CHECK_EQ_U64(o.max_jobs, 256);
  CHECK_REFUSED(kvc_pool_start_tier_worker(NULL, &o), KVC_ERROR_INVALID_ARGUMENT, "pool is NULL");
  o.struct_size = 8;
  CHECK_REFUSED(kvc_pool_start_tier_worker(p, &o), KVC_ERROR_INVALID_ARGUMENT, "struct_size is 8");
  o.struct_size = sizeof o;
  o.events = 2;
  CHECK_REFUSED(kvc_pool_start_tier_worker(p, &o), KVC_ERROR_INVALID_ARGUMENT, "events is 2");
  CHECK_EQ_U64(worker_stats(p).running, 0); /* nothing started */
  REQUIRE_OK(kvc_pool_start_tier_worker(p, NULL));
  CHECK_REFUSED(kvc_pool_start_tier_worker(p, NULL), KVC_ERROR_INVALID_STATE, "runs already");
  kvc_tier_worker_stats ws;
  ws.struct_size = 4;
  CHECK_REFUSED(kvc_pool_tier_worker_stats(p, &ws), KVC_ERROR_INVALID_ARGUMENT, "struct_size is 4");
  kvc_tier_stats old;
  memset(&old, 0, sizeof old);
  old.struct_size = 64; /* a 0.6 caller's size: filled up to bytes_read */
  REQUIRE_OK(kvc_tier_stats_get(kvc_pool_tier(p, 0), &old));
  CHECK_EQ_U64(old.struct_size, 64);
  CHECK_EQ_U64(old.queued, 0);
  int32_t tok[4] = {1, 2, 3, 4};
  kvc_pool_prefetch* f = NULL;
  CHECK_REFUSED(kvc_pool_prefetch_start(NULL, tok, 4, &f), KVC_ERROR_INVALID_ARGUMENT, "sequence is NULL");
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  tok[2] = -5;
  CHECK_REFUSED(kvc_pool_prefetch_start(s, tok, 4, &f), KVC_ERROR_INVALID_ARGUMENT, "-5");
  CHECK(f == NULL);
  CHECK_EQ_U64(worker_stats(p).prefetches, 0);
  CHECK_REFUSED(kvc_pool_prefetch_collect(NULL, s, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "prefetch is NULL");
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 0));
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 0)); /* none: nothing to do */
  CHECK_REFUSED(kvc_pool_stop_tier_worker(NULL, 0), KVC_ERROR_INVALID_ARGUMENT, "pool is NULL");
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
}

int main(void) {
  TU_RUN(test_commit_does_not_wait_for_a_slow_store);
  TU_RUN(test_full_queue_drops_and_counts);
  TU_RUN(test_shutdown_with_pending_work);
  TU_RUN(test_prefetch_started_and_collected);
  TU_RUN(test_prefetch_without_worker_is_a_match);
  TU_RUN(test_prefetch_late_and_abandoned);
  TU_RUN(test_bad_arguments);
  return tu_finish();
}
