/*
 * The Redis tier's ops against a three-node Redis Cluster of the test's own
 * (cluster-enabled, joined with redis-cli --cluster create, no replicas):
 * the slot map read from one seed, blocks spread over every node, ASK during
 * a slot migration and MOVED after it, a node killed in the middle of a run
 * (its blocks are misses, the others' are found intact, no call waits past
 * its timeouts) and recovery once it is back.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "redis_tier_test.h"

#define NODES 3
static rs_server nodes[NODES];

static size_t dbsize(const rs_server* s) {
  char out[64];
  return rs_cli(s->port, out, sizeof out, "dbsize") == 0 ? (size_t)atol(out) : (size_t)-1;
}

static int open_tier(rt_tier* t, int seed_node, uint32_t reconnect_ms) {
  char seeds[64];
  kvc_redis_tier_options o = rt_options(&nodes[seed_node].port, 1, KVC_REDIS_CLUSTER_AUTO, seeds, sizeof seeds);
  o.reconnect_interval_ms = reconnect_ms;
  o.command_timeout_ms = 1000;
  kvc_error* e = rt_open(&o, t);
  if (!e) return 0;
  fprintf(stderr, "  %s\n", kvc_error_message(e));
  kvc_error_destroy(e);
  return -1;
}

static void test_spread_over_nodes(void) {
  rt_tier t = {0};
  REQUIRE(open_tier(&t, 1, 1000) == 0);
  rt_run r;
  REQUIRE(rt_run_make(&r, 300, 4096, 1) == 0);
  size_t before[NODES];
  for (int i = 0; i < NODES; i++) before[i] = dbsize(&nodes[i]);
  CHECK_EQ_U64(rt_put(&t, &r), 300);
  size_t leading = 0;
  CHECK_EQ_U64(rt_get(&t, &r, &leading), 300);
  CHECK_EQ_U64(leading, 300);
  /* Every node holds a fair share (no hash tag puts them in one slot). */
  size_t total = 0;
  for (int i = 0; i < NODES; i++) {
    size_t n = dbsize(&nodes[i]) - before[i];
    total += n;
    if (!CHECK(n > 50)) fprintf(stderr, "  node %d holds %zu of 300\n", i, n);
  }
  CHECK_EQ_U64(total, 300);
  /* EXISTS routed like GET, a pipeline per node: all 300 exist, the keys of another model none. */
  uint8_t* found = malloc(300);
  rt_run other;
  REQUIRE(found && rt_run_make(&other, 300, 1, 2) == 0);
  CHECK_EQ_U64(t.ops.exists_many(t.ctx, r.keys, found, 300), 300);
  CHECK_EQ_U64(t.ops.exists_many(t.ctx, other.keys, found, 300), 0);
  rt_run_free(&other);
  free(found);
  /* The standalone mode cannot serve a cluster: every key of another node is MOVED and retried once, found. */
  rt_tier forced = {0};
  char seeds[64];
  kvc_redis_tier_options o = rt_options(&nodes[0].port, 1, KVC_REDIS_CLUSTER_ON, seeds, sizeof seeds);
  REQUIRE_OK(rt_open(&o, &forced));
  CHECK_EQ_U64(rt_get(&forced, &r, NULL), 300);
  rt_close(&forced);
  rt_run_free(&r);
  rt_close(&t);
}

/* The node holding `key` (CLUSTER KEYSLOT, then the ranges of each node's own line in CLUSTER NODES), or -1. */
static int owner(const char* key, long* slot) {
  char out[64];
  if (rs_cli(nodes[0].port, out, sizeof out, "cluster keyslot %s", key) != 0) return -1;
  *slot = atol(out);
  for (int i = 0; i < NODES; i++) {
    char info[8192];
    if (rs_cli(nodes[i].port, info, sizeof info, "cluster nodes") != 0) continue;
    char* line = strstr(info, "myself");
    if (!line) continue;
    line[strcspn(line, "\n")] = 0;
    /* "... connected 0-5460 5462" : ranges and single slots after the eighth field. */
    for (char* p = strchr(line, ' '); p; p = strchr(p + 1, ' ')) {
      long lo, hi;
      int n = sscanf(p + 1, "%ld-%ld", &lo, &hi);
      if (n == 1) hi = lo;
      if (n >= 1 && *slot >= lo && *slot <= hi) return i;
    }
  }
  return -1;
}

static void node_id(int i, char* id, size_t cap) {
  rs_cli(nodes[i].port, id, cap, "cluster myid");
  id[strcspn(id, "\r\n")] = 0;
}

static void test_ask_and_moved(void) {
  rt_tier t = {0};
  REQUIRE(open_tier(&t, 0, 1000) == 0);
  rt_run r;
  REQUIRE(rt_run_make(&r, 1, 2000, 7) == 0);
  CHECK_EQ_U64(rt_put(&t, &r), 1);
  /* The key's name as the tier writes it. */
  char key[200] = "kvc:";
  for (int b = 0; b < KVC_BLOCK_HASH_SIZE; b++) sprintf(key + strlen(key), "%02x", r.keys[0].fingerprint[b]);
  sprintf(key + strlen(key), ":%u:", r.keys[0].group);
  for (int b = 0; b < KVC_BLOCK_HASH_SIZE; b++) sprintf(key + strlen(key), "%02x", r.keys[0].block_hash[b]);
  long slot = -1;
  int from = owner(key, &slot);
  REQUIRE(from >= 0);
  int to = (from + 1) % NODES;
  char from_id[64], to_id[64], out[256];
  node_id(from, from_id, sizeof from_id);
  node_id(to, to_id, sizeof to_id);
  /* Migration under way: the key already moved, the slot still the old node's, which answers ASK. */
  CHECK(rs_cli(nodes[to].port, out, sizeof out, "cluster setslot %ld importing %s", slot, from_id) == 0);
  CHECK(rs_cli(nodes[from].port, out, sizeof out, "cluster setslot %ld migrating %s", slot, to_id) == 0);
  CHECK(rs_cli(nodes[from].port, out, sizeof out, "migrate 127.0.0.1 %d %s 0 5000", nodes[to].port, key) == 0);
  CHECK(strstr(out, "OK") != NULL);
  CHECK(rs_cli(nodes[from].port, out, sizeof out, "get %s", key) == 0 && strstr(out, "ASK") != NULL);
  size_t leading = 0;
  CHECK_EQ_U64(rt_get(&t, &r, &leading), 1);
  /* A put of a key the old node does not have goes to the importing node through ASK too. */
  CHECK_EQ_U64(rt_put(&t, &r), 1);
  CHECK(rs_cli(nodes[to].port, out, sizeof out, "cluster countkeysinslot %ld", slot) == 0 && atol(out) == 1);
  /* Migration done: the old node answers MOVED, the tier corrects its map and retries. */
  for (int i = 0; i < NODES; i++)
    CHECK(rs_cli(nodes[i].port, out, sizeof out, "cluster setslot %ld node %s", slot, to_id) == 0);
  CHECK(rs_cli(nodes[from].port, out, sizeof out, "get %s", key) == 0 && strstr(out, "MOVED") != NULL);
  CHECK_EQ_U64(rt_get(&t, &r, &leading), 1);
  CHECK_EQ_U64(rt_put(&t, &r), 1);
  CHECK_EQ_U64(rt_get(&t, &r, &leading), 1);
  /* And back, so that later tests see the cluster as it was. */
  for (int i = 0; i < NODES; i++) rs_cli(nodes[i].port, out, sizeof out, "cluster setslot %ld node %s", slot, from_id);
  rt_run_free(&r);
  rt_close(&t);
}

typedef struct killer {
  rs_server* victim;
  int delay_ms;
} killer;

static void* killer_main(void* arg) {
  killer* k = arg;
  rs_sleep_ms(k->delay_ms);
  rs_kill(k->victim);
  return NULL;
}

static void test_node_killed_mid_run(void) {
  rt_tier t = {0};
  REQUIRE(open_tier(&t, 0, 300) == 0);
  rt_run r;
  REQUIRE(rt_run_make(&r, 100, 64 * 1024, 8) == 0);
  size_t before = dbsize(&nodes[2]);
  CHECK_EQ_U64(rt_put(&t, &r), 100);
  size_t on_victim = dbsize(&nodes[2]) - before; /* the blocks of this run that will be missing */
  /* Node 2 dies while the run is read and written over and over: values are intact or missing, never wrong. */
  killer k = {&nodes[2], 150};
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, killer_main, &k) == 0);
  double worst = 0, end = rs_now_ms() + 1500;
  size_t last_found = 0;
  while (rs_now_ms() < end) {
    double t0 = rs_now_ms();
    last_found = rt_get(&t, &r, NULL); /* rt_get fails the test on any value that differs */
    rt_put(&t, &r);
    double took = rs_now_ms() - t0;
    worst = took > worst ? took : worst;
  }
  pthread_join(th, NULL);
  /* One call may wait for the dead node once: connect (50) + command (1000) timeouts at most, plus work. */
  if (!CHECK(worst < 50 + 1000 + 700)) fprintf(stderr, "  slowest call %.0f ms\n", worst);
  /* Its blocks are misses, the others' are found. */
  CHECK(on_victim > 0 && on_victim < 100);
  size_t found = rt_get(&t, &r, NULL);
  if (!CHECK_EQ_U64(found, 100 - on_victim)) fprintf(stderr, "  last loop found %zu\n", last_found);
  uint8_t exists[100];
  CHECK_EQ_U64(t.ops.exists_many(t.ctx, r.keys, exists, 100), 100 - on_victim); /* the dead node's: not there */
  CHECK_EQ_U64(rt_put(&t, &r), 100 - on_victim);
  /* The node comes back (same port, its nodes.conf, no data): once the cluster says ok, everything works again. */
  REQUIRE(rs_launch(&nodes[2]) == 0);
  for (int i = 0; i < NODES; i++) CHECK(rs_cluster_wait_ok(&nodes[i], 10000) == 0);
  double back = rs_now_ms() + 5000;
  size_t stored = 0;
  while (rs_now_ms() < back && (stored = rt_put(&t, &r)) != 100) rs_sleep_ms(100);
  CHECK_EQ_U64(stored, 100);
  CHECK_EQ_U64(rt_get(&t, &r, NULL), 100);
  rt_run_free(&r);
  rt_close(&t);
}

int main(void) {
  rs_require();
  if (rs_cluster_start(nodes, NODES) != 0) {
    fprintf(stderr, "cannot start a three-node redis cluster\n");
    for (int i = 0; i < NODES; i++) rs_stop(&nodes[i]);
    return 1;
  }
  TU_RUN(test_spread_over_nodes);
  TU_RUN(test_ask_and_moved);
  TU_RUN(test_node_killed_mid_run);
  for (int i = 0; i < NODES; i++) rs_stop(&nodes[i]);
  return tu_finish();
}
