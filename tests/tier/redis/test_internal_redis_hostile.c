/*
 * The Redis tier against servers that misbehave on purpose (fake_server.h):
 * one byte every 150 ms, an endless CLUSTER SLOTS reply, MOVED to 50
 * distinct dead nodes, values announced at 4 GiB, replies nobody asked for,
 * redirects to host names of 148, 253 and 254 bytes. Each public call
 * (creation, put_many, get_many) must return within its deadline plus some
 * slack for a slow shared machine, the process's peak memory must not grow
 * by more than a bounded amount, and the next call on a server that behaves
 * again must work. No redis-server is needed.
 */
#define _GNU_SOURCE
#include <sys/resource.h>

#include "../../pool/pool_test.h"
#include "fake_server.h"
#include "redis_pool_tier.h"
#include "redis_tier_test.h"
#include "tier/redis/redis_internal.h"

#define VALUE 4096           /* the values the fake server stores, and the capacity the tests read with */
#define SLACK_MS 750.0       /* what a loaded, sanitized machine may add to a deadline */
#define DRIBBLE_MS 150       /* one byte every DRIBBLE_MS */
#define MAX_GROWTH_KB 262144 /* peak memory a hostile reply may add (the caps allow about 30 MiB) */

enum {
  GOOD,       /* a store: SET keeps the value, GET answers it (a key never set: good_value) */
  DRIBBLE,    /* any command: an endless valid reply, one byte every DRIBBLE_MS */
  LATE_EXTRA, /* GOOD, and 50 ms after each GET's reply another reply nobody asked for */
  DOUBLE,     /* GOOD, but every GET answered twice in one write */
  MOVED_DEAD, /* GET: MOVED to the next of the dead nodes */
  MOVED_HOST, /* GET: MOVED to the next of the hosts of the script */
  SLOTS_RAW,  /* CLUSTER SLOTS: the script's bytes, then silence (or, with flood, endless 64 KiB strings) */
  GET_RAW,    /* GET: the script's bytes, then silence */
};

typedef struct script {
  atomic_int mode;
  int cluster;        /* GOOD answers CLUSTER SLOTS with one range on itself (else: cluster support disabled) */
  int own_port;
  int dead[50];       /* ports of nodes that accept and never answer */
  atomic_int next;    /* the next redirect of MOVED_DEAD or MOVED_HOST */
  const char* hosts[3];
  int host_ports[3];
  const char* raw;    /* SLOTS_RAW, GET_RAW */
  int flood;          /* SLOTS_RAW: endless strings after raw */
} script;

static uint8_t good_value[VALUE];

/* What SET stored, for the pool test (the server's thread alone touches it). */
typedef struct stored {
  char key[512];
  uint8_t value[VALUE];
  size_t len;
} stored;
static stored store[16];
static size_t nstore;

static stored* store_find(const char* key) {
  for (size_t i = 0; i < nstore; i++)
    if (strcmp(store[i].key, key) == 0) return &store[i];
  return NULL;
}

/* SET key value: +OK, or an error when the store is full or the value too large. */
static int store_set(fs_conn* c) {
  stored* e = store_find(c->argv[1]);
  if (!e && nstore < sizeof store / sizeof store[0] && strlen(c->argv[1]) < sizeof e->key) {
    e = &store[nstore++];
    strcpy(e->key, c->argv[1]);
  }
  if (!e || c->argl[2] > VALUE) return fs_send_str(c, "-OOM the fake store is full\r\n");
  memcpy(e->value, c->argv[2], c->argl[2]);
  e->len = c->argl[2];
  return fs_send_str(c, "+OK\r\n");
}

static double since(double start) { return rs_now_ms() - start; }

static long peak_rss_kb(void) {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

static int send_value(fs_conn* c) {
  const stored* e = c->argc > 1 ? store_find(c->argv[1]) : NULL;
  char h[32];
  snprintf(h, sizeof h, "$%zu\r\n", e ? e->len : (size_t)VALUE);
  return fs_send_str(c, h) || fs_send(c, e ? e->value : good_value, e ? e->len : VALUE) || fs_send_str(c, "\r\n");
}

static int send_slots(fs_conn* c, script* s) {
  char r[128];
  snprintf(r, sizeof r, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$0\r\n\r\n:%d\r\n", s->own_port);
  return fs_send_str(c, r);
}

/* One byte every DRIBBLE_MS of a reply that never ends: a bulk header, then its bytes. */
static void dribble(fs_conn* c) {
  static const char head[] = "$4096\r\n";
  for (size_t i = 0; !atomic_load(&c->server->stop); i++) {
    char b = i < sizeof head - 1 ? head[i] : 'x';
    if (fs_send(c, &b, 1) != 0) return;
    if (fs_client_closed(c, DRIBBLE_MS)) return;
  }
}

static void flood(fs_conn* c, const char* raw) {
  static char chunk[65536 + 16];
  if (fs_send_str(c, raw) != 0) return;
  int n = snprintf(chunk, sizeof chunk, "$65536\r\n");
  memset(chunk + n, 'f', 65536);
  memcpy(chunk + n + 65536, "\r\n", 2);
  while (!atomic_load(&c->server->stop) && fs_send(c, chunk, (size_t)n + 65538) == 0) {
  }
}

static void serve(fs_conn* c) {
  script* s = c->server->arg;
  while (fs_read_command(c)) {
    int mode = atomic_load(&s->mode);
    int slots = fs_is(c, "CLUSTER");
    char r[512];
    if (mode == DRIBBLE) return dribble(c);
    if (slots && mode == SLOTS_RAW && s->flood) return flood(c, s->raw);
    if ((slots && mode == SLOTS_RAW) || (mode == GET_RAW && fs_is(c, "GET"))) {
      /* Then silence, the connection open: only the client's own checks can end its wait early. */
      if (fs_send_str(c, s->raw) == 0) (void)fs_client_closed(c, 10000);
      return;
    }
    if (slots) {
      if (s->cluster ? send_slots(c, s) : fs_send_str(c, "-ERR This instance has cluster support disabled\r\n"))
        return;
    } else if (fs_is(c, "SET") && c->argc >= 3) {
      if (store_set(c)) return;
    } else if (!fs_is(c, "GET")) {
      if (fs_send_str(c, "+OK\r\n")) return;
    } else if (mode == MOVED_DEAD || mode == MOVED_HOST) {
      /* The key's own slot, so that the client sends it on to the node named. */
      int i = atomic_fetch_add(&s->next, 1);
      unsigned slot = c->argc > 1 ? kvci_redis_key_slot(c->argv[1], strlen(c->argv[1])) : 0;
      if (mode == MOVED_DEAD)
        snprintf(r, sizeof r, "-MOVED %u 127.0.0.1:%d\r\n", slot, s->dead[i % 50]);
      else
        snprintf(r, sizeof r, "-MOVED %u %s:%d\r\n", slot, s->hosts[i % 3], s->host_ports[i % 3]);
      if (fs_send_str(c, r)) return;
    } else {
      if (send_value(c) || (mode == DOUBLE && send_value(c))) return;
      if (mode == LATE_EXTRA) {
        rs_sleep_ms(50);
        if (fs_send_str(c, "$5\r\nWRONG\r\n")) return;
      }
    }
  }
}

static kvc_redis_tier_options fake_options(fs_server* f, kvc_redis_cluster_mode mode, char* seeds, size_t cap) {
  kvc_redis_tier_options o = rt_options(&f->port, 1, mode, seeds, cap);
  o.reconnect_interval_ms = 100;
  return o;
}

/* One test's fake server, the options of a tier on it and that tier (opened by fake_open). The options point at
 * seeds: a fixture is never copied. */
typedef struct fake_tier {
  fs_server f;
  char seeds[64];
  kvc_redis_tier_options o;
  rt_tier t;
} fake_tier;

static void fake_start(fake_tier* x, script* s, kvc_redis_cluster_mode mode) {
  REQUIRE(fs_start(&x->f, serve, s) == 0);
  x->o = fake_options(&x->f, mode, x->seeds, sizeof x->seeds);
}

static void fake_open(fake_tier* x) { REQUIRE(rt_open(&x->o, &x->t) == NULL); }

static void fake_stop(fake_tier* x) { fs_stop(&x->f); }

/* Looks up keys 0..n-1 against the good server's value; how many came back, each checked byte for byte. */
static size_t get_good(rt_tier* t, size_t n, double* ms) {
  rt_run r;
  if (!CHECK(rt_run_make(&r, n, VALUE, 0) == 0)) return 0;
  for (size_t i = 0; i < n; i++) memcpy(r.data + i * VALUE, good_value, VALUE);
  double start = rs_now_ms();
  size_t found = rt_get(t, &r, NULL);
  if (ms) *ms = since(start);
  rt_run_free(&r);
  return found;
}

static size_t put_some(rt_tier* t, size_t n, double* ms) {
  rt_run r;
  if (!CHECK(rt_run_make(&r, n, VALUE, 0) == 0)) return 0;
  double start = rs_now_ms();
  size_t stored = rt_put(t, &r);
  *ms = since(start);
  rt_run_free(&r);
  return stored;
}

/* The deadline holds: `ms` is at most the deadline plus slack. */
static int within(double ms, uint32_t deadline, const char* what) {
  int ok = ms <= deadline + SLACK_MS;
  if (!ok) fprintf(stderr, "  %s took %.0f ms; its deadline is %u ms\n", what, ms, deadline);
  return ok;
}

static void test_dribbling_server(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  fake_open(&x);
  /* The defaults: connect 50 + 2 x command 200. */
  uint32_t deadline = ((kvci_redis_tier*)x.t.ctx)->call_timeout_ms;
  CHECK_EQ_U64(deadline, 450);
  atomic_store(&s.mode, DRIBBLE);
  double ms;
  CHECK_EQ_U64(put_some(&x.t, 4, &ms), 0);
  CHECK(within(ms, deadline, "put_many"));
  rs_sleep_ms(150); /* past reconnect_interval_ms */
  CHECK_EQ_U64(get_good(&x.t, 4, &ms), 0);
  CHECK(within(ms, deadline, "get_many"));
  /* Every byte came within the command timeout: only the call's deadline ended it. */
  CHECK(ms >= deadline - 50);
  atomic_store(&s.mode, GOOD);
  rs_sleep_ms(150);
  CHECK_EQ_U64(get_good(&x.t, 4, &ms), 4);
  rt_close(&x.t);

  /* A deadline of its own, and creation bounded too (CLUSTER SLOTS dribbled). */
  x.o = fake_options(&x.f, KVC_REDIS_CLUSTER_AUTO, x.seeds, sizeof x.seeds);
  x.o.call_timeout_ms = 300;
  atomic_store(&s.mode, DRIBBLE);
  kvc_tier* tier = NULL;
  double start = rs_now_ms();
  CHECK(tt_err_says(kvc_redis_tier_create(&x.o, &tier), KVC_ERROR_IO, "call_timeout_ms 300"));
  CHECK(within(since(start), 300, "kvc_redis_tier_create"));
  CHECK(tier == NULL);
  atomic_store(&s.mode, GOOD);
  fake_open(&x);
  atomic_store(&s.mode, DRIBBLE);
  CHECK_EQ_U64(get_good(&x.t, 2, &ms), 0);
  CHECK(within(ms, 300, "get_many") && ms >= 250);
  rt_close(&x.t);
  fake_stop(&x);
}

static void test_options_of_0_6(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  x.o.call_timeout_ms = 7; /* beyond a 0.6 caller's struct: never read */
  x.o.struct_size = 64;
  x.o.command_timeout_ms = 300;
  fake_open(&x);
  CHECK_EQ_U64(((kvci_redis_tier*)x.t.ctx)->call_timeout_ms, 50 + 2 * 300);
  CHECK_EQ_U64(get_good(&x.t, 3, NULL), 3);
  rt_close(&x.t);
  x.o.struct_size = 68;
  CHECK(tt_err_says(rt_open(&x.o, &x.t), KVC_ERROR_INVALID_ARGUMENT, "options.struct_size is 68"));
  fake_stop(&x);
}

/* Creation against a CLUSTER SLOTS reply of `raw` (flooded after when `flood`): refused quickly, memory bounded. */
static void refuse_slots(script* s, fs_server* f, const char* raw, int flood, const char* says) {
  char seeds[64];
  kvc_redis_tier_options o = fake_options(f, KVC_REDIS_CLUSTER_AUTO, seeds, sizeof seeds);
  o.command_timeout_ms = 2000; /* a cap, not a timeout, must end it */
  o.call_timeout_ms = 5000;
  s->raw = raw;
  s->flood = flood;
  atomic_store(&s->mode, SLOTS_RAW);
  long before = peak_rss_kb();
  double start = rs_now_ms();
  rt_tier t;
  if (!CHECK(tt_err_says(rt_open(&o, &t), KVC_ERROR_IO, says))) fprintf(stderr, "  reply '%.30s...'\n", raw);
  double ms = since(start);
  if (!CHECK(ms < 1500)) fprintf(stderr, "  refused after %.0f ms\n", ms);
  long grown = peak_rss_kb() - before;
  if (!CHECK(grown < MAX_GROWTH_KB)) fprintf(stderr, "  peak memory grew by %ld KiB\n", grown);
  /* The same server behaving: creation works, and so does a lookup. */
  atomic_store(&s->mode, GOOD);
  REQUIRE(rt_open(&o, &t) == NULL);
  CHECK_EQ_U64(get_good(&t, 2, NULL), 2);
  rt_close(&t);
}

static void test_hostile_cluster_slots(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  static const struct {
    const char* raw;
    int flood;
    const char* says;
  } replies[] = {
      /* Endless: an array of 262144 elements filled with 64 KiB strings until the reply's 8 MiB are spent. */
      {"*200000\r\n", 1, "more bytes than its cap"},
      {"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n*262145\r\n", 0, "more elements than its cap"},
      {"*4294967295\r\n", 0, "more elements than its cap"},
      /* 36 bytes that once allocated 4 GiB; then Redis's own limit (512 MiB), within it but past the reply's cap. */
      {"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$4294967295\r\n", 0, "bad bulk length"},
      {"*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$536870912\r\n", 0, "more bytes than its cap"},
      {"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n", 0, "nested too deep"},
  };
  for (size_t i = 0; i < sizeof replies / sizeof replies[0]; i++)
    refuse_slots(&s, &x.f, replies[i].raw, replies[i].flood, replies[i].says);
  fake_stop(&x);
}

static void test_huge_values(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  x.o.command_timeout_ms = 2000; /* the server sends nothing after the header: only a refusal ends it early */
  x.o.call_timeout_ms = 5000;
  fake_open(&x);
  const char* headers[] = {"$4294967295\r\n", "$536870913\r\n", "$100000000\r\n", "*3\r\n"};
  for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
    s.raw = headers[i];
    atomic_store(&s.mode, GET_RAW);
    long before = peak_rss_kb();
    double ms;
    CHECK_EQ_U64(get_good(&x.t, 1, &ms), 0);
    if (!CHECK(ms < 1500)) fprintf(stderr, "  '%s' refused after %.0f ms\n", headers[i], ms);
    CHECK(peak_rss_kb() - before < MAX_GROWTH_KB);
    atomic_store(&s.mode, GOOD);
    rs_sleep_ms(150);
    CHECK_EQ_U64(get_good(&x.t, 2, NULL), 2);
  }
  rt_close(&x.t);
  fake_stop(&x);
}

/* A tier on the fake server as a cluster of one node holding every slot; its context, or NULL. */
static kvci_redis_tier* open_cluster(script* s, fs_server* f, const kvc_redis_tier_options* o, rt_tier* t) {
  s->cluster = 1;
  s->own_port = f->port;
  return rt_open(o, t) == NULL ? t->ctx : NULL;
}

static void test_moved_to_many_dead_nodes(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_ON);
  int dead_fds[50];
  for (int i = 0; i < 50; i++) REQUIRE((dead_fds[i] = fs_listen(&s.dead[i], 64)) >= 0);
  kvci_redis_tier* in = open_cluster(&s, &x.f, &x.o, &x.t);
  REQUIRE(in != NULL);
  atomic_store(&s.mode, MOVED_DEAD);
  double ms;
  CHECK_EQ_U64(get_good(&x.t, 50, &ms), 0); /* once one timeout per address: 10 s */
  CHECK(within(ms, in->call_timeout_ms, "get_many redirected to 50 dead nodes"));
  /* The seed and at most 8 nodes learned from redirects in one call (KVCI_REDIS_LEARN_PER_CALL). */
  if (!CHECK(in->nnodes <= 1 + 8)) fprintf(stderr, "  %zu nodes known\n", in->nnodes);
  /* The server behaves: the slot map is read again, every key is found on it, and the redirect targets the new
   * map does not name are forgotten. */
  atomic_store(&s.mode, GOOD);
  rs_sleep_ms(150);
  CHECK_EQ_U64(get_good(&x.t, 50, NULL), 50);
  CHECK_EQ_U64(in->nnodes, 1);
  rt_close(&x.t);
  for (int i = 0; i < 50; i++) close(dead_fds[i]);
  fake_stop(&x);
}

static void test_unrequested_replies(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  fake_open(&x);
  /* A reply arriving while no command is pending: the next call reconnects instead of taking it as its answer. */
  atomic_store(&s.mode, LATE_EXTRA);
  for (int round = 0; round < 3; round++) {
    CHECK_EQ_U64(get_good(&x.t, 1, NULL), 1);
    rs_sleep_ms(120);
  }
  CHECK_EQ_I64(atomic_load(&x.f.connections), 3);
  /* More replies than commands: the call keeps the answers it asked for and closes the connection. */
  atomic_store(&s.mode, DOUBLE);
  CHECK_EQ_U64(get_good(&x.t, 3, NULL), 3);
  rs_sleep_ms(150);
  atomic_store(&s.mode, GOOD);
  CHECK_EQ_U64(get_good(&x.t, 3, NULL), 3);
  CHECK_EQ_I64(atomic_load(&x.f.connections), 5);
  rt_close(&x.t);
  fake_stop(&x);
}

/* A pool (one group of 16-token blocks, two layers) with a Redis tier on the fake server. */
static kvc_pool* pool_on(fs_server* f) {
  static const pt_group group = {KVC_POOL_GROUP_FULL, 16, 32, 0};
  static const uint32_t layer_group[2] = {0, 0};
  kvc_pool* pool = NULL;
  kvc_error* e = pt_pool(&pool, &group, 1, layer_group, 2, KVC_POOL_LAYOUT_NHD, 0, 1);
  char seeds[64];
  kvc_redis_tier_options o = fake_options(f, KVC_REDIS_CLUSTER_OFF, seeds, sizeof seeds);
  if (!e) e = rp_add_tier(pool, &o);
  if (!CHECK(e == NULL)) {
    fprintf(stderr, "  %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
    kvc_pool_destroy(pool);
    return NULL;
  }
  return pool;
}

static kvc_tier_stats tier_stats(kvc_pool* pool) {
  kvc_tier_stats st = {sizeof st, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
  kvc_error_destroy(kvc_tier_stats_get(kvc_pool_tier(pool, 0), &st));
  return st;
}

/* The pool's own calls, through the public API: a commit that stores and a match_prefix that looks up, against a
 * server that dribbles, each within the tier's deadline (one group: one lookup, the batch of one store). */
static void test_pool_calls_on_a_dribbling_server(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  kvc_pool* writer = pool_on(&x.f);
  kvc_pool* reader = pool_on(&x.f);
  REQUIRE(writer && reader);
  int32_t tokens[65], other[33];
  for (int i = 0; i < 65; i++) tokens[i] = 1000 + i * 7;
  for (int i = 0; i < 33; i++) other[i] = 5000 + i;
  kvc_pool_sequence *w, *w2, *r;
  REQUIRE(kvc_pool_sequence_create(writer, NULL, &w) == NULL);
  REQUIRE(pt_step(writer, 1, 2, w, tokens, 65) == NULL); /* four full blocks stored, on a good server */
  CHECK_EQ_U64(tier_stats(writer).puts, 4);
  atomic_store(&s.mode, DRIBBLE);
  REQUIRE(kvc_pool_sequence_create(writer, NULL, &w2) == NULL);
  double start = rs_now_ms();
  CHECK(pt_step(writer, 1, 2, w2, other, 33) == NULL); /* two blocks for a tier that never finishes a reply */
  CHECK(within(since(start), 450, "kvc_pool_commit"));
  CHECK_EQ_U64(tier_stats(writer).puts, 4);
  REQUIRE(kvc_pool_sequence_create(reader, NULL, &r) == NULL);
  uint64_t matched = 99;
  start = rs_now_ms();
  CHECK(kvc_pool_match_prefix(r, tokens, 65, &matched) == NULL);
  CHECK(within(since(start), 450, "kvc_pool_match_prefix"));
  CHECK_EQ_U64(matched, 0);
  kvc_pool_sequence_destroy(r);
  /* The server behaves again: the reader finds the prefix, byte for byte. */
  atomic_store(&s.mode, GOOD);
  rs_sleep_ms(150);
  REQUIRE(kvc_pool_sequence_create(reader, NULL, &r) == NULL);
  CHECK(kvc_pool_match_prefix(r, tokens, 65, &matched) == NULL);
  CHECK_EQ_U64(matched, 64);
  CHECK_EQ_I64(pt_gather_mismatches(r, 0), 0);
  CHECK_EQ_I64(pt_gather_mismatches(r, 1), 0);
  kvc_tier_stats st = tier_stats(reader);
  CHECK(st.hits == 4 && st.corrupt == 0);
  kvc_pool_sequence_destroy(r);
  kvc_pool_sequence_destroy(w2);
  kvc_pool_sequence_destroy(w);
  kvc_pool_destroy(reader);
  kvc_pool_destroy(writer);
  fake_stop(&x);
}

static char* repeat(char ch, size_t n) {
  char* s = malloc(n + 1);
  if (!s) abort();
  memset(s, ch, n);
  s[n] = 0;
  return s;
}

static void test_long_host_names(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_ON);
  /* One label longer than DNS allows (63), so resolving fails at once, without a query. 148 bytes once lost all
   * but the first digit of the port to a 160-byte buffer; 253 is the longest name; 254 is refused. */
  char* h148 = repeat('a', 148);
  char* h253 = repeat('b', 253);
  char* h254 = repeat('c', 254);
  s.hosts[0] = h148, s.host_ports[0] = 7123;
  s.hosts[1] = h253, s.host_ports[1] = 7124;
  s.hosts[2] = h254, s.host_ports[2] = 7125;
  kvci_redis_tier* in = open_cluster(&s, &x.f, &x.o, &x.t);
  REQUIRE(in != NULL);
  atomic_store(&s.mode, MOVED_HOST);
  double ms;
  CHECK_EQ_U64(get_good(&x.t, 3, &ms), 0);
  CHECK(within(ms, in->call_timeout_ms, "get_many redirected to long names"));
  CHECK(kvci_redis_node_find(in, h148, 7123, 0) >= 0);
  CHECK(kvci_redis_node_find(in, h253, 7124, 0) >= 0);
  CHECK_EQ_U64(in->nnodes, 3);
  for (size_t i = 0; i < in->nnodes; i++) CHECK(strlen(in->nodes[i]->host) <= KVCI_REDIS_HOST_MAX);
  rt_close(&x.t);

  /* The same names in CLUSTER SLOTS: 253 bytes taken whole with its port, 254 refuses the map. */
  char raw[700];
  snprintf(raw, sizeof raw, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$253\r\n%s\r\n:7124\r\n", h253);
  s.raw = raw;
  s.flood = 0;
  atomic_store(&s.mode, SLOTS_RAW);
  fake_open(&x);
  in = x.t.ctx;
  CHECK_EQ_I64(in->slots[16383], kvci_redis_node_find(in, h253, 7124, 0));
  CHECK(in->slots[0] >= 0 && in->nodes[in->slots[0]]->port == 7124);
  rt_close(&x.t);
  snprintf(raw, sizeof raw, "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$254\r\n%s\r\n:7125\r\n", h254);
  CHECK(tt_err_says(rt_open(&x.o, &x.t), KVC_ERROR_IO, "not understood"));
  free(h148), free(h253), free(h254);
  fake_stop(&x);
}

static void test_long_host_addresses(void) {
  char host[KVCI_REDIS_HOST_MAX + 8], addr[300];
  uint16_t port = 0;
  memset(addr, 'h', 253);
  strcpy(addr + 253, ":65535");
  CHECK(kvci_redis_parse_address(addr, strlen(addr), host, sizeof host, &port) == 0);
  CHECK(strlen(host) == 253 && port == 65535);
  addr[0] = '[';
  strcpy(addr + 254, "]:6379");
  CHECK(kvci_redis_parse_address(addr, strlen(addr), host, sizeof host, &port) == 0);
  CHECK(strlen(host) == 253 && port == 6379);
  memset(addr, 'h', 254);
  strcpy(addr + 254, ":6379");
  CHECK(kvci_redis_parse_address(addr, strlen(addr), host, sizeof host, &port) != 0);
}

/* CLUSTER SLOTS replies that parse as RESP but not as a slot map: each field of a range checked in turn. */
#define RANGE_OF(lo, hi, master) "*1\r\n*3\r\n" lo hi master
#define MASTER "*2\r\n$9\r\n127.0.0.1\r\n:7000\r\n"
static void test_cluster_slots_not_understood(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_OFF);
  static const char* const bad[] = {
      "*1\r\n:5\r\n",                                   /* a range that is not an array */
      "*1\r\n*2\r\n:0\r\n:1\r\n",                       /* without its master */
      RANGE_OF("+0\r\n", ":1\r\n", MASTER),            /* first slot not an integer */
      RANGE_OF(":0\r\n", "+1\r\n", MASTER),            /* last slot not an integer */
      RANGE_OF(":0\r\n", ":1\r\n", ":5\r\n"),          /* master not an array */
      RANGE_OF(":0\r\n", ":1\r\n", "*1\r\n$1\r\nh\r\n"), /* master without a port */
      RANGE_OF(":0\r\n", ":1\r\n", "*2\r\n:1\r\n:7000\r\n"),            /* host not a string */
      RANGE_OF(":0\r\n", ":1\r\n", "*2\r\n$1\r\nh\r\n$4\r\n7000\r\n"),  /* port not an integer */
      RANGE_OF(":-1\r\n", ":1\r\n", MASTER),           /* a slot below 0 */
      RANGE_OF(":0\r\n", ":16384\r\n", MASTER),        /* a slot past 16383 */
      RANGE_OF(":5\r\n", ":4\r\n", MASTER),            /* a range that ends before it starts */
      RANGE_OF(":0\r\n", ":1\r\n", "*2\r\n$1\r\nh\r\n:0\r\n"),          /* port 0 */
      RANGE_OF(":0\r\n", ":1\r\n", "*2\r\n$1\r\nh\r\n:65536\r\n"),      /* port past 65535 */
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    refuse_slots(&s, &x.f, bad[i], 0, "CLUSTER SLOTS reply not understood");
  /* No map at all: an empty array, or no array. */
  refuse_slots(&s, &x.f, "*0\r\n", 0, "CLUSTER SLOTS gave no slots");
  refuse_slots(&s, &x.f, ":1\r\n", 0, "CLUSTER SLOTS gave no slots");
  fake_stop(&x);
}

/* MOVED and ASK errors that do not name a slot and a node: the key is a miss and no node is learned; an error
 * that is neither is not a redirect. */
static void test_redirects_not_understood(void) {
  static script s;
  fake_tier x;
  fake_start(&x, &s, KVC_REDIS_CLUSTER_ON);
  kvci_redis_tier* in = open_cluster(&s, &x.f, &x.o, &x.t);
  REQUIRE(in != NULL);
  CHECK_EQ_U64(get_good(&x.t, 2, NULL), 2); /* sizes the per-key state */
  static const char* const bad[] = {"MOVED x 127.0.0.1:7000", "MOVED 5x 127.0.0.1:7000", "MOVED -1 127.0.0.1:7000",
                                    "MOVED 16384 127.0.0.1:7000", "ASK 5 no-port", "MOVED 5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    in->state[1] = KVCI_KEY_PENDING;
    CHECK_EQ_I64(kvci_redis_redirect(in, 1, bad[i]), 1);
    if (!CHECK(in->state[1] == KVCI_KEY_MISS)) fprintf(stderr, "  '%s' left the key pending\n", bad[i]);
    CHECK_EQ_U64(in->nnodes, 1);
  }
  in->state[1] = KVCI_KEY_PENDING;
  CHECK_EQ_I64(kvci_redis_redirect(in, 1, "ERR wrong kind of value"), 0);
  CHECK(in->state[1] == KVCI_KEY_PENDING);
  in->state[1] = KVCI_KEY_MISS;
  rt_close(&x.t);
  fake_stop(&x);
}

int main(void) {
  for (size_t i = 0; i < VALUE; i++) good_value[i] = (uint8_t)(i * 7 + 3);
  TU_RUN(test_long_host_addresses);
  TU_RUN(test_options_of_0_6);
  TU_RUN(test_dribbling_server);
  TU_RUN(test_hostile_cluster_slots);
  TU_RUN(test_cluster_slots_not_understood);
  TU_RUN(test_redirects_not_understood);
  TU_RUN(test_huge_values);
  TU_RUN(test_moved_to_many_dead_nodes);
  TU_RUN(test_unrequested_replies);
  TU_RUN(test_long_host_names);
  TU_RUN(test_pool_calls_on_a_dribbling_server);
  return tu_finish();
}
