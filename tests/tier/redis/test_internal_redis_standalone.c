/*
 * The Redis tier's ops against one redis-server of the test's own: bad
 * options refused naming the option, round trips, the documented key
 * layout, values larger than the buffer, pipelined runs of 100 blocks in
 * windows, TTL, AUTH, a server that accepts but never answers (SIGSTOP: the
 * call returns within the timeouts and the node is left alone until the
 * reconnect interval), a server killed and restarted, and two writers of the
 * same block with separate tiers.
 */
#define _GNU_SOURCE
#include <pthread.h>

#include "redis_tier_test.h"

static rs_server server;

/* A tier (cluster mode AUTO, the other options their defaults) on the shared server or on one of the test's own
 * (own_start: to stop, kill or lock), for a test to adjust and open. The options point at seeds: a fixture is
 * never copied. */
typedef struct fixture {
  rs_server s; /* own_start only */
  char seeds[64];
  kvc_redis_tier_options o;
  rt_tier t;
} fixture;

static void fixture_init(fixture* x, const int* port) {
  x->o = rt_options(port, 1, KVC_REDIS_CLUSTER_AUTO, x->seeds, sizeof x->seeds);
  memset(&x->t, 0, sizeof x->t);
}

static void own_start(fixture* x) {
  REQUIRE(rs_start(&x->s, 0) == 0);
  fixture_init(x, &x->s.port);
}

static void own_stop(fixture* x) {
  rt_close(&x->t);
  rs_stop(&x->s);
}

static void test_options_refused(void) {
  char seeds[64];
  int port = server.port;
  rt_tier t = {{0}, (void*)0x1};
  kvc_redis_tier_options o = rt_options(&port, 1, KVC_REDIS_CLUSTER_AUTO, seeds, sizeof seeds);
  CHECK(tt_err_says(kvci_redis_tier_open(NULL, &t.ops, &t.ctx), KVC_ERROR_INVALID_ARGUMENT, "options is NULL"));
  kvc_redis_tier_options b = o;
  b.struct_size = 8;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "struct_size is 8"));
  b = o, b.cluster = 3;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.cluster is 3"));
  b = o, b.seeds = NULL;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "options.seeds is NULL"));
  b = o, b.seeds = "127.0.0.1:6379,localhost";
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "'localhost', which is not host:port"));
  b = o, b.seeds = "127.0.0.1:70000";
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "'127.0.0.1:70000'"));
  b = o, b.key_prefix = "kv{c}:";
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "hash tag"));
  b = o, b.connect_timeout_ms = 0;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "connect_timeout_ms is 0"));
  b = o, b.command_timeout_ms = 0;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "command_timeout_ms is 0"));
  b = o, b.max_pipeline = 0;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "max_pipeline is 0"));
  b = o, b.username = "alice";
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "password is NULL"));
  b = o, b.reserved = 1;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_INVALID_ARGUMENT, "reserved is 1"));
  /* Nobody at the address: refused quickly, naming the seed and why. */
  int closed = rs_free_port();
  char closed_seeds[64];
  kvc_redis_tier_options nobody = rt_options(&closed, 1, KVC_REDIS_CLUSTER_AUTO, closed_seeds, sizeof closed_seeds);
  double t0 = rs_now_ms();
  CHECK(tt_err_says(rt_open(&nobody, &t), KVC_ERROR_IO, "refused"));
  CHECK(rs_now_ms() - t0 < 1000);
  /* A standalone server where a cluster is required. */
  b = o, b.cluster = KVC_REDIS_CLUSTER_ON;
  CHECK(tt_err_says(rt_open(&b, &t), KVC_ERROR_IO, "cluster support disabled"));
  /* The outputs are untouched by every refusal. */
  CHECK(t.ctx == (void*)0x1 && t.ops.struct_size == 0);
  kvc_redis_tier_options init;
  kvc_redis_tier_options_init(&init);
  /* Field by field: the prefix literal may sit at another address in the library than here. */
  CHECK(init.struct_size == sizeof init && init.cluster == KVC_REDIS_CLUSTER_AUTO && init.seeds == NULL);
  CHECK(init.key_prefix && strcmp(init.key_prefix, "kvc:") == 0 && !init.username && !init.password);
  CHECK(init.connect_timeout_ms == 50 && init.command_timeout_ms == 200 && init.reconnect_interval_ms == 1000);
  CHECK(init.ttl_seconds == 0 && init.max_pipeline == 32 && init.reserved == 0);
}

static void test_round_trip_and_key_layout(void) {
  fixture x;
  fixture_init(&x, &server.port);
  REQUIRE_OK(rt_open(&x.o, &x.t));
  rt_run r;
  REQUIRE(rt_run_make(&r, 3, 300 * 1024, 1) == 0);
  CHECK_EQ_U64(rt_put(&x.t, &r), 3);
  size_t leading = 0;
  CHECK_EQ_U64(rt_get(&x.t, &r, &leading), 3);
  CHECK_EQ_U64(leading, 3);
  /* Sizes differ per value; a value of zero bytes is a miss (a framed value is never empty). */
  size_t sizes[2] = {1, 0};
  const void* values[2] = {r.data, r.data};
  CHECK_EQ_U64(x.t.ops.put_many(x.t.ctx, r.keys, values, sizes, 2), 2);
  CHECK_EQ_U64(x.t.ops.get_many(x.t.ctx, r.keys, (void* const*)r.dst, r.size, r.sizes, 3), 1);
  CHECK(r.sizes[0] == 1 && r.read[0] == r.data[0] && r.sizes[1] == 0 && r.sizes[2] == r.size);
  CHECK_EQ_U64(rt_put(&x.t, &r), 3);
  CHECK_EQ_U64(rt_get(&x.t, &r, &leading), 3);
  /* The key layout of docs/tiers.md, seen from redis-cli. */
  char key[200] = "kvc:", out[64];
  for (int b = 0; b < KVC_BLOCK_HASH_SIZE; b++) sprintf(key + strlen(key), "%02x", r.keys[2].fingerprint[b]);
  sprintf(key + strlen(key), ":%u:", r.keys[2].group);
  for (int b = 0; b < KVC_BLOCK_HASH_SIZE; b++) sprintf(key + strlen(key), "%02x", r.keys[2].block_hash[b]);
  CHECK(rs_cli(server.port, out, sizeof out, "strlen %s", key) == 0 && atol(out) == 300 * 1024);
  /* Misses: an unknown key in the middle stops the leading count; a value larger than the buffer is a miss. */
  rt_run other;
  REQUIRE(rt_run_make(&other, 3, 1000, 2) == 0);
  kvc_tier_key keys[3] = {r.keys[2], other.keys[0], r.keys[2]};
  size_t got[3];
  uint8_t* big = malloc(3 * r.size);
  void* dst[3] = {big, big + r.size, big + 2 * r.size};
  CHECK_EQ_U64(x.t.ops.get_many(x.t.ctx, keys, dst, r.size, got, 3), 1);
  CHECK(got[0] == r.size && got[1] == 0 && got[2] == r.size);
  CHECK_EQ_U64(x.t.ops.get_many(x.t.ctx, keys, dst, r.size - 1, got, 3), 0);
  CHECK(got[0] == 0 && got[1] == 0 && got[2] == 0);
  /* Another prefix is another namespace. */
  rt_tier t2 = {0};
  x.o.key_prefix = "other:";
  REQUIRE_OK(rt_open(&x.o, &t2));
  CHECK_EQ_U64(t2.ops.get_many(t2.ctx, keys, dst, r.size, got, 1), 0);
  free(big);
  rt_close(&t2);
  rt_run_free(&other);
  rt_run_free(&r);
  rt_close(&x.t);
}

static void test_pipelined_runs(void) {
  /* 100 blocks in windows of 1, 7 and 64 commands (and all at once): same result. */
  const uint32_t depths[] = {1, 7, 64, 1000};
  for (size_t d = 0; d < 4; d++) {
    char seeds[64];
    rt_tier t = {0};
    kvc_redis_tier_options o = rt_options(&server.port, 1, KVC_REDIS_CLUSTER_OFF, seeds, sizeof seeds);
    o.max_pipeline = depths[d];
    o.command_timeout_ms = 5000; /* sanitized builds are slow; this test is about results, not time */
    REQUIRE_OK(rt_open(&o, &t));
    rt_run r;
    REQUIRE(rt_run_make(&r, 100, 64 * 1024 + d, 10 + (uint32_t)d) == 0);
    size_t leading = 0;
    CHECK_EQ_U64(rt_get(&t, &r, &leading), 0);
    CHECK_EQ_U64(rt_put(&t, &r), 100);
    CHECK_EQ_U64(rt_get(&t, &r, &leading), 100);
    CHECK_EQ_U64(leading, 100);
    rt_run_free(&r);
    rt_close(&t);
  }
}

static void test_ttl(void) {
  fixture x;
  fixture_init(&x, &server.port);
  char out[256];
  x.o.ttl_seconds = 100;
  x.o.key_prefix = "ttl:";
  REQUIRE_OK(rt_open(&x.o, &x.t));
  rt_run r;
  REQUIRE(rt_run_make(&r, 1, 10, 3) == 0);
  CHECK_EQ_U64(rt_put(&x.t, &r), 1);
  CHECK(rs_cli(server.port, out, sizeof out, "--scan --pattern 'ttl:*'") == 0);
  out[strcspn(out, "\n")] = 0;
  char ttl[32];
  CHECK(rs_cli(server.port, ttl, sizeof ttl, "ttl %s", out) == 0);
  if (!CHECK(atol(ttl) > 90 && atol(ttl) <= 100)) fprintf(stderr, "  key %s ttl %s\n", out, ttl);
  rt_run_free(&r);
  rt_close(&x.t);
}

static void test_auth(void) {
  fixture x;
  own_start(&x);
  char out[64];
  CHECK(rs_cli(x.s.port, out, sizeof out, "config set requirepass s3cret") == 0);
  CHECK(tt_err_says(rt_open(&x.o, &x.t), KVC_ERROR_IO, "NOAUTH"));
  x.o.password = "wrong";
  CHECK(tt_err_says(rt_open(&x.o, &x.t), KVC_ERROR_IO, "AUTH refused"));
  x.o.password = "s3cret";
  REQUIRE_OK(rt_open(&x.o, &x.t));
  rt_run r;
  REQUIRE(rt_run_make(&r, 5, 100, 4) == 0);
  CHECK_EQ_U64(rt_put(&x.t, &r), 5);
  CHECK_EQ_U64(rt_get(&x.t, &r, NULL), 5);
  /* A reconnection authenticates again. */
  CHECK(rs_cli(x.s.port, out, sizeof out, "-a s3cret --no-auth-warning client kill type normal") == 0);
  rt_get(&x.t, &r, NULL); /* finds the connection dead: misses, or hits on a fresh one */
  rs_sleep_ms(1100);
  CHECK_EQ_U64(rt_get(&x.t, &r, NULL), 5);
  rt_run_free(&r);
  own_stop(&x);
}

static void test_stopped_server(void) {
  /* A server that accepts connections and never answers: every call returns within connect + command timeout. */
  fixture x;
  own_start(&x);
  x.o.command_timeout_ms = 200;
  x.o.reconnect_interval_ms = 500;
  REQUIRE_OK(rt_open(&x.o, &x.t));
  rt_run r;
  REQUIRE(rt_run_make(&r, 20, 256 * 1024, 5) == 0);
  CHECK_EQ_U64(rt_put(&x.t, &r), 20);
  kill(x.s.pid, SIGSTOP);
  double t0 = rs_now_ms();
  size_t leading = 99;
  CHECK_EQ_U64(rt_get(&x.t, &r, &leading), 0);
  double took = rs_now_ms() - t0;
  CHECK_EQ_U64(leading, 0);
  if (!CHECK(took >= 150 && took < 200 + 50 + 400)) fprintf(stderr, "  get took %.0f ms\n", took);
  /* Inside the reconnect interval the node is not waited on at all. */
  t0 = rs_now_ms();
  CHECK_EQ_U64(rt_put(&x.t, &r), 0);
  CHECK_EQ_U64(rt_get(&x.t, &r, NULL), 0);
  CHECK(rs_now_ms() - t0 < 100);
  /* After the interval: one more timeout (a put of 5 MiB into a stopped server fills the socket, then waits). */
  rs_sleep_ms(600);
  t0 = rs_now_ms();
  CHECK_EQ_U64(rt_put(&x.t, &r), 0);
  took = rs_now_ms() - t0;
  if (!CHECK(took < 200 + 50 + 400)) fprintf(stderr, "  put took %.0f ms\n", took);
  /* It answers again: after the interval the blocks stored before are found. */
  kill(x.s.pid, SIGCONT);
  rs_sleep_ms(600);
  CHECK_EQ_U64(rt_get(&x.t, &r, &leading), 20);
  rt_run_free(&r);
  own_stop(&x);
}

static void test_killed_and_restarted(void) {
  fixture x;
  own_start(&x);
  x.o.reconnect_interval_ms = 200;
  REQUIRE_OK(rt_open(&x.o, &x.t));
  rt_run r;
  REQUIRE(rt_run_make(&r, 10, 1000, 6) == 0);
  CHECK_EQ_U64(rt_put(&x.t, &r), 10);
  rs_kill(&x.s);
  double t0 = rs_now_ms();
  CHECK_EQ_U64(rt_get(&x.t, &r, NULL), 0);
  CHECK_EQ_U64(rt_put(&x.t, &r), 0);
  CHECK(rs_now_ms() - t0 < 300);
  REQUIRE(rs_launch(&x.s) == 0);
  rs_sleep_ms(250);
  CHECK_EQ_U64(rt_get(&x.t, &r, NULL), 0); /* a new server, empty (no persistence) */
  CHECK_EQ_U64(rt_put(&x.t, &r), 10);
  CHECK_EQ_U64(rt_get(&x.t, &r, NULL), 10);
  rt_run_free(&r);
  own_stop(&x);
}

typedef struct writer {
  uint32_t variant;
  size_t size;
  int rounds;
  size_t torn; /* values read that were neither writer's */
  size_t reads;
} writer;

/* Writes its own version of block 0 and reads the block back, over and over, through a tier of its own. */
static void* writer_main(void* arg) {
  writer* w = arg;
  char seeds[64];
  rt_tier t = {0};
  kvc_redis_tier_options o = rt_options(&server.port, 1, KVC_REDIS_CLUSTER_AUTO, seeds, sizeof seeds);
  o.command_timeout_ms = 5000;
  o.key_prefix = "race:";
  kvc_error* e = rt_open(&o, &t);
  if (e) {
    kvc_error_destroy(e);
    w->torn = 1000000;
    return NULL;
  }
  uint8_t* mine = malloc(w->size);
  uint8_t* theirs = malloc(w->size);
  uint8_t* got = malloc(w->size);
  rt_fill(mine, w->size, 0, w->variant);
  rt_fill(theirs, w->size, 0, w->variant ^ 1);
  kvc_tier_key key = rt_key(0, 99);
  for (int i = 0; i < w->rounds; i++) {
    const void* v = mine;
    size_t size = w->size, got_size = 0;
    t.ops.put_many(t.ctx, &key, &v, &size, 1);
    void* dst = got;
    if (t.ops.get_many(t.ctx, &key, &dst, w->size, &got_size, 1) == 1) {
      w->reads++;
      if (got_size != w->size || (memcmp(got, mine, w->size) != 0 && memcmp(got, theirs, w->size) != 0)) w->torn++;
    }
  }
  free(mine), free(theirs), free(got);
  rt_close(&t);
  return NULL;
}

static void test_concurrent_writers(void) {
  writer w[2] = {{2, 512 * 1024, 100, 0, 0}, {3, 512 * 1024, 100, 0, 0}};
  pthread_t th[2];
  for (int i = 0; i < 2; i++) REQUIRE(pthread_create(&th[i], NULL, writer_main, &w[i]) == 0);
  for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
  CHECK_EQ_U64(w[0].torn + w[1].torn, 0);
  CHECK_EQ_U64(w[0].reads + w[1].reads, 200);
}

int main(void) {
  rs_require();
  if (rs_start(&server, 0) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    return 1;
  }
  TU_RUN(test_options_refused);
  TU_RUN(test_round_trip_and_key_layout);
  TU_RUN(test_pipelined_runs);
  TU_RUN(test_ttl);
  TU_RUN(test_auth);
  TU_RUN(test_stopped_server);
  TU_RUN(test_killed_and_restarted);
  TU_RUN(test_concurrent_writers);
  rs_stop(&server);
  return tu_finish();
}
