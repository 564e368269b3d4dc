/*
 * The pool's tier worker against a real redis-server: stores reach Redis
 * and come back by a prefetch; with the server stopped (SIGSTOP: it accepts
 * nothing and answers nothing) a commit returns at once while the worker's
 * store waits out the call deadline and fails (counted), a prefetch's
 * collect returns by its own deadline, and stopping the worker takes one
 * call deadline, not one per queued store.
 */
#define _GNU_SOURCE
#include "../tier_test.h"
#include "redis_pool_tier.h"
#include "redis_server.h"

#define PROMPT 17
static const pt_group group = {KVC_POOL_GROUP_FULL, 4, 64, 0};
static const uint32_t layer_group[2] = {0, 0};

static kvc_pool* pool_with_redis(const char* seeds) {
  kvc_pool* p = NULL;
  kvc_error_destroy(pt_pool(&p, &group, 1, layer_group, 2, KVC_POOL_LAYOUT_NHD, 64, 1));
  kvc_redis_tier_options o = rp_options(seeds, "worker:", 200);
  o.connect_timeout_ms = 200;
  o.call_timeout_ms = 400;
  kvc_error_destroy(rp_add_tier(p, &o));
  return p;
}

static void prompt(int32_t* tok, int32_t base) {
  for (int i = 0; i < PROMPT; i++) tok[i] = base + i * 7;
}

static rs_server server;
static char seeds[64];

static void test_stores_reach_redis_and_come_back(void) {
  int32_t tok[PROMPT];
  prompt(tok, 100);
  kvc_pool* p = pool_with_redis(seeds);
  REQUIRE(kvc_pool_tier(p, 0) != NULL);
  REQUIRE_OK(kvc_pool_start_tier_worker(p, NULL));
  tt_commit_ms(p, tok, PROMPT);
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 10000));
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).puts, 4);
  kvc_pool_destroy(p);

  kvc_pool* q = pool_with_redis(seeds); /* another pool of the model: memory empty */
  REQUIRE_OK(kvc_pool_start_tier_worker(q, NULL));
  kvc_pool_sequence* s;
  CHECK_EQ_U64(tt_prefetch_collect(q, tok, PROMPT, 10000, &s, NULL), 16);
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(q);
}

static void test_stopped_server_never_stalls_the_step(void) {
  kvc_pool* p = pool_with_redis(seeds);
  REQUIRE(kvc_pool_tier(p, 0) != NULL);
  kvc_tier_worker_options o = KVC_TIER_WORKER_OPTIONS_INIT;
  o.drain_timeout_ms = 0;
  REQUIRE_OK(kvc_pool_start_tier_worker(p, &o));
  kill(server.pid, SIGSTOP);
  int32_t tok[PROMPT];
  double worst = 0;
  for (int i = 0; i < 3; i++) {
    prompt(tok, 5000 + 1000 * i);
    double took = tt_commit_ms(p, tok, PROMPT);
    if (took > worst) worst = took;
  }
  CHECK(worst < 150); /* each store waits out 400 ms in the worker, not here */
  /* A prefetch of a prompt the stopped server holds: the collect keeps its own deadline. */
  prompt(tok, 100);
  kvc_pool_sequence* s;
  double collect_ms = 0;
  CHECK_EQ_U64(tt_prefetch_collect(p, tok, PROMPT, 50, &s, &collect_ms), 0);
  CHECK(collect_ms < 300);
  kvc_pool_sequence_destroy(s);
  /* Stop: the store in flight ends by its deadline, the queued ones are dropped. */
  double t0 = rs_now_ms();
  REQUIRE_OK(kvc_pool_stop_tier_worker(p, 0));
  double stop = rs_now_ms() - t0;
  CHECK(stop < 1500);
  kvc_tier_stats st = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(st.puts, 0);
  CHECK_EQ_U64(st.queued, 12);
  CHECK_EQ_U64(st.put_failures + st.dropped, 12);
  kill(server.pid, SIGCONT);
  kvc_pool_destroy(p);
}

int main(void) {
  rs_require();
  if (rs_start(&server, 0) != 0) {
    printf("SKIPPED: redis-server did not start\n");
    return 77;
  }
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", server.port);
  TU_RUN(test_stores_reach_redis_and_come_back);
  TU_RUN(test_stopped_server_never_stalls_the_step);
  rs_stop(&server);
  return tu_finish();
}
