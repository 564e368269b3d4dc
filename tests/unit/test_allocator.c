/* Caller-provided storage (kvcache/allocator.h): a cache's K/V stores come from the caller's allocator. */
#include "../common/arena_allocator.h"
#include "../persist/persist_test.h"
#include "test_util.h"

enum { NB = 2, NH = 2, D = 4 };

static arena A;

static kvc_cache* arena_cache(const kvc_allocator* al, uint32_t n, const kvc_layer_options* layers) {
  kvc_cache_options o = tu_custom_options(n, layers);
  o.allocator = al;
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  return c;
}

/* Dynamic, static and sliding layers: three layouts whose stores must all be the arena's. */
static kvc_cache* mixed_cache(const kvc_allocator* al) {
  kvc_layer_options l[3] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC, 0, 16),
                            tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 6, 0)};
  return arena_cache(al, 3, l);
}

static int views_in_arena(const kvc_cache* c) {
  int ok = 1;
  for (uint32_t i = 0; i < kvc_cache_num_layers(c); i++) {
    kvc_kv kv = tu_view(c, i);
    ok &= CHECK(arena_holds_tensor(&kv.key)) & CHECK(arena_holds_tensor(&kv.value));
  }
  return ok;
}

/* Stores, growth included, come from the arena; views point into it; destroy gives every byte back. */
static void test_stores_come_from_the_allocator(void) {
  kvc_allocator al = arena_start(&A);
  kvc_cache* c = mixed_cache(&al);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(A.allocs, 0); /* layers allocate at their first update */
  for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(tu_update_tokens(c, i, NB, NH, 3, D, D, 0, NULL, NULL));
  CHECK_EQ_I64(A.allocs, 6); /* K and V of each layer */
  CHECK(views_in_arena(c));
  long before_growth = A.allocs;
  kvc_kv out;
  for (int64_t s = 3; s < 70; s++) { /* past the first store's 64 slots */
    REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, s, NULL, &out));
    CHECK(arena_holds_tensor(&out.key) && arena_holds_tensor(&out.value));
  }
  for (uint32_t i = 1; i < 3; i++) { /* the static and the sliding layer return views of their stores too */
    REQUIRE_OK(tu_update_tokens(c, i, NB, NH, 5, D, D, 3, NULL, &out));
    CHECK(arena_holds_tensor(&out.key) && arena_holds_tensor(&out.value));
  }
  CHECK(A.allocs > before_growth);         /* the dynamic layer grew */
  CHECK_EQ_I64(A.live_count, 6);            /* and gave its old stores back */
  kvc_kv grown = tu_view(c, 0);
  int64_t tokens[70];
  for (int64_t s = 0; s < 70; s++) tokens[s] = s;
  CHECK_TOKENS(grown, tokens, 70);
  /* Zero-filled by the library: the arena hands out 0xA5 bytes, the static layer's unwritten slots read 0. */
  kvc_kv st = tu_view(c, 1);
  CHECK_EQ_F64(tu_get(&st.key, NB - 1, NH - 1, 15, D - 1), 0.0);
  CHECK(views_in_arena(c));
  kvc_cache_destroy(c);
  arena_check_all_returned(&A);
}

/* A clone and a cache made by a batch split take their stores from the source's allocator. */
static void test_clone_and_split_share_it(void) {
  kvc_allocator al = arena_start(&A);
  kvc_cache* c = mixed_cache(&al);
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(tu_update_tokens(c, i, NB, NH, 5, D, D, 0, NULL, NULL));
  long before = A.allocs;
  kvc_cache* copy = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &copy));
  CHECK_EQ_I64(A.allocs, before + 6);
  CHECK(views_in_arena(copy));
  CHECK(tu_caches_equal(c, copy, 0));
  kvc_cache_destroy(c); /* the clone outlives its source: the allocator record is shared */
  REQUIRE_OK(tu_update_tokens(copy, 0, NB, NH, 30, D, D, 5, NULL, NULL));
  CHECK(views_in_arena(copy));
  kvc_cache_destroy(copy);
  arena_check_all_returned(&A);
}

/* A cache loaded with load options' allocator, and one restored into an allocator's cache, hold arena memory. */
static void test_load_and_restore_use_it(void) {
  kvc_cache* plain = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC, 0, 16),
                                     tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 6, 0));
  REQUIRE(plain != NULL);
  for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(tu_update_tokens(plain, i, NB, NH, 7, D, D, 0, NULL, NULL));
  ps_buffer file = {NULL, 0, 0};
  REQUIRE_OK(kvc_cache_save_to(plain, ps_buffer_write, &file, NULL));
  kvc_allocator al = arena_start(&A);
  kvc_load_options lo = KVC_LOAD_OPTIONS_INIT;
  lo.allocator = &al;
  kvc_cache* loaded = NULL;
  CHECK_OK(kvc_cache_load_buffer(file.data, file.len, &lo, &loaded));
  if (loaded) {
    CHECK_EQ_I64(A.allocs, 6);
    CHECK(views_in_arena(loaded));
    CHECK(tu_caches_equal(plain, loaded, 1));
    /* Restoring the file into it again: the new stores come from the same arena, the old ones go back. */
    CHECK_OK(kvc_cache_restore_buffer(loaded, file.data, file.len));
    CHECK_EQ_I64(A.live_count, 6);
    CHECK(views_in_arena(loaded));
    CHECK(tu_caches_equal(plain, loaded, 1));
    kvc_cache_destroy(loaded);
  }
  arena_check_all_returned(&A);
  /* Options of the size before the allocator (24 bytes) still load, with the backend's memory. */
  lo.struct_size = 24;
  lo.allocator = NULL;
  loaded = NULL;
  long allocs = A.allocs;
  CHECK_OK(kvc_cache_load_buffer(file.data, file.len, &lo, &loaded));
  CHECK_EQ_I64(A.allocs, allocs);
  kvc_cache_destroy(loaded);
  free(file.data);
  kvc_cache_destroy(plain);
}

/* Bad allocators are refused before anything is made, naming the field. */
static void test_bad_allocators(void) {
  kvc_allocator al = arena_start(&A);
  kvc_layer_options l = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options o = tu_custom_options(1, &l);
  o.allocator = &al;
  kvc_cache* c = (kvc_cache*)&A; /* must stay untouched */
  al.free = NULL;
  kvc_error* e = kvc_cache_create(&o, &c);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_INVALID_ARGUMENT && strstr(kvc_error_message(e), "options->allocator->free"));
  kvc_error_destroy(e);
  al = arena_start(&A);
  al.struct_size = 8;
  e = kvc_cache_create(&o, &c);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_INVALID_ARGUMENT && strstr(kvc_error_message(e), "struct_size is 8"));
  kvc_error_destroy(e);
  CHECK_EQ_PTR(c, &A);
  /* A pointer off the asked alignment is refused as out of memory, and given back. */
  al = arena_start(&A);
  A.misalign = 1;
  c = arena_cache(&al, 1, &l);
  REQUIRE(c != NULL);
  e = tu_update_tokens(c, 0, NB, NH, 3, D, D, 0, NULL, NULL);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_OUT_OF_MEMORY);
  /* The message names the allocator and the bytes: K and V of 2 x 2 x 64 slots x 4 floats. */
  CHECK(e && strstr(kvc_error_message(e), "caller's allocator") && strstr(kvc_error_message(e), "4096 + 4096 bytes"));
  kvc_error_destroy(e);
  CHECK_EQ_I64(A.live_count, 0);
  kvc_cache_destroy(c);
  arena_check_all_returned(&A);
}

/* Options of the 0.5 size (88 bytes, before the allocator) still create caches on the backend's memory. */
static void test_old_options_size(void) {
  kvc_layer_options l = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options o = tu_custom_options(1, &l);
  o.struct_size = 88;
  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_create(&o, &c));
  CHECK_OK(tu_update_tokens(c, 0, NB, NH, 3, D, D, 0, NULL, NULL));
  kvc_kv kv = tu_view(c, 0);
  CHECK(!arena_holds_tensor(&kv.key));
  kvc_cache_destroy(c);
}

/* release comes once per successful create or load, after the last cache sharing the allocator is gone and
 * every store went back; never for a call that failed, nor for a struct of the size before release. */
static void test_release_after_the_last_owner(void) {
  kvc_allocator al = arena_start(&A);
  kvc_cache* c = mixed_cache(&al);
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 3; i++) REQUIRE_OK(tu_update_tokens(c, i, NB, NH, 5, D, D, 0, NULL, NULL));
  kvc_cache *copy = NULL, *rows[2] = {NULL, NULL};
  size_t n = 0;
  REQUIRE_OK(kvc_cache_clone(c, &copy));
  REQUIRE_OK(kvc_cache_batch_split(c, NB, 1, rows, 2, &n));
  TU_DESTROY(c, rows[0], copy);
  CHECK_EQ_I64(A.releases, 0); /* rows[1] still uses it */
  kvc_cache_destroy(rows[1]);
  CHECK_EQ_I64(A.releases, 1);
  CHECK_EQ_I64(A.live_at_release, 0);
  arena_check_all_returned(&A);

  /* A create_from_tensors whose update fails after the cache was made: the caller keeps ctx. */
  al = arena_start(&A);
  kvc_layer_options l = tu_layer(KVC_LAYER_DYNAMIC, 0, 0);
  kvc_cache_options o = tu_custom_options(1, &l);
  o.allocator = &al;
  float data[2 * 3] = {0};
  int64_t kshape[4] = {1, 1, 2, 3}, vshape[4] = {1, 1, 3, 2};
  kvc_tensor k = tu_f32_view(data, kshape), v = tu_f32_view(data, vshape);
  c = NULL;
  kvc_error* e = kvc_cache_create_from_tensors(&o, 1, &k, &v, &c);
  CHECK(e != NULL && c == NULL);
  kvc_error_destroy(e);
  CHECK_EQ_I64(A.releases, 0);
  arena_check_all_returned(&A);
  /* The 0.7 struct before release (32 bytes): its trailing field is not read. */
  al = arena_start(&A);
  al.struct_size = 32;
  c = arena_cache(&al, 1, &l);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 3, D, D, 0, NULL, NULL));
  kvc_cache_destroy(c);
  CHECK_EQ_I64(A.releases, 0);
  arena_check_all_returned(&A);
}

/* ---- out of memory: the allocator refuses its n-th allocation, for n = 0, 1, ... until the call succeeds ---- */

typedef struct oom_op {
  const char* name;
  kvc_error* (*run)(kvc_cache* c, kvc_cache** made);
} oom_op;

static kvc_error* op_first_update(kvc_cache* c, kvc_cache** made) {
  (void)made;
  return tu_update_tokens(c, 2, NB, NH, 4, D, D, 0, NULL, NULL);
}
static kvc_error* op_growth(kvc_cache* c, kvc_cache** made) {
  (void)made;
  return tu_update_tokens(c, 0, NB, NH, 60, D, D, 5, NULL, NULL);
}
static kvc_error* op_clone(kvc_cache* c, kvc_cache** made) { return kvc_cache_clone(c, made); }
static kvc_error* op_split(kvc_cache* c, kvc_cache** made) {
  kvc_cache* parts[2] = {NULL, NULL};
  size_t count = 0;
  kvc_error* e = kvc_cache_batch_split(c, NB, 1, parts, 2, &count);
  made[0] = parts[0];
  made[1] = parts[1];
  return e;
}

/* A cache whose layers 0 and 1 hold 5 tokens; layer 2 is not initialized yet. */
static kvc_cache* oom_fixture(const kvc_allocator* al) {
  kvc_cache* c = mixed_cache(al);
  if (!c) return NULL;
  return tu_kept(c, CHECK_OK(tu_update_tokens(c, 0, NB, NH, 5, D, D, 0, NULL, NULL)) &&
                       CHECK_OK(tu_update_tokens(c, 1, NB, NH, 5, D, D, 0, NULL, NULL)));
}

static void oom_sweep_op(const oom_op* op) {
  for (long n = 0;; n++) {
    kvc_allocator al = arena_start(&A);
    kvc_cache* c = oom_fixture(&al);
    REQUIRE(c != NULL);
    tu_snapshot before, after;
    snapshot(c, &before);
    long live = A.live_count;
    A.budget = n;
    kvc_cache* made[2] = {NULL, NULL};
    kvc_error* e = op->run(c, made);
    A.budget = -1;
    int refused = A.refused > 0;
    if (e) {
      if (!CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_OUT_OF_MEMORY) || !refused)
        fprintf(TU_LOG, "  %s with %ld allocations granted: %s\n", op->name, n, kvc_error_message(e));
      kvc_error_destroy(e);
      snapshot(c, &after);
      if (!CHECK(snapshot_equal(&before, &after))) fprintf(TU_LOG, "  %s, refused at allocation %ld\n", op->name, n);
      snapshot_free(&after);
      CHECK_EQ_I64(A.live_count, live); /* nothing half-made kept */
    }
    snapshot_free(&before);
    TU_DESTROY(made[0], made[1], c);
    arena_check_all_returned(&A);
    if (!e) {
      CHECK(n > 0); /* every operation here allocates */
      return;
    }
    if (!CHECK(n < 64)) return;
  }
}

static void test_oom_leaves_the_cache_unchanged(void) {
  static const oom_op ops[] = {{"first update", op_first_update},
                               {"growth", op_growth},
                               {"clone", op_clone},
                               {"batch split", op_split}};
  for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) oom_sweep_op(&ops[i]);
}

int main(void) {
  TU_RUN(test_stores_come_from_the_allocator);
  TU_RUN(test_clone_and_split_share_it);
  TU_RUN(test_load_and_restore_use_it);
  TU_RUN(test_bad_allocators);
  TU_RUN(test_old_options_size);
  TU_RUN(test_release_after_the_last_owner);
  TU_RUN(test_oom_leaves_the_cache_unchanged);
  return tu_finish();
}
