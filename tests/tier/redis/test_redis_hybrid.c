/*
 * A hybrid model's prefix through Redis, standalone and on the three-node
 * cluster: a pool commits a prompt (attention blocks and the recurrent
 * checkpoint go to the tier) and is destroyed; a fresh pool with its own
 * connection matches the prompt, the recurrent state of the last boundary
 * restored. With every node killed the match is 0 (the checkpoint is a miss
 * within the tier's deadline), never an error.
 */
#define _GNU_SOURCE
#include "../tier_hybrid.h"
#include "redis_pool_tier.h"
#include "redis_server.h"

enum { PROMPT = 17 };

static kvc_pool* open_pool(const char* seeds) {
  kvc_pool* p = NULL;
  kvc_error* e = th_pool(&p, 8);
  kvc_redis_tier_options o = rp_options(seeds, "hybrid:", 200);
  if (!e) e = rp_add_tier(p, &o);
  if (e) {
    fprintf(stderr, "open_pool: %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
    kvc_pool_destroy(p);
    return NULL;
  }
  return p;
}

/* Fills through one pool, matches through another: the prefix and the state of boundary 16. */
static void round_trip(const char* seeds, int32_t base) {
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, base);
  kvc_pool* p = open_pool(seeds);
  REQUIRE(p != NULL);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(th_step(p, s, tok, 16));
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).puts, 5);
  kvc_pool_destroy(p);
  p = open_pool(seeds);
  REQUIRE(p != NULL);
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, tok, PROMPT, &matched));
  CHECK_EQ_U64(matched, 16);
  CHECK_EQ_I64(pt_gather_mismatches(s, 0), 0);
  CHECK_EQ_I64(th_state_mismatches(s, 16), 0);
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).hits, 5);
  kvc_pool_destroy(p);
}

static rs_server standalone, nodes[3];

static void test_standalone(void) {
  char seeds[64];
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", standalone.port);
  round_trip(seeds, 1);
}

static void test_cluster_and_its_death(void) {
  char seeds[64];
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", nodes[0].port);
  round_trip(seeds, 3);
  /* A pool connected to the cluster, then every node dies: the match is a miss within the deadline. */
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, 3);
  kvc_pool* p = open_pool(seeds);
  REQUIRE(p != NULL);
  for (int i = 0; i < 3; i++) rs_kill(&nodes[i]);
  kvc_pool_sequence* s = NULL;
  uint64_t matched = 1;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  double t0 = rs_now_ms();
  REQUIRE_OK(kvc_pool_match_prefix(s, tok, PROMPT, &matched));
  double took = rs_now_ms() - t0;
  CHECK_EQ_U64(matched, 0);
  CHECK(took < 4 * 1000.0); /* one deadline per group and tier call, not a hang */
  kvc_pool_destroy(p);
}

int main(void) {
  rs_require();
  if (rs_start(&standalone, 0) != 0 || rs_cluster_start(nodes, 3) != 0) {
    fprintf(stderr, "cannot start redis-server (standalone and a three-node cluster)\n");
    rs_stop(&standalone);
    for (int i = 0; i < 3; i++) rs_stop(&nodes[i]);
    return 1;
  }
  TU_RUN(test_standalone);
  TU_RUN(test_cluster_and_its_death);
  rs_stop(&standalone);
  for (int i = 0; i < 3; i++) rs_stop(&nodes[i]);
  return tu_finish();
}
