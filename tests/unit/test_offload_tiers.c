/*
 * Which layers are offloaded after every update: transformers' order (docs/semantics.md,
 * 'Offloading'), derived by hand below for each case. An update of
 * layer i prefetches the first offloadable layer j >= i + 1 (wrapping to the
 * first offloadable layer overall; an uninitialized layer has nothing to
 * fetch), writes layer i, then offloads it unless it is not offloadable.
 * Offloadable: not linear, and not sliding when only non-sliding layers are
 * offloaded. A tier string lists is_offloaded per layer ('1' = host tier).
 */
#include "test_offload_util.h"

typedef struct tier_step {
  uint32_t layer;
  const char* tiers; /* after the update of `layer` */
} tier_step;

/* Updates the listed layers in order (2 tokens at the first step, then 1) and checks the tiers after each. */
static void run_steps(kvc_cache* c, const tier_step* steps, int n, int layers_per_step) {
  for (int i = 0; i < n; i++) {
    int64_t tokens = i < layers_per_step ? 2 : 1;
    char when[64];
    snprintf(when, sizeof when, "call %d (update of layer %u)", i + 1, steps[i].layer);
    if (!CHECK_OK(ot_update(c, steps[i].layer, KVC_DTYPE_FLOAT32, 1, 2, tokens, 3, 3, (uint64_t)i, NULL))) return;
    CHECK_TIERS(c, steps[i].tiers, when);
  }
}

/* The arguments of ot_cache. */
typedef struct tier_order {
  kvc_preset preset;
  const char* types;
  int64_t window, chunk, max_len;
  kvc_offload mode;
} tier_order;

/* A new cache made as `o` says, run through the steps (run_steps). */
static void check_order(tier_order o, const tier_step* steps, int n, int layers_per_step) {
  kvc_cache* c = ot_cache(o.preset, o.types, o.window, o.chunk, o.max_len, o.mode);
  REQUIRE(c);
  run_steps(c, steps, n, layers_per_step);
  kvc_cache_destroy(c);
}

/*
 * Layers f s f f s, only non-sliding offloaded (offloadable: 0, 2, 3).
 * Step 1: u0 prefetches 2 (not initialized), offloads 0 -> 10000; u1 (sliding)
 * -> 10000; u2 prefetches 3 (not initialized), offloads 2 -> 10100; u3 finds
 * no offloadable layer after 3, wraps to 0 (fetched), offloads 3 -> 00110;
 * u4 wraps to 0 (already there) -> 00110. Step 2: u0 fetches 2, offloads 0 ->
 * 10010; u1 -> 10010; u2 fetches 3, offloads 2 -> 10100; u3 fetches 0,
 * offloads 3 -> 00110; u4 -> 00110.
 */
static void test_non_sliding_order(void) {
  static const tier_step steps[] = {{0, "10000"}, {1, "10000"}, {2, "10100"}, {3, "00110"}, {4, "00110"},
                                    {0, "10010"}, {1, "10010"}, {2, "10100"}, {3, "00110"}, {4, "00110"},
                                    {0, "10010"}, {1, "10010"}, {2, "10100"}, {3, "00110"}, {4, "00110"}};
  check_order((tier_order){KVC_PRESET_DYNAMIC, "fsffs", 3, 0, 0, KVC_OFFLOAD_NON_SLIDING}, steps, 15, 5);
}

/*
 * The same layers, every layer offloaded (DynamicCache's default,
 * offload_only_non_sliding=False). Step 1: each layer is offloaded after its
 * update; u4 wraps to 0 -> 01111. Step 2: u0 fetches 1, offloads 0 -> 10111;
 * u1 fetches 2 -> 11011; u2 fetches 3 -> 11101; u3 fetches 4 -> 11110; u4
 * fetches 0 -> 01111.
 */
static void test_all_order(void) {
  static const tier_step steps[] = {{0, "10000"}, {1, "11000"}, {2, "11100"}, {3, "11110"}, {4, "01111"},
                                    {0, "10111"}, {1, "11011"}, {2, "11101"}, {3, "11110"}, {4, "01111"}};
  check_order((tier_order){KVC_PRESET_DYNAMIC, "fsffs", 3, 0, 0, KVC_OFFLOAD_ALL}, steps, 10, 5);
}

/* update_all runs the same per-layer order: it ends where a step of single updates ends. */
static void test_update_all_order(void) {
  static const struct {
    kvc_offload mode;
    const char* end;
  } cases[] = {{KVC_OFFLOAD_NON_SLIDING, "00110"}, {KVC_OFFLOAD_ALL, "01111"}};
  for (int k = 0; k < 2; k++) {
    kvc_cache* c = ot_cache(KVC_PRESET_DYNAMIC, "fsffs", 3, 0, 0, cases[k].mode);
    REQUIRE(c);
    for (int step = 0; step < 3; step++) {
      ot_layers x;
      ot_layers_make(&x, 5, KVC_DTYPE_FLOAT32, 1, 2, step ? 1 : 3, 3, 3, (uint64_t)(10 * step), 100);
      CHECK_OK(kvc_cache_update_all(c, 5, x.kt, x.vt, NULL, NULL));
      CHECK_TIERS(c, cases[k].end, "update_all");
      ot_layers_free(&x);
    }
    kvc_cache_destroy(c);
  }
}

/*
 * A lazy OffloadedCache: prefetch looks at the layers that exist so far.
 * Step 1: u0 (one layer) wraps to itself, not yet initialized -> 1; u1 wraps
 * to 0 and fetches it -> 01; u2 wraps to 0 (there) -> 011. Step 2: u0 fetches
 * 1 -> 101; u1 fetches 2 -> 110; u2 fetches 0 -> 011.
 */
static void test_lazy_order(void) {
  static const tier_step steps[] = {{0, "1"}, {1, "01"}, {2, "011"}, {0, "101"}, {1, "110"}, {2, "011"}};
  check_order((tier_order){KVC_PRESET_OFFLOADED, "", 0, 0, 0, KVC_OFFLOAD_DEFAULT}, steps, 6, 3);
}

/* A lazy cache updated at index 2 first: layers 0 and 1 appear uninitialized and are never "offloaded". */
static void test_lazy_skipped_layers(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_OFFLOADED, "", 0, 0, 0, KVC_OFFLOAD_DEFAULT);
  REQUIRE(c);
  REQUIRE_OK(ot_update(c, 2, KVC_DTYPE_FLOAT32, 1, 2, 2, 3, 3, 1, NULL));
  CHECK_TIERS(c, "001", "update of layer 2 first");
  /* kvc_cache_offload of an uninitialized layer leaves it as it is */
  CHECK_OK(kvc_cache_offload(c, 0));
  CHECK_TIERS(c, "001", "offload of uninitialized layer 0");
  /* u0 prefetches 1 (not initialized), offloads 0; u1 prefetches 2; u2 wraps to 0 */
  static const tier_step steps[] = {{0, "101"}, {1, "110"}, {2, "011"}};
  run_steps(c, steps, 3, 0);
  kvc_cache_destroy(c);
}

/*
 * OffloadedStaticCache: StaticCache with only non-sliding layers offloaded.
 * Layers f s f (offloadable 0, 2). Step 1: u0 prefetches 2 (not initialized),
 * offloads 0 -> 100; u1 -> 100; u2 wraps to 0, fetches it, offloads 2 -> 001.
 * Step 2: u0 fetches 2, offloads 0 -> 100; u1 -> 100; u2 fetches 0 -> 001.
 */
static void test_offloaded_static_order(void) {
  static const tier_step steps[] = {{0, "100"}, {1, "100"}, {2, "001"}, {0, "100"}, {1, "100"}, {2, "001"}};
  check_order((tier_order){KVC_PRESET_OFFLOADED_STATIC, "fsf", 4, 0, 10, KVC_OFFLOAD_DEFAULT}, steps, 6, 3);
}

/*
 * OffloadedHybridCache: HybridChunkedCache with its chunked layers resident.
 * Layers c f c f (offloadable 1, 3). Step 1: u0 prefetches 1 (not
 * initialized) -> 0000; u1 prefetches 3 (not initialized), offloads 1 ->
 * 0100; u2 prefetches 3 -> 0100; u3 wraps to 1, fetches it, offloads 3 ->
 * 0001. Step 2: u0 prefetches 1 (there) -> 0001; u1 fetches 3, offloads 1 ->
 * 0100; u2 (3 there) -> 0100; u3 fetches 1 -> 0001.
 */
static void test_offloaded_hybrid_order(void) {
  static const tier_step steps[] = {{0, "0000"}, {1, "0100"}, {2, "0100"}, {3, "0001"},
                                    {0, "0001"}, {1, "0100"}, {2, "0100"}, {3, "0001"}};
  check_order((tier_order){KVC_PRESET_OFFLOADED_HYBRID, "cfcf", 0, 3, 10, KVC_OFFLOAD_DEFAULT}, steps, 8, 4);
}

/* Any preset can offload: a static cache with every layer offloaded (the sliding one too). */
static void test_static_all_order(void) {
  /* step 1: 100, 110, then u2 wraps to 0 -> 011; step 2: u0 fetches 1 -> 101, u1 fetches 2 -> 110, u2 fetches 0 */
  static const tier_step steps[] = {{0, "100"}, {1, "110"}, {2, "011"}, {0, "101"}, {1, "110"}, {2, "011"}};
  check_order((tier_order){KVC_PRESET_STATIC, "fsf", 4, 0, 10, KVC_OFFLOAD_ALL}, steps, 6, 3);
}

/*
 * No offloadable layer at all (every layer sliding, only non-sliding
 * offloaded): transformers' prefetch raises ValueError from list.index; here
 * nothing ever moves and updates work.
 */
static void test_no_offloadable_layer(void) {
  static const tier_step steps[] = {{0, "00"}, {1, "00"}, {0, "00"}, {1, "00"}};
  check_order((tier_order){KVC_PRESET_DYNAMIC, "ss", 3, 0, 0, KVC_OFFLOAD_NON_SLIDING}, steps, 4, 2);
}

/*
 * Linear-attention layers are never prefetched or offloaded. Layers l f l f
 * (offloadable 1, 3; the linear layers are not updated through update).
 * u1 prefetches 3 (not initialized), offloads 1 -> 0100; u3 wraps past the
 * linear layer 0 to 1, fetches it, offloads 3 -> 0001; u1 fetches 3 -> 0100.
 */
static void test_linear_layers_skipped(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_HYBRID_MAMBA, "lflf", 0, 0, 0, KVC_OFFLOAD_ALL);
  REQUIRE(c);
  static const tier_step steps[] = {{1, "0100"}, {3, "0001"}, {1, "0100"}, {3, "0001"}};
  run_steps(c, steps, 4, 2);
  CHECK_OK(kvc_cache_offload(c, 0)); /* a linear layer holds no K/V: left as it is */
  CHECK_TIERS(c, "0001", "offload of linear layer 0");
  kvc_cache_destroy(c);
}

/* Updating an offloaded layer that was not prefetched (out of order) brings it back first. */
static void test_out_of_order_update(void) {
  kvc_cache* c = ot_stepped_cache(KVC_PRESET_DYNAMIC, "ffff", 0, 0, KVC_OFFLOAD_ALL, 1, 2, 2, "0111");
  REQUIRE(c);
  kvc_kv before = tu_view(c, 2);
  size_t n = 0;
  unsigned char* old = tu_view_bytes_alloc(&before.key, &n);
  kvc_kv out;
  /* u2: brought to the device (0101), prefetches 3 (0100), written, offloaded -> 0110 */
  REQUIRE_OK(ot_update(c, 2, KVC_DTYPE_FLOAT32, 1, 1, 1, 2, 2, 9, &out));
  CHECK_TIERS(c, "0110", "update of layer 2 out of order");
  CHECK_EQ_I64(out.key.shape[2], 3);
  /* the history survived the round trip */
  size_t m = 0;
  kvc_kv after = tu_view(c, 2);
  unsigned char* now = tu_view_bytes_alloc(&after.key, &m);
  CHECK(m == n + n / 2 && memcmp(old, now, n) == 0);
  free(old);
  free(now);
  kvc_cache_destroy(c);
}

/* DynamicCache(ddp_cache_data, offloading=True) fills its layers without the offloading update path. */
static void test_from_tensors_stays_on_device(void) {
  ot_layers x;
  ot_layers_make(&x, 3, KVC_DTYPE_FLOAT32, 1, 2, 4, 3, 3, 0, 7);
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = KVC_PRESET_OFFLOADED;
  kvc_cache* c = NULL;
  CHECK_OK(kvc_cache_create_from_tensors(&o, 3, x.kt, x.vt, &c));
  ot_layers_free(&x);
  REQUIRE(c);
  CHECK_TIERS(c, "000", "create_from_tensors");
  /* the first update: u0 prefetches 1 (there), offloads 0 */
  REQUIRE_OK(ot_update(c, 0, KVC_DTYPE_FLOAT32, 1, 2, 1, 3, 3, 5, NULL));
  CHECK_TIERS(c, "100", "update of layer 0");
  kvc_cache_destroy(c);
}

/* A cache without offloading never moves a layer by itself, and kvc_cache_offload still works on it. */
static void test_not_offloading(void) {
  kvc_cache* c = ot_stepped_cache(KVC_PRESET_DYNAMIC, "ff", 0, 0, KVC_OFFLOAD_DEFAULT, 1, 2, 2, "00");
  REQUIRE(c);
  REQUIRE_OK(kvc_cache_offload(c, 1));
  CHECK_TIERS(c, "01", "offload of layer 1");
  /* updating layer 0 prefetches nothing: the cache does not offload */
  REQUIRE_OK(ot_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 1, 2, 2, 3, NULL));
  CHECK_TIERS(c, "01", "update of layer 0");
  /* updating layer 1 brings it back, and it stays */
  REQUIRE_OK(ot_update(c, 1, KVC_DTYPE_FLOAT32, 1, 1, 1, 2, 2, 4, NULL));
  CHECK_TIERS(c, "00", "update of layer 1");
  kvc_cache_destroy(c);
}

/* Operations other than updates keep every layer in its tier; early initialization allocates on the device. */
static void test_other_operations_keep_tiers(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_DYNAMIC, "fff", 0, 0, 0, KVC_OFFLOAD_ALL);
  REQUIRE(c);
  REQUIRE_OK(ot_update(c, 0, KVC_DTYPE_FLOAT32, 2, 2, 3, 3, 3, 1, NULL));
  CHECK_TIERS(c, "100", "update of layer 0");
  kvc_init_options io = tu_init_options(2, 2, 3, 0, KVC_DTYPE_FLOAT32);
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  CHECK_TIERS(c, "100", "early initialization");
  REQUIRE_OK(ot_update(c, 1, KVC_DTYPE_FLOAT32, 2, 2, 3, 3, 3, 2, NULL)); /* prefetches 2 (there), offloads 1 */
  CHECK_TIERS(c, "110", "update of layer 1");
  REQUIRE_OK(kvc_cache_crop(c, -1));
  CHECK_TIERS(c, "110", "crop");
  REQUIRE_OK(kvc_cache_reorder(c, TU_LIST(1, 0), 2));
  CHECK_TIERS(c, "110", "reorder");
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 2));
  CHECK_TIERS(c, "110", "repeat_interleave");
  REQUIRE_OK(kvc_cache_batch_select_indices(c, TU_LIST(3, 0), 2));
  CHECK_TIERS(c, "110", "select");
  REQUIRE_OK(kvc_cache_reserve(c, 200));
  CHECK_TIERS(c, "110", "reserve");
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_TIERS(c, "110", "reset");
  kvc_kv v = tu_view(c, 1);
  CHECK_EQ_I64(v.key.shape[2], 0);
  /* the next update continues the order: u2 wraps to 0 (fetched), offloads 2 */
  REQUIRE_OK(ot_update(c, 2, KVC_DTYPE_FLOAT32, 2, 2, 1, 3, 3, 3, NULL));
  CHECK_TIERS(c, "011", "update of layer 2");
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_non_sliding_order);
  TU_RUN(test_all_order);
  TU_RUN(test_update_all_order);
  TU_RUN(test_lazy_order);
  TU_RUN(test_lazy_skipped_layers);
  TU_RUN(test_offloaded_static_order);
  TU_RUN(test_offloaded_hybrid_order);
  TU_RUN(test_static_all_order);
  TU_RUN(test_no_offloadable_layer);
  TU_RUN(test_linear_layers_skipped);
  TU_RUN(test_out_of_order_update);
  TU_RUN(test_from_tensors_stays_on_device);
  TU_RUN(test_not_offloading);
  TU_RUN(test_other_operations_keep_tiers);
  return tu_finish();
}
