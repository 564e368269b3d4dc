/*
 * Out of memory anywhere in an operation on recurrent states leaves the
 * cache exactly as it was (states, has_previous_state, K/V, bytes) with
 * nothing leaked (oom_sweep.h refuses the n-th allocation, n = 0, 1, 2, ...).
 * Clone, split and stack allocate through the new cache's own backend,
 * which the wrapper cannot reach; their failure paths are the generic ones
 * of every kind.
 */
#include "oom_sweep.h"
#include "test_linear.h"

/* Layers: LINEAR (2 pairs, K = 3) and a dynamic hybrid; conv, recurrent and K/V filled, batch 2. */
static kvc_cache* filled(void) {
  const kvc_layer_kind kinds[2] = {KVC_LAYER_LINEAR, KVC_LAYER_LINEAR_DYNAMIC};
  kvc_cache* c = tl_cache(2, kinds, 0, 0, 2, 3);
  if (!c) return NULL;
  oom_install(c);
  const int64_t shape[3] = {2, 3, 2};
  tl_tensor s;
  tl_rec_input(&s, KVC_DTYPE_FLOAT32, 3, shape, 1.0f);
  for (uint32_t i = 0; i < 2; i++) {
    CHECK_OK(tl_conv(c, i, 2, 2, 0, 4, NULL, NULL));
    CHECK_OK(kvc_cache_update_recurrent_state(c, i, 0, &s.t, NULL));
  }
  tl_free(&s);
  CHECK_OK(tu_update_tokens(c, 1, 2, 1, 3, 2, 2, 0, NULL, NULL));
  return c;
}

static kvc_cache* recording(void) {
  kvc_cache* c = filled();
  if (c) CHECK_OK(kvc_cache_activate_past_recording(c));
  return c;
}

static kvc_error* first_conv_of_state1(kvc_cache* c) {
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  o.state_index = 1;
  return tl_conv(c, 0, 2, 2, 10, 1, &o, NULL);
}
static kvc_error* long_conv(kvc_cache* c) { return tl_conv(c, 0, 2, 2, 10, 40, NULL, NULL); }
static kvc_error* first_rec_of_state1(kvc_cache* c) {
  const int64_t shape[2] = {2, 5};
  tl_tensor s;
  tl_rec_input(&s, KVC_DTYPE_FLOAT16, 2, shape, 2.0f);
  kvc_error* e = kvc_cache_update_recurrent_state(c, 1, 1, &s.t, NULL);
  tl_free(&s);
  return e;
}
static kvc_error* repeat_rows(kvc_cache* c) { return kvc_cache_batch_repeat_interleave(c, 2); }
static kvc_error* kv_grow(kvc_cache* c) { return tu_update_tokens(c, 1, 2, 1, 90, 2, 2, 3, NULL, NULL); }

static void test_oom_leaves_cache_unchanged(void) {
  static const oom_case cases[] = {
      {"first conv update of a state", filled, first_conv_of_state1, 1},
      {"recorded conv state that grows", recording, long_conv, 1},
      {"first recurrent update of a state", filled, first_rec_of_state1, 1},
      {"reorder (scratch)", filled, oom_reorder_swap, 1},
      {"select (new rows for K/V and every state)", filled, oom_select_rows, 6},
      {"repeat_interleave", filled, repeat_rows, 6},
      {"K/V update of a hybrid that grows its store", filled, kv_grow, 2},
  };
  oom_sweep_all(cases, sizeof cases / sizeof cases[0], NULL);
}

int main(void) {
  TU_RUN(test_oom_leaves_cache_unchanged);
  return tu_finish();
}
