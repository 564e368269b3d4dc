/*
 * test_internal_redis_oom.c: every heap allocation of the Redis tier
 * refused in turn (../../common/heap_sweep.h), against a redis-server of
 * the test's own, standalone and a three-node cluster. Creation fails with
 * a clean OUT_OF_MEMORY and leaks nothing (a connection made before the
 * refusal is closed); a store or a lookup turns a refusal into fewer blocks
 * stored or a miss, and whatever it does find is the right bytes.
 */
#define _GNU_SOURCE

#include "../../common/heap_sweep.h"
#include "redis_tier_test.h"

enum { BLOCKS = 8, SIZE = 4096 };

static char seeds[256];
static kvc_redis_cluster_mode mode;

typedef struct fixture {
  rt_tier t;
  rt_run run;
  size_t done; /* what the call under test returned: blocks stored or found */
} fixture;

static kvc_redis_tier_options options(void) {
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  o.seeds = seeds;
  o.cluster = mode;
  return o;
}

static void* make_closed(void) {
  fixture* f = (fixture*)calloc(1, sizeof *f);
  if (!f || rt_run_make(&f->run, BLOCKS, SIZE, 7)) return NULL;
  return f;
}

static void* make_open(void) {
  fixture* f = (fixture*)make_closed();
  kvc_redis_tier_options o = options();
  if (!f || !CHECK_OK(rt_open(&o, &f->t))) return NULL;
  return f;
}

/* The run stored, for lookups by a tier that has not used its connections yet (whose buffers grow then). */
static void* make_stored(void) {
  fixture* f = (fixture*)make_open();
  if (f && !CHECK_EQ_U64(rt_put(&f->t, &f->run), BLOCKS)) return NULL;
  rt_close(&f->t);
  kvc_redis_tier_options o = options();
  if (f && !CHECK_OK(rt_open(&o, &f->t))) return NULL;
  return f;
}

static void destroy(void* x) {
  fixture* f = (fixture*)x;
  rt_close(&f->t);
  rt_run_free(&f->run);
  free(f);
}

static void observe(void* x, heap_state* out) { heap_state_u64(out, ((fixture*)x)->done); }

static kvc_error* op_create(void* x) {
  (void)x;
  kvc_redis_tier_options o = options();
  kvc_tier* t = NULL;
  kvc_error* e = kvc_redis_tier_create(&o, &t);
  kvc_tier_destroy(t);
  return e;
}

static kvc_error* op_put(void* x) {
  fixture* f = (fixture*)x;
  f->done = rt_put(&f->t, &f->run);
  return NULL;
}
/* Fewer stored (not necessarily the leading ones: a cluster stores per node); those read back right (rt_get
   checks every byte it finds), and at least as many are found as were reported stored. */
static int put_degraded(void* x) {
  fixture* f = (fixture*)x;
  if (f->done >= BLOCKS) return 0;
  size_t found = 0;
  for (size_t i = 0; i < BLOCKS; i++) { /* one key at a time: a lookup may stop at its first miss */
    rt_run one = f->run;
    one.n = 1, one.keys += i, one.data += i * SIZE, one.read += i * SIZE, one.dst += i, one.sizes += i;
    one.values += i;
    found += rt_get(&f->t, &one, NULL);
  }
  if (found < f->done) fprintf(TU_LOG, "    put_many said %zu stored; %zu found\n", f->done, found);
  return found >= f->done;
}

static kvc_error* op_get(void* x) {
  fixture* f = (fixture*)x;
  f->done = rt_get(&f->t, &f->run, NULL); /* a value that came back wrong fails the test there */
  return NULL;
}
static int get_degraded(void* x) { return ((fixture*)x)->done < BLOCKS; }

static void sweep(const char* what) {
  char names[3][96];
  snprintf(names[0], sizeof names[0], "kvc_redis_tier_create (%s)", what);
  snprintf(names[1], sizeof names[1], "put_many of %d blocks (%s)", BLOCKS, what);
  snprintf(names[2], sizeof names[2], "get_many of %d blocks (%s)", BLOCKS, what);
  const heap_case cases[] = {
      {names[0], make_closed, op_create, observe, destroy, 0, NULL},
      {names[1], make_open, op_put, observe, destroy, 1, put_degraded},
      {names[2], make_stored, op_get, observe, destroy, 1, get_degraded},
  };
  heap_sweep_all(cases, sizeof cases / sizeof cases[0], 1);
}

static void test_standalone(void) {
  rs_server s;
  if (!CHECK(rs_start(&s, 0) == 0)) return;
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", s.port);
  mode = KVC_REDIS_CLUSTER_OFF;
  sweep("standalone");
  rs_stop(&s);
}

static void test_cluster(void) {
  rs_server nodes[3];
  if (!CHECK(rs_cluster_start(nodes, 3) == 0)) return;
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", nodes[0].port);
  mode = KVC_REDIS_CLUSTER_ON;
  sweep("cluster of 3");
  for (int i = 0; i < 3; i++) rs_stop(&nodes[i]);
}

int main(void) {
  rs_require();
  TU_RUN(test_standalone);
  TU_RUN(test_cluster);
  return tu_finish();
}
