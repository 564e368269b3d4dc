/*
 * tests/threads/test_threads_handles.c: threads racing through the C API on
 * one handle (kvcache.h, "Thread safety"; docs/threads.md).
 *
 * On one cache, one encoder-decoder pair, one pool and one tier, every call
 * either succeeds or is refused with KVC_ERROR_BUSY, and what the successful
 * calls did is exactly what the handle holds afterwards (no lost or torn
 * update, the pool's block counts add up). A call blocked inside the library
 * (a tier's store, a save's write callback) makes the refusals deterministic:
 * mutating calls are refused while it is inside, const calls of a shared
 * entry are not, and the calls that return no error wait. Distinct handles
 * run concurrently with no refusal at all.
 *
 * The plain suite runs it; `make tsan` runs it under ThreadSanitizer, which
 * fails it on any data race.
 */
#include "../tier/tier_test.h" /* first: it sets the feature macros (mkdtemp, nanosleep) */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>

#define THREADS 4
#define ITERS 150

static void sleep_ms(long ms) {
  struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* The racing threads of a test start together (set for each test to its number of threads). */
static pthread_barrier_t start_line;

/* What one racing thread saw: calls that succeeded, were refused, or failed otherwise (never expected). */
typedef struct tally {
  long ok, busy, other;
  char first_other[256];
} tally;

/* Counts `e` into `t` (and destroys it); returns its code. */
static kvc_code count(tally* t, kvc_error* e) {
  kvc_code code = kvc_error_code(e);
  if (code == KVC_OK)
    t->ok++;
  else if (code == KVC_ERROR_BUSY)
    t->busy++;
  else if (t->other++ == 0)
    snprintf(t->first_other, sizeof t->first_other, "%s", kvc_error_message(e));
  kvc_error_destroy(e);
  return code;
}

/* Retries `call` while it is refused (a caller that serializes by retrying); the last code. */
#define RETRY(t, call)                                  \
  ({                                                    \
    kvc_code code_;                                     \
    while ((code_ = count((t), (call))) == KVC_ERROR_BUSY) sched_yield(); \
    code_;                                              \
  })

/* One serving step (reserve, write, commit), each call retried while refused: a refused call did nothing. */
static kvc_code step_retrying(tally* t, kvc_pool* p, kvc_pool_sequence* s, const int32_t* tokens, int64_t n) {
  int64_t first = (int64_t)kvc_pool_sequence_length(s), slots[16];
  kvc_code code = RETRY(t, kvc_pool_reserve(s, tokens, (size_t)n, slots));
  if (code == KVC_OK) code = RETRY(t, pt_write(p, 2, slots, first, n));
  if (code == KVC_OK) code = RETRY(t, kvc_pool_commit(s));
  return code;
}

/* A gather (a const call) retried while refused; -1 when it never succeeds. */
static long gather_mismatches_retrying(const kvc_pool_sequence* s, uint32_t layer) {
  long bad = -1;
  for (int i = 0; i < 100000 && (bad = pt_gather_mismatches(s, layer)) == -1; i++) sched_yield();
  return bad;
}

static void check_tally(const char* what, const tally* t, int expect_busy_possible) {
  printf("  %s: %ld ok, %ld busy\n", what, t->ok, t->busy);
  if (!CHECK_EQ_I64(t->other, 0)) fprintf(stderr, "    %s: first unexpected error: %s\n", what, t->first_other);
  if (!expect_busy_possible) CHECK_EQ_I64(t->busy, 0);
}

/* ------------------------------------------------------------------ one cache */

#define H 2
#define D 4

typedef struct cache_race {
  kvc_cache* cache;
  int id;
  tally t;
  int64_t tokens[ITERS]; /* the tokens of this thread's successful updates */
  long stored;
} cache_race;

static void* cache_writer(void* arg) {
  cache_race* r = arg;
  pthread_barrier_wait(&start_line);
  for (int i = 0; i < ITERS; i++) {
    int64_t token = (int64_t)r->id * 500 + i; /* token-encoded values are exact below 4000 */
    kvc_code code = count(&r->t, tu_update_list(r->cache, 0, 1, H, D, D, &token, 1, NULL, NULL));
    if (code == KVC_OK) r->tokens[r->stored++] = token;
  }
  return NULL;
}

static void* cache_reader(void* arg) {
  cache_race* r = arg;
  pthread_barrier_wait(&start_line);
  for (int i = 0; i < ITERS; i++) {
    int64_t len = 0;
    kvc_kv kv;
    if (kvc_cache_num_layers(r->cache) > 0) { /* waits rather than refuses: it has no error to return */
      count(&r->t, kvc_cache_seq_length(r->cache, 0, &len));
      count(&r->t, kvc_cache_layer_view(r->cache, 0, &kv));
    }
  }
  return NULL;
}

static void test_one_cache_racing_threads(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  cache_race r[THREADS + 2];
  pthread_t th[THREADS + 2];
  memset(r, 0, sizeof r);
  pthread_barrier_init(&start_line, NULL, THREADS + 2);
  for (int i = 0; i < THREADS + 2; i++) {
    r[i].cache = c;
    r[i].id = i;
    REQUIRE(pthread_create(&th[i], NULL, i < THREADS ? cache_writer : cache_reader, &r[i]) == 0);
  }
  long stored = 0;
  for (int i = 0; i < THREADS + 2; i++) {
    pthread_join(th[i], NULL);
    check_tally(i < THREADS ? "cache update" : "cache queries", &r[i].t, 1);
    stored += r[i].stored;
  }
  pthread_barrier_destroy(&start_line);
  CHECK(stored > 0);
  /* Every successful update is in the cache once, none of the refused ones is. */
  int64_t len = -1;
  CHECK_OK(kvc_cache_seq_length(c, 0, &len));
  CHECK_EQ_I64(len, stored);
  kvc_kv kv = tu_view(c, 0);
  long found[THREADS] = {0}, bad = 0;
  for (int64_t s = 0; s < len && kv.key.data; s++) {
    int64_t src = 0, token = tu_decode_token(&kv.key, 0, 0, s, 0, &src);
    int owner = (int)(token / 500);
    if (token < 0 || owner >= THREADS) {
      bad++;
      continue;
    }
    /* A thread's own updates are in its order. */
    if (found[owner] >= r[owner].stored || r[owner].tokens[found[owner]] != token) bad++;
    found[owner]++;
  }
  CHECK_EQ_I64(bad, 0);
  for (int i = 0; i < THREADS; i++) CHECK_EQ_I64(found[i], r[i].stored);
  kvc_cache_destroy(c);
}

/* Stacking splits reads each one: a split updated meanwhile refuses the stack or the update, never both run. */
typedef struct split_race {
  kvc_cache* split;
  atomic_int stop;
  tally t;
  long stored;
} split_race;

static void* split_writer(void* arg) {
  split_race* r = arg;
  pthread_barrier_wait(&start_line);
  for (int i = 0; i < ITERS && !atomic_load(&r->stop); i++)
    if (count(&r->t, tu_update_tokens(r->split, 0, 1, H, 1, D, D, 100 + i, NULL, NULL)) == KVC_OK) r->stored++;
  return NULL;
}

static void test_stacking_splits_while_one_is_updated(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 0, 2, H, 4, D, D, 0, NULL, NULL));
  kvc_cache* splits[2] = {NULL, NULL};
  size_t n = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, 2, 1, splits, 2, &n));
  REQUIRE(n == 2);
  split_race r;
  memset(&r, 0, sizeof r);
  r.split = splits[0];
  pthread_barrier_init(&start_line, NULL, 2);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, split_writer, &r) == 0);
  pthread_barrier_wait(&start_line);
  tally stacks;
  memset(&stacks, 0, sizeof stacks);
  for (int i = 0; i < ITERS; i++) {
    kvc_cache* stacked = NULL;
    kvc_error* e = kvc_cache_from_batch_splits((const kvc_cache* const*)splits, 2, &stacked);
    kvc_code code = kvc_error_code(e);
    /* Once the splits' lengths differ, stacking is refused by its own rule: a clean error too. */
    if (code == KVC_ERROR_INVALID_ARGUMENT) {
      kvc_error_destroy(e);
      stacks.ok++;
    } else {
      count(&stacks, e);
    }
    kvc_cache_destroy(stacked);
  }
  atomic_store(&r.stop, 1);
  pthread_join(th, NULL);
  pthread_barrier_destroy(&start_line);
  check_tally("split updates", &r.t, 1);
  check_tally("stacks beside them", &stacks, 1);
  int64_t len = -1;
  CHECK_OK(kvc_cache_seq_length(splits[0], 0, &len));
  CHECK_EQ_I64(len, 4 + r.stored);
  kvc_cache_destroy(splits[0]);
  kvc_cache_destroy(splits[1]);
  kvc_cache_destroy(c);
}

/* ------------------------------------------- a call held inside: deterministic refusals */

/* A gate a callback waits at, inside the library, until the test opens it. */
typedef struct gate {
  atomic_int inside, open;
} gate;

static void gate_wait(gate* g) {
  atomic_store(&g->inside, 1);
  while (!atomic_load(&g->open)) sleep_ms(1);
}

static void gate_await_inside(gate* g) {
  while (!atomic_load(&g->inside)) sleep_ms(1);
}

static int gated_write(void* user, const void* data, size_t bytes) {
  (void)data, (void)bytes;
  gate* g = user;
  if (!atomic_load(&g->open)) gate_wait(g);
  return 0;
}

typedef struct held_save {
  kvc_cache* cache;
  gate g;
  kvc_code code;
} held_save;

static void* save_with_gate(void* arg) {
  held_save* h = arg;
  kvc_error* e = kvc_cache_save_to(h->cache, gated_write, &h->g, NULL);
  h->code = kvc_error_code(e);
  kvc_error_destroy(e);
  return NULL;
}

static void test_cache_refuses_writer_while_reader_inside(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, H, 3, D, D, 0, NULL, NULL));
  held_save h;
  memset(&h, 0, sizeof h);
  h.cache = c;
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, save_with_gate, &h) == 0);
  gate_await_inside(&h.g);
  /* A save (a const call) is inside: another const call shares, a mutating one is refused. */
  int64_t len = -1;
  CHECK_OK(kvc_cache_seq_length(c, 0, &len));
  CHECK_EQ_I64(len, 3);
  kvc_error* e = tu_update_tokens(c, 0, 1, H, 1, D, D, 3, NULL, NULL);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_BUSY);
  CHECK(strstr(kvc_error_message(e), "kvc_cache_update: another thread is inside a read-only call") != NULL);
  printf("  refusal: %s\n", kvc_error_message(e));
  kvc_error_destroy(e);
  CHECK_ERR(kvc_cache_crop(c, 1), KVC_ERROR_BUSY);
  CHECK_ERR(kvc_cache_reset(c), KVC_ERROR_BUSY);
  atomic_store(&h.g.open, 1);
  pthread_join(th, NULL);
  CHECK_EQ_I64(h.code, KVC_OK);
  /* Refused calls did nothing; the cache takes the update once the save has left. */
  CHECK_OK(kvc_cache_seq_length(c, 0, &len));
  CHECK_EQ_I64(len, 3);
  CHECK_OK(tu_update_tokens(c, 0, 1, H, 1, D, D, 3, NULL, NULL));
  CHECK_OK(kvc_cache_seq_length(c, 0, &len));
  CHECK_EQ_I64(len, 4);
  kvc_cache_destroy(c);
}

/* A save of one half is inside: the pair's calls that use that half are refused and change neither half. */
static void test_pair_refused_while_a_half_is_saved(void) {
  kvc_cache *self = tu_lazy_cache(), *cross = tu_lazy_cache();
  kvc_encoder_decoder_cache* pair = NULL;
  REQUIRE(self && cross);
  REQUIRE_OK(tu_update_tokens(self, 0, 1, H, 3, D, D, 0, NULL, NULL));
  REQUIRE_OK(tu_update_tokens(cross, 0, 1, H, 5, D, D, 0, NULL, NULL));
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &pair));
  held_save h;
  memset(&h, 0, sizeof h);
  h.cache = self;
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, save_with_gate, &h) == 0);
  gate_await_inside(&h.g);
  CHECK_ERR(kvc_encoder_decoder_cache_crop(pair, 1), KVC_ERROR_BUSY);
  const int64_t beams[1] = {0};
  CHECK_ERR(kvc_encoder_decoder_cache_reorder(pair, beams, 1), KVC_ERROR_BUSY);
  CHECK_ERR(kvc_encoder_decoder_cache_reset(pair), KVC_ERROR_BUSY);
  int32_t updated = -1;
  CHECK_OK(kvc_encoder_decoder_cache_is_updated(pair, 0, &updated)); /* the pair's own flags: free */
  atomic_store(&h.g.open, 1);
  pthread_join(th, NULL);
  CHECK_EQ_I64(h.code, KVC_OK);
  int64_t len = -1;
  CHECK_OK(kvc_cache_seq_length(self, 0, &len));
  CHECK_EQ_I64(len, 3);
  CHECK_OK(kvc_cache_seq_length(cross, 0, &len));
  CHECK_EQ_I64(len, 5);
  /* Free again: the pair's calls enter its halves' public functions on their own thread. */
  CHECK_OK(kvc_encoder_decoder_cache_crop(pair, 1));
  CHECK_OK(kvc_cache_seq_length(self, 0, &len));
  CHECK_EQ_I64(len, 1);
  CHECK_OK(kvc_encoder_decoder_cache_reorder(pair, beams, 1));
  kvc_encoder_decoder_cache_destroy(pair);
}

/* A tier whose store waits at a gate: a commit holds its pool there. */
static gate store_gate;
static size_t gated_put(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                        size_t n) {
  (void)ctx, (void)keys, (void)values, (void)sizes;
  if (!atomic_load(&store_gate.open)) gate_wait(&store_gate);
  return n;
}
static size_t no_get(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                     size_t n) {
  (void)ctx, (void)keys, (void)values, (void)capacity, (void)sizes, (void)n;
  return 0;
}

static kvc_tier* gated_tier(void) {
  kvc_tier_ops ops;
  memset(&ops, 0, sizeof ops);
  ops.struct_size = sizeof ops;
  ops.put_many = gated_put;
  ops.get_many = no_get;
  kvc_tier* t = NULL;
  kvc_error_destroy(kvc_tier_create(&ops, NULL, "gated", &t));
  return t;
}

typedef struct held_commit {
  kvc_pool* pool;
  kvc_pool_sequence* seq;
  kvc_code code;
} held_commit;

static void* commit_block(void* arg) {
  held_commit* h = arg;
  int32_t tokens[TT_BLOCK];
  tt_prompt(tokens, TT_BLOCK, 1);
  kvc_error* e = pt_step(h->pool, 1, 2, h->seq, tokens, TT_BLOCK);
  h->code = kvc_error_code(e);
  kvc_error_destroy(e);
  return NULL;
}

typedef struct waiting_length {
  const kvc_pool_sequence* seq;
  atomic_int done;
  uint64_t length;
} waiting_length;

static void* read_length(void* arg) {
  waiting_length* w = arg;
  w->length = kvc_pool_sequence_length(w->seq);
  atomic_store(&w->done, 1);
  return NULL;
}

static void test_pool_refuses_while_commit_inside(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD));
  kvc_tier* t = gated_tier();
  REQUIRE(t != NULL);
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT));
  kvc_pool_sequence *a = NULL, *b = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  kvc_pool_stats before = pt_stats(p, 0);
  held_commit h = {p, a, -1};
  pthread_t th, reader;
  REQUIRE(pthread_create(&th, NULL, commit_block, &h) == 0);
  gate_await_inside(&store_gate);
  /* The commit is inside its tier's store: every call on the pool, its sequences or its tier is refused. */
  int32_t tok[2] = {5, 6};
  int64_t slots[2] = {-7, -7};
  kvc_error* e = kvc_pool_reserve(b, tok, 2, slots);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_BUSY);
  CHECK(strstr(kvc_error_message(e), "(last entered: kvc_pool_commit)") != NULL);
  printf("  refusal: %s\n", kvc_error_message(e));
  kvc_error_destroy(e);
  CHECK_EQ_I64(slots[0], -7); /* out-parameters untouched */
  kvc_pool_stats st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  CHECK_ERR(kvc_pool_stats_get(p, 0, &st), KVC_ERROR_BUSY);
  kvc_tier_stats ts;
  memset(&ts, 0, sizeof ts);
  ts.struct_size = sizeof ts;
  CHECK_ERR(kvc_tier_stats_get(t, &ts), KVC_ERROR_BUSY);
  /* Blocks by key on the pool's tier wait for none of the pool's calls: refused, found[] untouched. */
  kvc_tier_key key;
  memset(&key, 0, sizeof key);
  uint8_t payload[8] = {0}, found = 7;
  void* out[1] = {payload};
  const void* in[1] = {payload};
  CHECK_ERR(kvc_tier_get_blocks(t, &key, 1, sizeof payload, 1, out, &found, NULL), KVC_ERROR_BUSY);
  CHECK_ERR(kvc_tier_put_blocks(t, &key, 1, sizeof payload, 1, in, NULL), KVC_ERROR_BUSY);
  CHECK_EQ_I64(found, 7);
  kvc_pool_sequence* c = NULL;
  CHECK_ERR(kvc_pool_sequence_create(p, NULL, &c), KVC_ERROR_BUSY);
  CHECK(c == NULL);
  kvc_pool_sequence* f = NULL;
  CHECK_ERR(kvc_pool_fork(b, &f), KVC_ERROR_BUSY);
  CHECK_ERR(kvc_pool_clear_cache(p), KVC_ERROR_BUSY);
  /* A length has no error to return: it waits for the commit to leave. */
  waiting_length w = {a, 0, 0};
  REQUIRE(pthread_create(&reader, NULL, read_length, &w) == 0);
  sleep_ms(50);
  CHECK_EQ_I64(atomic_load(&w.done), 0);
  atomic_store(&store_gate.open, 1);
  pthread_join(th, NULL);
  pthread_join(reader, NULL);
  CHECK_EQ_I64(h.code, KVC_OK);
  CHECK_EQ_I64(w.length, TT_BLOCK);
  /* The refused calls changed nothing: b is empty, the commit's block is the only one taken. */
  CHECK_EQ_I64(kvc_pool_sequence_length(b), 0);
  kvc_pool_stats after = pt_stats(p, 0);
  CHECK_EQ_I64(after.free_blocks + 1, before.free_blocks);
  CHECK_OK(kvc_pool_reserve(b, tok, 2, slots));
  kvc_tier_stats ts2 = tt_stats(t);
  CHECK_EQ_I64(ts2.puts, 1); /* the commit's: the refused put by key stored nothing */
  kvc_pool_destroy(p);
}

/* ------------------------------------------------------------------ one pool */

#define POOL_BLOCKS 256
#define STEPS 12

typedef struct pool_race {
  kvc_pool* pool;
  int id;
  tally t;
  long mismatches;
  uint64_t length;
} pool_race;

static void* pool_worker(void* arg) {
  pool_race* r = arg;
  pthread_barrier_wait(&start_line);
  kvc_pool_sequence* s = NULL;
  if (RETRY(&r->t, kvc_pool_sequence_create(r->pool, NULL, &s)) != KVC_OK) return NULL;
  int32_t tokens[STEPS * 3];
  tt_prompt(tokens, STEPS * 3, 1); /* the same prompt everywhere: commits hash the same blocks */
  uint64_t matched = 0;
  RETRY(&r->t, kvc_pool_match_prefix(s, tokens, STEPS * 3, &matched));
  for (;;) {
    int64_t first = (int64_t)kvc_pool_sequence_length(s), n = STEPS * 3 - first < 3 ? STEPS * 3 - first : 3;
    if (n <= 0 || step_retrying(&r->t, r->pool, s, tokens + first, n) != KVC_OK) break;
    kvc_pool_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    count(&r->t, kvc_pool_stats_get(r->pool, 0, &st));
    kvc_pool_table table;
    count(&r->t, kvc_pool_block_table(r->pool, (const kvc_pool_sequence* const*)&s, 1, 0, KVC_POOL_TABLE_PADDED,
                                      &table));
  }
  r->length = kvc_pool_sequence_length(s);
  r->mismatches = 0;
  for (uint32_t layer = 0; layer < 2; layer++) {
    long bad = gather_mismatches_retrying(s, layer);
    r->mismatches += bad < 0 ? 1000000 : bad;
  }
  kvc_pool_sequence_destroy(s); /* waits for the others rather than refusing */
  return NULL;
}

static void test_one_pool_racing_threads(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, POOL_BLOCKS, KVC_POOL_LAYOUT_HND));
  kvc_pool_stats before = pt_stats(p, 0);
  pool_race r[THREADS];
  pthread_t th[THREADS];
  memset(r, 0, sizeof r);
  pthread_barrier_init(&start_line, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) {
    r[i].pool = p;
    r[i].id = i;
    REQUIRE(pthread_create(&th[i], NULL, pool_worker, &r[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    check_tally("pool steps", &r[i].t, 1);
    CHECK_EQ_I64(r[i].length, STEPS * 3);
    CHECK_EQ_I64(r[i].mismatches, 0);
  }
  pthread_barrier_destroy(&start_line);
  /* Every sequence is gone: the blocks are all free or cached, none lost or counted twice. */
  CHECK_OK(kvc_pool_clear_cache(p));
  kvc_pool_stats after = pt_stats(p, 0);
  CHECK_EQ_I64(after.free_blocks, before.free_blocks);
  kvc_pool_destroy(p);
}

/* ------------------------------------------------------------------ one tier */

typedef struct tier_race {
  kvc_pool* pool;
  const kvc_tier* tier;
  atomic_int stop;
  tally t;
  long went_back; /* counters read lower than before: torn or lost */
} tier_race;

static void* tier_reader(void* arg) {
  tier_race* r = arg;
  uint64_t last = 0;
  while (!atomic_load(&r->stop)) {
    kvc_tier_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (count(&r->t, kvc_tier_stats_get(r->tier, &s)) == KVC_OK) {
      if (s.puts < last) r->went_back++;
      last = s.puts;
    }
  }
  return NULL;
}

static void test_one_tier_racing_threads(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "threads") != NULL);
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 64, KVC_POOL_LAYOUT_NHD));
  kvc_tier* disk = tt_disk(dir, 0);
  REQUIRE(disk != NULL);
  REQUIRE_OK(kvc_pool_add_tier(p, disk, KVC_TIER_WRITE_ON_COMMIT));
  tier_race r;
  memset(&r, 0, sizeof r);
  r.pool = p;
  r.tier = kvc_pool_tier(p, 0);
  pthread_t th;
  REQUIRE(pthread_create(&th, NULL, tier_reader, &r) == 0);
  tally writer;
  memset(&writer, 0, sizeof writer);
  long committed_blocks = 0;
  for (int i = 0; i < 24; i++) {
    kvc_pool_sequence* s = NULL;
    RETRY(&writer, kvc_pool_sequence_create(p, NULL, &s));
    int32_t tokens[2 * TT_BLOCK];
    tt_prompt(tokens, 2 * TT_BLOCK, 1000 + 10 * i); /* new blocks each time: each commit stores two */
    if (step_retrying(&writer, p, s, tokens, 2 * TT_BLOCK) == KVC_OK) committed_blocks += 2;
    kvc_pool_sequence_destroy(s);
  }
  atomic_store(&r.stop, 1);
  pthread_join(th, NULL);
  check_tally("tier stats", &r.t, 1);
  check_tally("pool steps beside them", &writer, 1);
  CHECK_EQ_I64(r.went_back, 0);
  kvc_tier_stats s = tt_stats(r.tier);
  CHECK_EQ_I64(s.puts, committed_blocks);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

/* Two threads give one tier to two pools at once: exactly one pool gets it. */
typedef struct tier_gift {
  kvc_pool* pool;
  kvc_tier* tier;
  pthread_barrier_t* start;
  kvc_code code;
} tier_gift;

static void* give_tier(void* arg) {
  tier_gift* g = arg;
  pthread_barrier_wait(g->start);
  kvc_error* e = kvc_pool_add_tier(g->pool, g->tier, KVC_TIER_WRITE_ON_EVICT);
  g->code = kvc_error_code(e);
  kvc_error_destroy(e);
  return NULL;
}

static void test_one_tier_given_twice_at_once(void) {
  kvc_pool *p1 = NULL, *p2 = NULL;
  REQUIRE_OK(tt_pool(&p1, 8, KVC_POOL_LAYOUT_NHD));
  REQUIRE_OK(tt_pool(&p2, 8, KVC_POOL_LAYOUT_NHD));
  long both = 0, none = 0, busy = 0;
  for (int i = 0; i < 100; i++) {
    kvc_tier* t = gated_tier();
    REQUIRE(t != NULL);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, 2);
    tier_gift g1 = {p1, t, &start, -1}, g2 = {p2, t, &start, -1};
    pthread_t a, b;
    REQUIRE(pthread_create(&a, NULL, give_tier, &g1) == 0);
    REQUIRE(pthread_create(&b, NULL, give_tier, &g2) == 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&start);
    int won = (g1.code == KVC_OK) + (g2.code == KVC_OK);
    both += won == 2;
    none += won == 0;
    kvc_code lost = g1.code == KVC_OK ? g2.code : g1.code;
    busy += lost == KVC_ERROR_BUSY;
    if (won == 1) CHECK(lost == KVC_ERROR_BUSY || lost == KVC_ERROR_INVALID_ARGUMENT);
    if (won == 0) kvc_tier_destroy(t);
  }
  printf("  tier given twice: %ld refused as busy, the rest as given already\n", busy);
  CHECK_EQ_I64(both, 0);
  CHECK_EQ_I64(none, 0);
  kvc_pool_destroy(p1);
  kvc_pool_destroy(p2);
}

/* ------------------------------------------------------- encoder-decoder pair */

typedef struct pair_race {
  kvc_encoder_decoder_cache* pair;
  uint32_t layer;
  tally t;
} pair_race;

/* Updates the self-attention half directly while the pair's calls run on it. */
typedef struct half_race {
  kvc_cache* half;
  tally t;
  long stored;
} half_race;

static void* half_writer(void* arg) {
  half_race* r = arg;
  pthread_barrier_wait(&start_line);
  for (int i = 0; i < ITERS; i++)
    if (count(&r->t, tu_update_tokens(r->half, 0, 1, H, 1, D, D, i, NULL, NULL)) == KVC_OK) r->stored++;
  return NULL;
}

static void* pair_worker(void* arg) {
  pair_race* r = arg;
  pthread_barrier_wait(&start_line);
  tu_tensor k, v;
  tu_tensor_tokens(&k, 1, H, 2, D, 0, 0);
  tu_tensor_tokens(&v, 1, H, 2, D, 0, 1);
  kvc_kv out;
  RETRY(&r->t, kvc_encoder_decoder_cache_update_cross(r->pair, r->layer, &k.t, &v.t, &out));
  for (int i = 0; i < ITERS; i++) {
    int32_t updated = -1;
    count(&r->t, kvc_encoder_decoder_cache_is_updated(r->pair, r->layer, &updated));
    count(&r->t, kvc_encoder_decoder_cache_crop(r->pair, 0));
  }
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return NULL;
}

static void test_one_encoder_decoder_racing_threads(void) {
  kvc_cache *self = tu_lazy_cache(), *cross = tu_lazy_cache();
  kvc_encoder_decoder_cache* pair = NULL;
  REQUIRE(self && cross);
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &pair));
  pair_race r[THREADS];
  pthread_t th[THREADS], half_th;
  memset(r, 0, sizeof r);
  half_race h;
  memset(&h, 0, sizeof h);
  h.half = self;
  pthread_barrier_init(&start_line, NULL, THREADS + 1);
  for (int i = 0; i < THREADS; i++) {
    r[i].pair = pair;
    r[i].layer = (uint32_t)i;
    REQUIRE(pthread_create(&th[i], NULL, pair_worker, &r[i]) == 0);
  }
  REQUIRE(pthread_create(&half_th, NULL, half_writer, &h) == 0);
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    check_tally("encoder-decoder", &r[i].t, 1);
  }
  pthread_join(half_th, NULL);
  check_tally("its self-attention half, directly", &h.t, 1);
  pthread_barrier_destroy(&start_line);
  for (uint32_t l = 0; l < THREADS; l++) {
    int32_t updated = 0;
    CHECK_OK(kvc_encoder_decoder_cache_is_updated(pair, l, &updated));
    CHECK_EQ_I64(updated, 1);
    int64_t len = -1;
    CHECK_OK(kvc_cache_seq_length(cross, l, &len));
    CHECK_EQ_I64(len, 2);
  }
  kvc_encoder_decoder_cache_destroy(pair);
}

/* ------------------------------------------------------------ distinct handles */

typedef struct own_handles {
  int id;
  tally t;
  int64_t cache_length;
  long pool_mismatches;
} own_handles;

static void* own_worker(void* arg) {
  own_handles* o = arg;
  pthread_barrier_wait(&start_line);
  kvc_cache* c = NULL;
  count(&o->t, kvc_cache_create(NULL, &c));
  for (int i = 0; c && i < ITERS; i++) count(&o->t, tu_update_tokens(c, 0, 1, H, 1, D, D, i, NULL, NULL));
  if (c) count(&o->t, kvc_cache_seq_length(c, 0, &o->cache_length));
  kvc_cache_destroy(c);
  kvc_pool* p = NULL;
  count(&o->t, tt_pool(&p, 64, KVC_POOL_LAYOUT_NHD));
  kvc_pool_sequence* s = NULL;
  if (p) count(&o->t, kvc_pool_sequence_create(p, NULL, &s));
  int32_t tokens[STEPS * 3];
  tt_prompt(tokens, STEPS * 3, o->id);
  for (int step = 0; s && step < STEPS; step++) count(&o->t, pt_step(p, 1, 2, s, tokens + 3 * step, 3));
  o->pool_mismatches = s ? pt_gather_mismatches(s, 0) + pt_gather_mismatches(s, 1) : -1;
  kvc_pool_destroy(p);
  return NULL;
}

static void test_distinct_handles_never_busy(void) {
  own_handles o[THREADS];
  pthread_t th[THREADS];
  memset(o, 0, sizeof o);
  pthread_barrier_init(&start_line, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) {
    o[i].id = i;
    REQUIRE(pthread_create(&th[i], NULL, own_worker, &o[i]) == 0);
  }
  for (int i = 0; i < THREADS; i++) {
    pthread_join(th[i], NULL);
    check_tally("own cache and pool", &o[i].t, 0);
    CHECK_EQ_I64(o[i].cache_length, ITERS);
    CHECK_EQ_I64(o[i].pool_mismatches, 0);
  }
  pthread_barrier_destroy(&start_line);
}

int main(void) {
  TU_RUN(test_one_cache_racing_threads);
  TU_RUN(test_stacking_splits_while_one_is_updated);
  TU_RUN(test_cache_refuses_writer_while_reader_inside);
  TU_RUN(test_pair_refused_while_a_half_is_saved);
  TU_RUN(test_pool_refuses_while_commit_inside);
  TU_RUN(test_one_pool_racing_threads);
  TU_RUN(test_one_tier_racing_threads);
  TU_RUN(test_one_tier_given_twice_at_once);
  TU_RUN(test_one_encoder_decoder_racing_threads);
  TU_RUN(test_distinct_handles_never_busy);
  return tu_finish();
}
