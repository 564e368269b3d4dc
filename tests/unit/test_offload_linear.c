/*
 * Offloading next to linear-attention layers. transformers' prefetch skips
 * its is_linear layers (LINEAR and the sliding and static hybrids), and
 * those are never offloaded here either; a LINEAR_DYNAMIC layer
 * (LinearAttentionAndFullAttentionLayer, not is_linear) takes part: its K/V
 * moves, its conv and recurrent states stay in the device tier. Everything
 * a caller sees is the same as without offloading.
 *
 * Layers: 0 LINEAR_DYNAMIC, 1 LINEAR, 2 DYNAMIC, 3 LINEAR_STATIC (8 slots);
 * offloadable: 0 and 2. Step 1: u0 prefetches 2 (not initialized), offloads
 * 0 -> 1000; u2 wraps to 0 (fetched), offloads 2 -> 0010; u3 (not
 * offloadable) -> 0010. Every later step: u0 fetches 2, offloads 0 -> 1000;
 * u2 fetches 0, offloads 2 -> 0010; u3 -> 0010.
 */
#include "test_offload_util.h"

#define B 2
#define C 3 /* conv channels */
#define K 4 /* conv kernel */

static kvc_cache* make(kvc_offload offload) {
  static const kvc_layer_kind kinds[4] = {KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_LINEAR, KVC_LAYER_DYNAMIC,
                                          KVC_LAYER_LINEAR_STATIC};
  kvc_layer_options l[4];
  for (int i = 0; i < 4; i++) {
    l[i] = tu_layer(kinds[i], 0, kinds[i] == KVC_LAYER_LINEAR_STATIC ? 8 : 0);
    l[i].conv_kernel_size = kinds[i] == KVC_LAYER_DYNAMIC ? 0 : K;
  }
  return tu_custom_offload_cache(4, l, offload);
}

/* A [rows, cols, depth] conv input, or with depth 0 a [rows, cols] recurrent state, of random finite floats. */
static void state_input(tu_tensor* x, int64_t rows, int64_t cols, int64_t depth, uint64_t seed) {
  ot_random(x, KVC_DTYPE_FLOAT32, rows, cols, depth ? depth : 1, 1, seed);
  x->t.ndim = depth ? 3 : 2; /* compact, so the leading dims of [rows, cols, depth|1, 1] describe it */
}

/* State pair 0 of a layer: the same conv and recurrent states in both caches. */
static int same_state_views(const kvc_cache* a, const kvc_cache* b, uint32_t layer) {
  kvc_tensor ca, ra, cb, rb;
  if (kvc_error_code(kvc_cache_state_view(a, layer, 0, &ca, &ra)) != KVC_OK) return 0;
  if (kvc_error_code(kvc_cache_state_view(b, layer, 0, &cb, &rb)) != KVC_OK) return 0;
  return ca.ndim > 0 && ot_same_tensor(&ca, &cb) && ot_same_tensor(&ra, &rb);
}

static void step(kvc_cache* plain, kvc_cache* offl, int64_t n, uint64_t seed, const char* tiers_after[4]) {
  for (uint32_t i = 0; i < 4; i++) {
    if (i != 2) { /* the linear part first, as a hybrid model's block runs it */
      tu_tensor x, st;
      state_input(&x, B, C, n, seed + i);
      state_input(&st, B, 5, 0, seed + 10 + i);
      kvc_tensor ra, rb;
      CHECK_OK(kvc_cache_update_conv_state(plain, i, &x.t, NULL, &ra));
      CHECK_OK(kvc_cache_update_conv_state(offl, i, &x.t, NULL, &rb));
      CHECK(ot_same_tensor(&ra, &rb));
      CHECK_OK(kvc_cache_update_recurrent_state(plain, i, 0, &st.t, NULL));
      CHECK_OK(kvc_cache_update_recurrent_state(offl, i, 0, &st.t, NULL));
      CHECK(same_state_views(plain, offl, i));
      tu_tensor_free(&x);
      tu_tensor_free(&st);
    }
    if (i != 1) {
      kvc_kv a, b;
      CHECK_OK(ot_update(plain, i, KVC_DTYPE_FLOAT32, B, 2, n, 3, 2, seed + 20 + i, &a));
      CHECK_OK(ot_update(offl, i, KVC_DTYPE_FLOAT32, B, 2, n, 3, 2, seed + 20 + i, &b));
      CHECK_SAME_KV(a, b);
    }
    if (tiers_after[i]) CHECK_TIERS(offl, tiers_after[i], "an update of a step");
  }
  CHECK_CACHES_EQUAL_CONTENTS(plain, offl);
}

static void test_linear_layers_with_offloading(void) {
  kvc_cache* plain = make(KVC_OFFLOAD_NONE);
  kvc_cache* offl = make(KVC_OFFLOAD_ALL);
  REQUIRE(plain && offl);
  static const char* first[4] = {"1000", NULL, "0010", "0010"};
  static const char* later[4] = {"1000", NULL, "0010", "0010"};
  step(plain, offl, 3, 1, first);
  for (int s = 0; s < 4; s++) step(plain, offl, 1, 100 + 50 * (uint64_t)s, later);
  /* the states stay in the device tier: host bytes are K/V of the offloaded layer 2 only */
  kvc_memory_info m = tu_memory(offl), p = tu_memory(plain);
  CHECK_EQ_U64(m.bytes_state, p.bytes_state);
  CHECK(m.bytes_state > 0);
  CHECK_EQ_U64(m.bytes_host, ot_store_bytes(B, 2, 64, 3, 2, 4)); /* layer 2: 64 slots */
  /* batch operations move K/V rows in the host tier and state rows on the device */
  CHECK_OK(kvc_cache_reorder(plain, TU_LIST(1, 0), 2));
  CHECK_OK(kvc_cache_reorder(offl, TU_LIST(1, 0), 2));
  CHECK_TIERS(offl, "0010", "reorder");
  static const char* none[4] = {NULL, NULL, NULL, NULL};
  step(plain, offl, 1, 900, none);
  /* explicit moves leave linear layers alone and move the hybrid's K/V only */
  CHECK_OK(kvc_cache_offload(offl, 1));
  CHECK_OK(kvc_cache_offload(offl, 3));
  CHECK_TIERS(offl, "0010", "offload of linear layers");
  CHECK_OK(kvc_cache_offload(offl, 0));
  CHECK_TIERS(offl, "1010", "offload of the LINEAR_DYNAMIC layer");
  CHECK(same_state_views(plain, offl, 0));
  TU_DESTROY(plain, offl);
}

int main(void) {
  TU_RUN(test_linear_layers_with_offloading);
  return tu_finish();
}
