/*
 * Blocks by key (kvcache/tier.h, 'Key-level access') on the Redis tier, with
 * the public API only: put, get and exists round trips on a real
 * redis-server, a value SET by hand under a block's key (not a frame) is a
 * miss, exists sends one pipeline per node (a scripted server that answers
 * only once every EXISTS of the call has arrived still finds them all), and
 * a server that stops answering makes every call a miss within its
 * deadline, never an error.
 */
#define _GNU_SOURCE
#include "../tier_test.h"
#include "fake_server.h"
#include "redis_server.h"
#include "test_util.h"

#define N 6
#define TB_N N
#define PAYLOAD 3000
#define TB_PAYLOAD PAYLOAD
#include "../tier_blocks.h"
#define SLACK_MS 750.0 /* what a loaded, sanitized machine may add to a deadline */


static kvc_tier* redis_tier(int port, uint32_t call_timeout_ms) {
  char seeds[64];
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", port);
  kvc_redis_tier_options o;
  kvc_redis_tier_options_init(&o);
  o.seeds = seeds;
  o.cluster = KVC_REDIS_CLUSTER_OFF;
  o.key_prefix = "keys:";
  o.call_timeout_ms = call_timeout_ms;
  o.reconnect_interval_ms = 50;
  kvc_tier* t = NULL;
  kvc_error* e = kvc_redis_tier_create(&o, &t);
  if (e) fprintf(stderr, "kvc_redis_tier_create: %s\n", kvc_error_message(e));
  kvc_error_destroy(e);
  return t;
}

/* The calls of `command` the server has counted (INFO commandstats), or -1. */
static long command_calls(int port, const char* command) {
  char out[8192], want[64];
  if (rs_cli(port, out, sizeof out, "INFO commandstats") != 0) return -1;
  snprintf(want, sizeof want, "cmdstat_%s:calls=", command);
  const char* at = strstr(out, want);
  return at ? strtol(at + strlen(want), NULL, 10) : 0;
}

static void test_round_trip(void) {
  rs_server s;
  REQUIRE(rs_start(&s, 0) == 0);
  kvc_tier* t = redis_tier(s.port, 0);
  static tb_blocks b;
  tb_make(&b, 0x3C);
  size_t n = 99;
  if (CHECK(t)) {
    CHECK_OK(kvc_tier_exists(t, b.keys, N, b.found, &n));
    CHECK_EQ_U64(n, 0);
    const kvc_tier_key some[3] = {b.keys[1], b.keys[4], b.keys[5]};
    const void* some_in[3] = {b.in[1], b.in[4], b.in[5]};
    CHECK_OK(kvc_tier_put_blocks(t, some, 3, PAYLOAD, 4, some_in, &n));
    CHECK_EQ_U64(n, 3);
    long before = command_calls(s.port, "exists");
    CHECK_OK(kvc_tier_exists(t, b.keys, N, b.found, &n));
    CHECK_EQ_U64(n, 3);
    CHECK_EQ_I64(command_calls(s.port, "exists") - before, N); /* one EXISTS a key: no GET, no value moved */
    CHECK_OK(kvc_tier_get_blocks(t, b.keys, N, PAYLOAD, 4, b.out, b.found, &n));
    CHECK_EQ_U64(n, 3);
    CHECK(tb_got_exactly(&b, (const int[]){1, 4, 5}, 3));
    /* Another size is a miss. */
    CHECK_OK(kvc_tier_get_blocks(t, &b.keys[1], 1, PAYLOAD / 2, 4, b.out, b.found, &n));
    CHECK_EQ_U64(n, 0);
    /* A value SET by hand under block 1's key (the key as redis_tier.h writes it) exists, and is a miss. */
    char key[256], out[256];
    int at = snprintf(key, sizeof key, "keys:");
    for (int x = 0; x < 32; x++) at += snprintf(key + at, sizeof key - (size_t)at, "%02x", b.keys[1].fingerprint[x]);
    at += snprintf(key + at, sizeof key - (size_t)at, ":%u:", b.keys[1].group);
    for (int x = 0; x < 32; x++) at += snprintf(key + at, sizeof key - (size_t)at, "%02x", b.keys[1].block_hash[x]);
    CHECK_EQ_I64(rs_cli(s.port, out, sizeof out, "SET %s not-a-frame", key), 0);
    uint64_t corrupt = tt_stats(t).corrupt;
    CHECK_OK(kvc_tier_exists(t, &b.keys[1], 1, b.found, &n));
    CHECK_EQ_U64(n, 1);
    CHECK_OK(kvc_tier_get_blocks(t, &b.keys[1], 1, PAYLOAD, 4, b.out, b.found, &n));
    CHECK_EQ_U64(n, 0);
    CHECK_EQ_U64(b.found[0], 0);
    CHECK_EQ_U64(tt_stats(t).corrupt, corrupt + 1);
    kvc_tier_destroy(t);
  }
  rs_stop(&s);
}

/* The scripted server: EXISTS answered only when `want` of them arrived; STALL: never a byte. */
enum { BATCH, STALL };
typedef struct script {
  atomic_int mode;
  int want;
} script;

static void serve(fs_conn* c) {
  script* s = c->server->arg;
  int pending = 0;
  while (fs_read_command(c)) {
    if (atomic_load(&s->mode) == STALL) {
      (void)fs_client_closed(c, 10000);
      return;
    }
    if (fs_is(c, "EXISTS")) {
      if (++pending < s->want) continue;
      for (; pending > 0; pending--)
        if (fs_send_str(c, ":1\r\n")) return;
    } else if (fs_send_str(c, fs_is(c, "GET") ? "$-1\r\n" : "+OK\r\n")) {
      return;
    }
  }
}

static double since(double start) { return rs_now_ms() - start; }

/* A fake server answering `want` keys in `mode`, a tier on it with a call deadline of call_timeout_ms (NULL when
 * its creation failed) and the blocks to ask for; 0 when the server did not start. */
typedef struct scripted {
  script sc;
  fs_server f;
  kvc_tier* t;
  tb_blocks b;
} scripted;

static int scripted_start(scripted* x, int want, int mode, uint32_t call_timeout_ms) {
  x->sc.want = want;
  atomic_store(&x->sc.mode, mode);
  if (fs_start(&x->f, serve, &x->sc) != 0) return 0;
  x->t = redis_tier(x->f.port, call_timeout_ms);
  tb_make(&x->b, 0x3C);
  return 1;
}

static void test_exists_is_one_pipeline(void) {
  static scripted x;
  REQUIRE(scripted_start(&x, N, BATCH, 2000));
  size_t n = 0;
  if (CHECK(x.t)) {
    /* Key by key, the first EXISTS would wait for an answer that comes only after the sixth: a miss. */
    double start = rs_now_ms();
    CHECK_OK(kvc_tier_exists(x.t, x.b.keys, N, x.b.found, &n));
    CHECK_EQ_U64(n, N);
    CHECK(since(start) < 1000);
    kvc_tier_destroy(x.t);
  }
  fs_stop(&x.f);
}

static void test_stalled_server_is_a_miss_within_the_deadline(void) {
  const uint32_t deadline = 300;
  static scripted x;
  REQUIRE(scripted_start(&x, 1, STALL, deadline));
  size_t n = 99;
  if (CHECK(x.t)) {
    double start = rs_now_ms();
    CHECK_OK(kvc_tier_exists(x.t, x.b.keys, N, x.b.found, &n));
    double ms = since(start);
    CHECK_EQ_U64(n, 0);
    CHECK(ms <= deadline + SLACK_MS);
    rs_sleep_ms(100); /* past reconnect_interval_ms: the node is tried again, and stalls again */
    start = rs_now_ms();
    CHECK_OK(kvc_tier_get_blocks(x.t, x.b.keys, N, PAYLOAD, 4, x.b.out, x.b.found, &n));
    ms = since(start);
    CHECK_EQ_U64(n, 0);
    for (int i = 0; i < N; i++) CHECK_EQ_U64(x.b.found[i], 0);
    CHECK(ms <= deadline + SLACK_MS);
    CHECK(ms >= deadline - 100); /* it did wait: the server was tried, not skipped */
    rs_sleep_ms(100);
    start = rs_now_ms();
    CHECK_OK(kvc_tier_put_blocks(x.t, x.b.keys, N, PAYLOAD, 4, x.b.in, &n));
    CHECK(since(start) <= deadline + SLACK_MS);
    CHECK_EQ_U64(n, 0);
    CHECK_EQ_U64(tt_stats(x.t).put_failures, N);
    kvc_tier_destroy(x.t);
  }
  fs_stop(&x.f);
}

int main(void) {
  TU_RUN(test_exists_is_one_pipeline);
  TU_RUN(test_stalled_server_is_a_miss_within_the_deadline);
  if (rs_on_path("redis-server") && rs_on_path("redis-cli"))
    TU_RUN(test_round_trip);
  else
    printf("SKIPPED test_round_trip: redis-server or redis-cli is not on PATH (scripts/setup.sh installs them)\n");
  return tu_finish();
}
