/* kvc_cache_reserve: a capacity hint that makes dynamic layers allocate once, exactly. */
#include "test_util.h"

enum { NB = 2, NH = 3, D = 4 };

static uint64_t exact_bytes(int64_t tokens) { return (uint64_t)(NB * NH * tokens * (D + D)) * sizeof(float); }

/* An initialized layer grows now, keeps its tokens, and then decodes up to the reserve without moving. */
static void test_reserve_initialized_layer(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC, 0, 0, 0, NB, NH, 10, D);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_reserve(c, 500));
  CHECK_EQ_U64(tu_memory(c).bytes_reserved, exact_bytes(500));
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9);
  const void* base = st.key.data;
  for (int s = 10; s < 500; s++) REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, s, NULL, NULL));
  st = tu_view(c, 0);
  CHECK_EQ_PTR(st.key.data, base);
  CHECK_EQ_I64(st.key.shape[2], 500);
  CHECK_EQ_U64(tu_memory(c).bytes_reserved, exact_bytes(500));
  /* Past the reserve, growth resumes. */
  REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, 500, NULL, NULL));
  CHECK(tu_memory(c).bytes_reserved > exact_bytes(500));
  /* Never shrinks. */
  uint64_t before = tu_memory(c).bytes_reserved;
  REQUIRE_OK(kvc_cache_reserve(c, 8));
  CHECK_EQ_U64(tu_memory(c).bytes_reserved, before);
  kvc_cache_destroy(c);
}

/* Before the first update, and for layers a lazy cache creates later, the hint sizes the first allocation. */
static void test_reserve_as_hint(void) {
  kvc_cache* lazy = tu_lazy_cache();
  REQUIRE(lazy != NULL);
  REQUIRE_OK(kvc_cache_reserve(lazy, 300));
  REQUIRE_OK(tu_update_tokens(lazy, 2, NB, NH, 5, D, D, 0, NULL, NULL));
  CHECK_EQ_I64(kvc_cache_num_layers(lazy), 3);
  CHECK_EQ_U64(tu_memory(lazy).bytes_reserved, exact_bytes(300));
  kvc_cache* copy = NULL;
  REQUIRE_OK(kvc_cache_clone(lazy, &copy));
  REQUIRE_OK(tu_update_tokens(copy, 0, NB, NH, 5, D, D, 0, NULL, NULL));
  CHECK_EQ_U64(tu_memory(copy).bytes_reserved, 2 * exact_bytes(300));
  TU_DESTROY(copy, lazy);
}

/* Bounded kinds ignore the hint. */
static void test_reserve_ignores_bounded_layers(void) {
  kvc_cache* c = tu_holding_tokens(
      TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_STATIC, 0, 16), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0)), 0, NB, NH, 3, D, D);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 1, NB, NH, 3, D, D, 0, NULL, NULL));
  uint64_t before = tu_memory(c).bytes_reserved;
  REQUIRE_OK(kvc_cache_reserve(c, 1000));
  CHECK_EQ_U64(tu_memory(c).bytes_reserved, before);
  kvc_cache_destroy(c);
}

static void test_reserve_bad_input(void) {
  kvc_error* e = kvc_cache_reserve(NULL, 10);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_INVALID_ARGUMENT);
  kvc_error_destroy(e);
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC, 0, 0, 0, NB, NH, 3, D);
  REQUIRE(c != NULL);
  tu_snapshot before, after;
  snapshot(c, &before);
  const int64_t bad[2] = {-1, (int64_t)1 << 40};
  for (int i = 0; i < 2; i++) {
    e = kvc_cache_reserve(c, bad[i]);
    CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_INVALID_ARGUMENT);
    CHECK(strstr(kvc_error_message(e), "tokens") != NULL);
    kvc_error_destroy(e);
  }
  snapshot(c, &after);
  CHECK_SNAPSHOT_EQUAL(&before, &after);
  snapshot_free(&before);
  snapshot_free(&after);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_reserve_initialized_layer);
  TU_RUN(test_reserve_as_hint);
  TU_RUN(test_reserve_ignores_bounded_layers);
  TU_RUN(test_reserve_bad_input);
  return tu_finish();
}
