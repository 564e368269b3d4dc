/*
 * The performance promises that need no clock: in steady decoding stored
 * tokens stay where they are on most steps (amortized growth, no per-step
 * copy of history), returned views are windows onto the storage, reserved
 * memory stops moving once capacity is reached, and static layers keep fixed
 * addresses.
 */
#include "test_util.h"

#define NB 1
#define NH 2
#define D 8

static const unsigned char* first_elem(const kvc_tensor* t) {
  const int64_t zero[4] = {0, 0, 0, 0};
  return tu_elem_ptr(t, zero);
}

/* Address of the element of seq index s (batch 0, head 0, dim 0). */
static const unsigned char* elem_at(const kvc_tensor* t, int64_t s) {
  const int64_t idx[4] = {0, 0, s, 0};
  return tu_elem_ptr(t, idx);
}

static void test_dynamic_history_stays_put(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC, 0, 0, 0, NB, NH, 16, D);
  REQUIRE(c != NULL);
  const int steps = 2000;
  int moves = 0, reserved_changes = 0, not_a_window = 0;
  kvc_kv start = tu_view(c, 0);
  const unsigned char* prev = first_elem(&start.key);
  uint64_t reserved = tu_memory(c).bytes_reserved;
  for (int s = 0; s < steps; s++) {
    kvc_kv out;
    REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, 16 + s, NULL, &out));
    kvc_kv st = tu_view(c, 0);
    const unsigned char* now = first_elem(&st.key);
    if (now != prev) moves++;
    prev = now;
    if (first_elem(&out.key) != now || first_elem(&out.value) != first_elem(&st.value)) not_a_window++;
    uint64_t r = tu_memory(c).bytes_reserved;
    if (r != reserved) reserved_changes++;
    reserved = r;
  }
  /* geometric growth: a move per doubling, about log2(2016 / 16) of them */
  CHECK(moves <= 16);
  CHECK(reserved_changes <= 16);
  CHECK_EQ_I64(not_a_window, 0);
  if (moves > 16 || reserved_changes > 16)
    fprintf(stderr, "    history moved %d times, reserved changed %d times in %d steps\n", moves, reserved_changes,
            steps);
  kvc_kv st = tu_view(c, 0);
  CHECK_EQ_I64(st.key.shape[2], 16 + steps);
  CHECK_EQ_I64(tu_decode_token(&st.key, 0, 1, 0, 0, NULL), 0);
  CHECK_EQ_I64(tu_decode_token(&st.value, 0, 1, 16 + steps - 1, 1, NULL), 16 + steps - 1);
  kvc_cache_destroy(c);
}

/*
 * A dynamic sliding layer: the token that was newest stays at its address on
 * most steps (compaction is amortized), and reserved memory is flat after warm-up.
 */
static void test_dynamic_sliding_steady(void) {
  const int64_t W = 64;
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_SLIDING, W, 0, 0, NB, NH, 10, D);
  REQUIRE(c != NULL);
  const int warm = (int)(4 * W), steps = 3000;
  int moves = 0, reserved_changes = 0, not_a_window = 0;
  uint64_t reserved = 0;
  for (int s = 0; s < warm + steps; s++) {
    kvc_kv before = tu_view(c, 0);
    int64_t len = before.key.shape[2];
    const unsigned char* newest = len ? elem_at(&before.key, len - 1) : NULL;
    kvc_kv out;
    REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, 10 + s, NULL, &out));
    if (s < warm) {
      reserved = tu_memory(c).bytes_reserved;
      continue;
    }
    kvc_kv st = tu_view(c, 0);
    /* the former newest token is now second newest */
    if (elem_at(&st.key, st.key.shape[2] - 2) != newest) moves++;
    /* the stored tail is the end of what update returned */
    if (elem_at(&out.key, out.key.shape[2] - 1) != elem_at(&st.key, st.key.shape[2] - 1)) not_a_window++;
    uint64_t r = tu_memory(c).bytes_reserved;
    if (r != reserved) reserved_changes++;
    reserved = r;
  }
  CHECK(moves * 10 < steps);
  CHECK_EQ_I64(reserved_changes, 0);
  CHECK_EQ_I64(not_a_window, 0);
  if (moves * 10 >= steps) fprintf(stderr, "    the window moved %d times in %d steps\n", moves, steps);
  int64_t want[64];
  kvc_kv st = tu_view(c, 0);
  int64_t last = 10 + warm + steps;
  CHECK_TOKENS(st, tu_range(want, last - (W - 1), last), W - 1);
  kvc_cache_destroy(c);
}

/* Static kinds: one allocation at the first update, fixed base addresses after it. */
static void static_steady(kvc_layer_kind kind, int64_t window, int64_t max_cache_len, int64_t prefill, int steps) {
  kvc_cache* c = tu_one_layer_cache(kind, window, max_cache_len);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_info(c, 0).is_compileable, 1);
  REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, prefill, D, D, 0, NULL, NULL));
  kvc_kv st = tu_view(c, 0);
  const void* kbase = st.key.data;
  const void* vbase = st.value.data;
  uint64_t reserved = tu_memory(c).bytes_reserved;
  int moved = 0, grew = 0;
  for (int s = 0; s < steps; s++) {
    REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, prefill + s, NULL, NULL));
    st = tu_view(c, 0);
    if (st.key.data != kbase || st.value.data != vbase) moved++;
    if (tu_memory(c).bytes_reserved != reserved) grew++;
  }
  CHECK_EQ_I64(moved, 0);
  CHECK_EQ_I64(grew, 0);
  kvc_cache_destroy(c);
}

static void test_static_steady(void) {
  static_steady(KVC_LAYER_STATIC, 0, 600, 50, 500);
  static_steady(KVC_LAYER_STATIC_SLIDING, 32, 600, 50, 1000);
  static_steady(KVC_LAYER_STATIC_SLIDING, 32, 600, 5, 1000);
  static_steady(KVC_LAYER_STATIC_CHUNKED, 16, 20, 3, 1000);
}

/*
 * A static layer allocates exactly B*H*M*(Dk+Dv)*elem bytes, at early
 * initialization or its first update, and never moves them afterwards: what
 * CUDA-graph capture of a static cache relies on.
 */
static void test_static_allocates_once_exactly(void) {
  const int64_t M = 60;
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC, 0, M);
  REQUIRE(c != NULL);
  kvc_init_options io = tu_init_options(NB, NH, D, 0, KVC_DTYPE_FLOAT32);
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  const uint64_t exact = (uint64_t)(NB * NH * M * (D + D)) * sizeof(float);
  CHECK_EQ_I64((int64_t)tu_memory(c).bytes_reserved, (int64_t)exact);
  kvc_kv st = tu_view(c, 0);
  const void* kbase = st.key.data;
  REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 7, D, D, 0, NULL, NULL));
  for (int s = 0; s < (int)M - 7; s++) REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, 7 + s, NULL, NULL));
  st = tu_view(c, 0);
  CHECK_EQ_PTR(st.key.data, kbase);
  CHECK_EQ_I64((int64_t)tu_memory(c).bytes_reserved, (int64_t)exact);
  kvc_cache_destroy(c);
}

/* In one-token steady decoding a static sliding layer returns its stored view. */
static void test_static_sliding_returns_the_buffer(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_STATIC_SLIDING, 8, 8, 0, NB, NH, 20, D);
  REQUIRE(c != NULL);
  for (int s = 0; s < 50; s++) {
    kvc_kv out;
    REQUIRE_OK(tu_update_tokens(c, 0, NB, NH, 1, D, D, 20 + s, NULL, &out));
    kvc_kv st = tu_view(c, 0);
    CHECK_EQ_PTR(first_elem(&out.key), first_elem(&st.key));
    CHECK_EQ_PTR(first_elem(&out.value), first_elem(&st.value));
    CHECK_EQ_I64(out.key.shape[2], 8);
  }
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_dynamic_history_stays_put);
  TU_RUN(test_dynamic_sliding_steady);
  TU_RUN(test_static_steady);
  TU_RUN(test_static_allocates_once_exactly);
  TU_RUN(test_static_sliding_returns_the_buffer);
  return tu_finish();
}
