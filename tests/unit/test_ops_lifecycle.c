/*
 * reset and clone on every layer kind. reset: static layers are zeroed with
 * their counters at 0; dynamic layers drop their tokens (kvcache's deliberate
 * difference from transformers, which zeroes them and keeps the length).
 * clone: a deep copy; mutating either side leaves the other intact.
 */
#include "test_util.h"

#define NB 2
#define NH 2
#define DK 3
#define DV 4

static const kvc_layer_options* all_kinds(void) {
  static kvc_layer_options l[6];
  static const int64_t wm[6][2] = {{0, 0}, {3, 0}, {5, 0}, {0, 20}, {4, 10}, {20, 6}}; /* window, max_cache_len */
  return tu_layers(l, 6, TU_SIX_KINDS, wm);
}

static int feed(kvc_cache* c, uint32_t layers, const int64_t* sizes, size_t steps, int64_t first) {
  for (size_t s = 0; s < steps; s++) {
    for (uint32_t i = 0; i < layers; i++)
      if (!CHECK_OK(tu_update_tokens(c, i, NB, NH, sizes[s], DK, DV, first, NULL, NULL))) return 0;
    first += sizes[s];
  }
  return 1;
}

static const int64_t SIZES[] = {4, 1, 2, 1};

static void test_reset_static(void) {
  kvc_cache* c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  REQUIRE(feed(c, 6, SIZES, 4, 0));
  REQUIRE_OK(kvc_cache_reset(c));
  for (uint32_t i = 3; i < 6; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.is_initialized, 1);
    CHECK_EQ_I64(li.seq_length, 0);
    CHECK_EQ_I64(tu_seq(c, i), 0);
    kvc_kv st = tu_view(c, i);
    int64_t zeros[32];
    for (int k = 0; k < 32; k++) zeros[k] = -1;
    CHECK_TOKENS(st, zeros, li.capacity);
    CHECK_MASK(c, 1, i, li.capacity, 0);
  }
  kvc_cache_destroy(c);
}

static void test_reset_dynamic_empties(void) {
  kvc_cache* c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  REQUIRE(feed(c, 6, SIZES, 4, 0));
  kvc_memory_info before = tu_memory(c);
  REQUIRE_OK(kvc_cache_reset(c));
  for (uint32_t i = 0; i < 3; i++) {
    kvc_kv st = tu_view(c, i);
    CHECK_SHAPE(st.key, NB, NH, 0, DK);
    CHECK_EQ_I64(tu_seq(c, i), 0);
    CHECK_EQ_I64(tu_info(c, i).stored_length, 0);
    CHECK_MASK(c, 2, i, 2, 0);
  }
  kvc_memory_info after = tu_memory(c);
  CHECK_EQ_U64(after.bytes_reserved, before.bytes_reserved); /* storage kept for reuse */
  CHECK_EQ_U64(after.bytes_used, (uint64_t)(NB * NH * (20 + 4 + 6) * (DK + DV) * 4));
  /* the next update starts from nothing, not after stale zeros */
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 2, DK, DV, 0, NULL, &out));
  CHECK_KV_SEQ(out, 0, 1);
  kvc_cache_destroy(c);
}

/* After reset, a cache behaves exactly like a fresh one fed the same tokens. */
static void test_reset_then_reuse_equals_fresh(void) {
  kvc_cache* used = tu_custom_cache(6, all_kinds());
  kvc_cache* fresh = tu_custom_cache(6, all_kinds());
  REQUIRE(used && fresh);
  const int64_t long_run[] = {7, 1, 1, 3, 1, 1, 1};
  REQUIRE(feed(used, 6, long_run, 7, 0));
  REQUIRE_OK(kvc_cache_reset(used));
  REQUIRE(feed(used, 6, SIZES, 4, 100));
  REQUIRE(feed(fresh, 6, SIZES, 4, 100));
  CHECK_CACHES_EQUAL_CONTENTS(used, fresh);
  TU_DESTROY(used, fresh);
}

/* reset on a lazy cache keeps its layers; on a cache without layers it is a no-op. */
static void test_reset_lazy(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  CHECK_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  REQUIRE_OK(tu_update_tokens(c, 2, NB, NH, 3, DK, DV, 0, NULL, NULL));
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 3);
  CHECK_EQ_I64(tu_seq(c, 2), 0);
  kvc_cache_destroy(c);
}

static void test_clone_equal_and_independent(void) {
  kvc_cache* c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  REQUIRE(feed(c, 6, SIZES, 4, 0));
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  tu_snapshot orig, copy, now;
  snapshot(c, &orig);
  snapshot(d, &copy);
  CHECK_SNAPSHOT_EQUAL_CONTENTS(&orig, &copy);
  for (uint32_t i = 0; i < 6; i++) {
    CHECK_NE_PTR(tu_view(c, i).key.data, tu_view(d, i).key.data);
    CHECK_EQ_I64(tu_info(d, i).records_past, tu_info(c, i).records_past);
  }

  /* mutate the clone in every way */
  REQUIRE(feed(d, 6, SIZES, 2, 8));
  const int64_t beam[2] = {1, 0};
  REQUIRE_OK(kvc_cache_reorder(d, beam, 2));
  REQUIRE_OK(kvc_cache_reset(d));
  snapshot(c, &now);
  CHECK_SNAPSHOT_EQUAL(&orig, &now);
  snapshot_free(&now);

  /* and the original: the clone's state does not follow */
  kvc_cache_destroy(d);
  d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  REQUIRE(feed(c, 6, SIZES, 1, 8));
  snapshot(d, &now);
  CHECK_SNAPSHOT_EQUAL_CONTENTS(&copy, &now);
  snapshot_free(&now);

  /* the clone goes on exactly as the original would */
  REQUIRE(feed(d, 6, SIZES, 1, 8));
  CHECK_CACHES_EQUAL_CONTENTS(c, d);
  snapshot_free(&orig);
  snapshot_free(&copy);
  TU_DESTROY(c, d);
}

/* Destroying the original leaves the clone usable (no shared storage). */
static void test_clone_outlives_original(void) {
  kvc_cache* c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  REQUIRE(feed(c, 6, SIZES, 3, 0));
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_UNCHANGED_BY(d, kvc_cache_destroy(c));
  kvc_cache_destroy(d);
}

/* A clone of a lazy cache stays lazy; a clone of an untouched custom cache stays untouched. */
static void test_clone_lazy_and_uninitialized(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_EQ_I64(kvc_cache_num_layers(d), 0);
  REQUIRE_OK(tu_update_tokens(d, 1, NB, NH, 1, DK, DV, 0, NULL, NULL));
  CHECK_EQ_I64(kvc_cache_num_layers(d), 2);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  TU_DESTROY(c, d);

  c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_CACHES_EQUAL(c, d);
  for (uint32_t i = 0; i < 6; i++) CHECK_EQ_I64(tu_info(d, i).is_initialized, 0);
  TU_DESTROY(c, d);
}

int main(void) {
  TU_RUN(test_reset_static);
  TU_RUN(test_reset_dynamic_empties);
  TU_RUN(test_reset_then_reuse_equals_fresh);
  TU_RUN(test_reset_lazy);
  TU_RUN(test_clone_equal_and_independent);
  TU_RUN(test_clone_outlives_original);
  TU_RUN(test_clone_lazy_and_uninitialized);
  return tu_finish();
}
