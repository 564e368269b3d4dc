/*
 * test_internal_tier_oom.c: every heap allocation of the tier calls
 * refused in turn (../common/heap_sweep.h). Creating a tier (the disk
 * tier's scan of a directory of blocks included) and giving it to a pool
 * fail with a clean OUT_OF_MEMORY; the calls through which a pool uses its
 * tiers (a commit that stores, a reservation that evicts to disk, a match
 * that fetches) turn a refusal into a store failure or a miss, as the
 * contract says of any tier failure: the call succeeds, the sequence holds
 * what it should, and what was matched is the right bytes. Blocks by key
 * (get, put, exists) either fail with OUT_OF_MEMORY leaving the tier and
 * found[] as they were, or succeed with fewer blocks. Nothing leaks.
 */
#include "tier_test.h" /* first: it sets the feature macros */

#include "../common/heap_sweep.h"

enum { PROMPT = 17 };

typedef struct fixture {
  char dir[4096];
  kvc_pool* pool; /* 16 blocks of 4 tokens, a disk tier on dir */
  kvc_tier* tier;
  kvc_pool_sequence *s, *other;
  uint64_t matched;
} fixture;

static void prompt(int32_t* tok, int32_t base) { tt_prompt(tok, PROMPT, base); }

/* A pool on a disk tier in `dir` (created if missing) under `policy`. */
static int attach(fixture* f, uint32_t blocks, kvc_tier_write_policy policy) {
  if (!CHECK_OK(tt_pool(&f->pool, blocks, KVC_POOL_LAYOUT_NHD))) return 0;
  f->tier = tt_disk(f->dir, 0);
  return CHECK(f->tier != NULL) && CHECK_OK(kvc_pool_add_tier(f->pool, f->tier, policy));
}

/* The prompt's 4 full blocks on disk, written by a pool that is gone. */
static int fill(const char* dir) {
  fixture w;
  memset(&w, 0, sizeof w);
  snprintf(w.dir, sizeof w.dir, "%s", dir);
  int32_t tok[PROMPT];
  prompt(tok, 1);
  int ok = attach(&w, 16, KVC_TIER_WRITE_ON_COMMIT) && CHECK_OK(kvc_pool_sequence_create(w.pool, NULL, &w.s)) &&
           CHECK_OK(pt_step(w.pool, 1, 2, w.s, tok, PROMPT));
  kvc_pool_destroy(w.pool);
  return ok;
}

static fixture* new_fixture(int filled) {
  fixture* f = (fixture*)calloc(1, sizeof *f);
  if (!f || !CHECK(tt_tempdir(f->dir, sizeof f->dir, "oom") != NULL) || (filled && !fill(f->dir))) {
    free(f);
    return NULL;
  }
  return f;
}

static void destroy(void* x) {
  fixture* f = (fixture*)x;
  kvc_pool_destroy(f->pool);
  tt_rmtree(f->dir);
  free(f);
}

static void observe(void* x, heap_state* out) {
  fixture* f = (fixture*)x;
  char files[16][4096];
  size_t n = tt_files(f->dir, files, 16);
  heap_state_u64(out, n);
  if (f->pool) {
    kvc_pool_stats s = pt_stats(f->pool, 0);
    heap_state_put(out, &s, sizeof s);
    kvc_tier_stats t = tt_stats(f->tier);
    heap_state_put(out, &t, sizeof t);
  }
  kvc_pool_sequence* seqs[2] = {f->s, f->other};
  for (int i = 0; i < 2; i++) {
    if (!seqs[i]) continue;
    heap_state_u64(out, kvc_pool_sequence_length(seqs[i]));
    heap_state_u64(out, kvc_pool_sequence_committed(seqs[i]));
  }
  heap_state_u64(out, f->matched);
}

/* ---- creating and attaching: OUT_OF_MEMORY ------------------------------ */

static void* make_directory(void) { return new_fixture(1); }

static kvc_error* op_disk_tier_create(void* x) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = ((fixture*)x)->dir;
  kvc_tier* t = NULL;
  kvc_error* e = kvc_disk_tier_create(&o, &t); /* scans the 4 blocks there */
  kvc_tier_destroy(t);
  return e;
}

static size_t no_put(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                     size_t count) {
  (void)ctx, (void)keys, (void)values, (void)sizes, (void)count;
  return 0;
}
static size_t no_get(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                     size_t count) {
  (void)ctx, (void)keys, (void)values, (void)capacity, (void)sizes, (void)count;
  return 0;
}

static kvc_error* op_tier_create(void* x) {
  (void)x;
  const kvc_tier_ops ops = {sizeof(kvc_tier_ops), no_put, no_get, NULL, NULL};
  kvc_tier* t = NULL;
  kvc_error* e = kvc_tier_create(&ops, NULL, "a program's store", &t);
  kvc_tier_destroy(t);
  return e;
}

static void* make_pool_and_tier(void) {
  fixture* f = new_fixture(0);
  if (!f) return NULL;
  if (!CHECK_OK(tt_pool(&f->pool, 16, KVC_POOL_LAYOUT_NHD)) || !(f->tier = tt_disk(f->dir, 0))) return NULL;
  return f;
}
static void destroy_unattached(void* x) {
  fixture* f = (fixture*)x;
  if (f->tier && !kvc_pool_tier(f->pool, 0)) kvc_tier_destroy(f->tier);
  destroy(x);
}
static kvc_error* op_add_tier(void* x) {
  fixture* f = (fixture*)x;
  return kvc_pool_add_tier(f->pool, f->tier, KVC_TIER_WRITE_ON_COMMIT);
}

/* ---- using a tier: a refusal is a store failure or a miss ----------------- */

/* A commit that stores the prompt's blocks. */
static void* make_commit(void) {
  fixture* f = new_fixture(0);
  int32_t tok[PROMPT];
  prompt(tok, 1);
  static int64_t slots[PROMPT];
  if (!f || !attach(f, 16, KVC_TIER_WRITE_ON_COMMIT) || !CHECK_OK(kvc_pool_sequence_create(f->pool, NULL, &f->s)) ||
      !CHECK_OK(kvc_pool_reserve(f->s, tok, PROMPT, slots)) || !CHECK_OK(pt_write(f->pool, 2, slots, 0, PROMPT)))
    return NULL;
  return f;
}
static kvc_error* op_commit(void* x) { return kvc_pool_commit(((fixture*)x)->s); }
/* Committed whole; fewer blocks stored, the others counted as store failures. */
static int commit_degraded(void* x) {
  fixture* f = (fixture*)x;
  kvc_tier_stats t = tt_stats(f->tier);
  return kvc_pool_sequence_committed(f->s) == PROMPT && t.puts < 4 && t.puts + t.put_failures == 4;
}

/* A reservation that evicts the cached blocks of a finished request to disk (4 usable blocks). */
static void* make_evict(void) {
  fixture* f = new_fixture(0);
  int32_t a[PROMPT];
  prompt(a, 1);
  if (!f || !attach(f, 5, KVC_TIER_WRITE_ON_EVICT) || !CHECK_OK(kvc_pool_sequence_create(f->pool, NULL, &f->s)) ||
      !CHECK_OK(pt_step(f->pool, 1, 2, f->s, a, 16)))
    return NULL;
  kvc_pool_sequence_destroy(f->s); /* its 4 blocks: cached, unreferenced */
  f->s = NULL;
  if (!CHECK_OK(kvc_pool_sequence_create(f->pool, NULL, &f->other))) return NULL;
  return f;
}
static kvc_error* op_evict(void* x) {
  int32_t b[PROMPT];
  prompt(b, 5000);
  static int64_t slots[PROMPT];
  return kvc_pool_reserve(((fixture*)x)->other, b, 16, slots);
}
/* Reserved whole; fewer blocks on disk. */
static int evict_degraded(void* x) {
  fixture* f = (fixture*)x;
  kvc_tier_stats t = tt_stats(f->tier);
  return kvc_pool_sequence_length(f->other) == 16 && t.puts < 4 && t.puts + t.put_failures == 4;
}

/* A fresh pool whose only copy of the prompt is on disk. */
static void* make_match(void) {
  fixture* f = new_fixture(1);
  if (!f || !attach(f, 16, KVC_TIER_WRITE_ON_COMMIT) || !CHECK_OK(kvc_pool_sequence_create(f->pool, NULL, &f->s)))
    return NULL;
  return f;
}
static kvc_error* op_match(void* x) {
  fixture* f = (fixture*)x;
  int32_t tok[PROMPT];
  prompt(tok, 1);
  return kvc_pool_match_prefix(f->s, tok, PROMPT, &f->matched);
}
/* A shorter match (whole blocks), and what it matched is the prompt's bytes. */
static int match_degraded(void* x) {
  fixture* f = (fixture*)x;
  return f->matched < 16 && f->matched % TT_BLOCK == 0 && kvc_pool_sequence_length(f->s) == f->matched &&
         pt_gather_mismatches(f->s, 0) == 0 && pt_gather_mismatches(f->s, 1) == 0;
}

/* ---- blocks by key: OUT_OF_MEMORY with nothing changed, or misses -------- */

enum { KEYS = 4, PAYLOAD = 300 };

typedef struct keys_fixture {
  fixture f; /* dir and an unattached tier; no pool */
  kvc_tier_key keys[KEYS];
  uint8_t data[KEYS][PAYLOAD], read[KEYS][PAYLOAD];
  uint8_t found[KEYS];
} keys_fixture;

static void* make_keys(int stored) {
  keys_fixture* k = (keys_fixture*)calloc(1, sizeof *k);
  if (!k || !CHECK(tt_tempdir(k->f.dir, sizeof k->f.dir, "oom-keys") != NULL) || !(k->f.tier = tt_disk(k->f.dir, 0)))
    return NULL;
  const void* in[KEYS];
  for (int i = 0; i < KEYS; i++) {
    k->keys[i].fingerprint[0] = 1;
    k->keys[i].block_hash[0] = (uint8_t)(i + 1);
    memset(k->data[i], i + 1, PAYLOAD);
    in[i] = k->data[i];
  }
  size_t n = 0;
  if (stored && (!CHECK_OK(kvc_tier_put_blocks(k->f.tier, k->keys, KEYS, PAYLOAD, 1, in, &n)) || !CHECK(n == KEYS)))
    return NULL;
  return k;
}
static void* make_keys_stored(void) { return make_keys(1); }
static void* make_keys_empty(void) { return make_keys(0); }

static void observe_keys(void* x, heap_state* out) {
  keys_fixture* k = (keys_fixture*)x;
  char files[16][4096];
  heap_state_u64(out, tt_files(k->f.dir, files, 16));
  kvc_tier_stats t = tt_stats(k->f.tier);
  heap_state_put(out, &t, sizeof t);
  heap_state_put(out, k->found, sizeof k->found);
  heap_state_u64(out, k->f.matched);
}

static kvc_error* op_get_blocks(void* x) {
  keys_fixture* k = (keys_fixture*)x;
  void* out[KEYS];
  for (int i = 0; i < KEYS; i++) out[i] = k->read[i];
  size_t n = 0;
  kvc_error* e = kvc_tier_get_blocks(k->f.tier, k->keys, KEYS, PAYLOAD, 1, out, k->found, &n);
  if (!e) k->f.matched = n;
  return e;
}
/* Fewer found, and every one found is its own bytes. */
static int get_degraded(void* x) {
  keys_fixture* k = (keys_fixture*)x;
  for (int i = 0; i < KEYS; i++)
    if (k->found[i] && memcmp(k->read[i], k->data[i], PAYLOAD)) return 0;
  return k->f.matched < KEYS;
}

static kvc_error* op_put_blocks(void* x) {
  keys_fixture* k = (keys_fixture*)x;
  const void* in[KEYS];
  for (int i = 0; i < KEYS; i++) in[i] = k->data[i];
  size_t n = 0;
  kvc_error* e = kvc_tier_put_blocks(k->f.tier, k->keys, KEYS, PAYLOAD, 1, in, &n);
  if (!e) k->f.matched = n;
  return e;
}
static int put_degraded(void* x) { return ((keys_fixture*)x)->f.matched < KEYS; }

static kvc_error* op_exists(void* x) {
  keys_fixture* k = (keys_fixture*)x;
  size_t n = 0;
  kvc_error* e = kvc_tier_exists(k->f.tier, k->keys, KEYS, k->found, &n);
  if (!e) k->f.matched = n;
  return e;
}
static int exists_degraded(void* x) { return ((keys_fixture*)x)->f.matched < KEYS; }

static void destroy_keys(void* x) {
  keys_fixture* k = (keys_fixture*)x;
  kvc_tier_destroy(k->f.tier);
  tt_rmtree(k->f.dir);
  free(k);
}

static void test_every_tier_call(void) {
  const heap_case cases[] = {
      {"kvc_disk_tier_create (scan of 4 blocks)", make_directory, op_disk_tier_create, observe, destroy, 0, NULL},
      {"kvc_tier_create", make_directory, op_tier_create, observe, destroy, 0, NULL},
      {"kvc_pool_add_tier", make_pool_and_tier, op_add_tier, observe, destroy_unattached, 0, NULL},
      {"kvc_pool_commit storing to disk", make_commit, op_commit, observe, destroy, 1, commit_degraded},
      {"kvc_pool_reserve evicting to disk", make_evict, op_evict, observe, destroy, 1, evict_degraded},
      {"kvc_pool_match_prefix fetching from disk", make_match, op_match, observe, destroy, 1, match_degraded},
      {"kvc_tier_get_blocks of 4 blocks", make_keys_stored, op_get_blocks, observe_keys, destroy_keys, 1,
       get_degraded},
      {"kvc_tier_put_blocks of 4 blocks", make_keys_empty, op_put_blocks, observe_keys, destroy_keys, 1,
       put_degraded},
      {"kvc_tier_exists of 4 keys", make_keys_stored, op_exists, observe_keys, destroy_keys, 1, exists_degraded},
  };
  heap_sweep_all(cases, sizeof cases / sizeof cases[0], 1);
}

int main(void) {
  TU_RUN(test_every_tier_call);
  return tu_finish();
}
