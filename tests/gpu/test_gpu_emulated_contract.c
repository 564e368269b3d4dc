/*
 * tests/gpu/test_gpu_emulated_contract.c: what the core promises a device
 * backend, counted on the emulated device (its exported counters):
 *
 *  - kernel launches per step: an update of one layer is one launch and an
 *    update_all of any number of layers is one launch in the steady state,
 *    and so is a pool's write of one layer (kvc_pool_write_layer),
 *    with nothing allocated or freed (static caches: from the first step,
 *    which is what CUDA graph capture needs); what growth, compaction and
 *    offloading steps cost is measured and bounded;
 *  - device and host-tier bytes reported by kvc_cache_memory are the bytes
 *    the backend holds for the cache;
 *  - after destroy, no buffer of either tier and no execution place is left,
 *    also after failed calls, clones, splits and stacks;
 *  - every operation runs on the stream the cache is bound to
 *    (kvc_cache_set_stream), clones and splits inherit it, and a cache on
 *    device 1 works on device 1 only (the plugin stops the process on any
 *    buffer of another device).
 *
 * The cross-backend test (test_gpu_caches) checks the bytes; this one checks
 * the costs and the bookkeeping, which only the emulated device can count.
 */
#include "backend.h" /* KVC_BACKEND_API_VERSION */
#include "emulated_probe.h"
#include "gpu_pool_util.h"
#include "gpu_test_util.h"

static kvc_emulated_counters now(void) {
  kvc_emulated_counters c;
  emulated_probe_counters(&c);
  return c;
}

/* ----------------------------------------------------------------- inputs */

/* A K/V pair of one layer's update in device memory (random bytes). */
typedef struct dev_kv {
  kvc_tensor k, v;
  int64_t ks[4], vs[4];
  void* kd;
  void* vd;
  int device;
} dev_kv;

static void kv_make(dev_kv* x, int device, int64_t b, int64_t h, int64_t n, int64_t d, kvc_dtype dt) {
  memset(x, 0, sizeof *x);
  x->device = device;
  int64_t shape[4] = {b, h, n, d};
  memcpy(x->ks, shape, sizeof shape);
  memcpy(x->vs, shape, sizeof shape);
  size_t bytes = (size_t)(b * h * (n ? n : 1) * d) * kvc_dtype_size(dt);
  void* host = malloc(bytes);
  gt_fill_random(host, bytes);
  x->kd = drt_alloc(device, bytes);
  x->vd = drt_alloc(device, bytes);
  CHECK(x->kd && x->vd && !drt_upload(device, x->kd, host, bytes, NULL) &&
        !drt_upload(device, x->vd, host, bytes, NULL));
  free(host);
  kvc_tensor t = {NULL, {drt_device_type(), device}, 4, kvc_dtype_to_data_type(dt), NULL, NULL, 0};
  x->k = x->v = t;
  x->k.data = x->kd;
  x->k.shape = x->ks;
  x->v.data = x->vd;
  x->v.shape = x->vs;
}

static void kv_free(dev_kv* x) {
  drt_free(x->device, x->kd);
  drt_free(x->device, x->vd);
}

/* update_all of `layers` layers, every layer given the same input. */
static kvc_error* step_all(kvc_cache* c, uint32_t layers, const dev_kv* x) {
  kvc_tensor keys[64], values[64];
  for (uint32_t i = 0; i < layers && i < 64; i++) {
    keys[i] = x->k;
    values[i] = x->v;
  }
  return kvc_cache_update_all(c, layers, keys, values, NULL, NULL);
}

static kvc_cache* device_cache(kvc_cache_options o, int device) {
  o.device.device_type = drt_device_type();
  o.device.device_id = device;
  kvc_cache* c = NULL;
  CHECK_OK(kvc_cache_create(&o, &c));
  return c;
}

static kvc_cache_options preset(kvc_preset p, const kvc_model_config* cfg, int64_t max_cache_len) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = p;
  o.config = cfg;
  o.max_cache_len = max_cache_len;
  return o;
}

static kvc_model_config config(uint32_t layers) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = layers;
  return cfg;
}

/* Nothing of the backend is held: no buffer in either tier, no place. */
static void check_nothing_held(const char* when) {
  kvc_emulated_counters c = now();
  if (!CHECK_EQ_I64(c.live_device_buffers, 0) || !CHECK_EQ_I64(c.live_host_buffers, 0) ||
      !CHECK_EQ_I64(c.open_places, 0))
    fprintf(stderr, "  %s: %lld device buffers, %lld host-tier buffers, %lld places left\n", when,
            (long long)c.live_device_buffers, (long long)c.live_host_buffers, (long long)c.open_places);
}

/* The device and host-tier bytes the cache reports are the bytes the backend holds (it is the only cache). */
static void check_memory_is_held(const kvc_cache* cache, const char* when) {
  kvc_memory_info m;
  memset(&m, 0, sizeof m);
  m.struct_size = sizeof m;
  if (!CHECK_OK(kvc_cache_memory(cache, &m))) return;
  kvc_emulated_counters c = now();
  if (!CHECK_EQ_I64(m.bytes_device, c.live_device_bytes) || !CHECK_EQ_I64(m.bytes_host, c.live_host_bytes))
    fprintf(stderr, "  %s: the cache reports %llu device and %llu host-tier bytes, the backend holds %lld and %lld\n",
            when, (unsigned long long)m.bytes_device, (unsigned long long)m.bytes_host,
            (long long)c.live_device_bytes, (long long)c.live_host_bytes);
}

/* -------------------------------------------------------------- launches */

/* What a cost test runs on: a cache of `layers` layers of a preset on device
 * 0, room reserved for `reserve` tokens (0: none), and a prefill of n tokens
 * and a one-token step of one shape. */
typedef struct bench {
  kvc_cache* c;
  dev_kv prefill, token;
} bench;

/* 0, with nothing made, when the cache cannot be created (the caller's REQUIRE counts it). */
static int bench_open(bench* x, kvc_preset p, uint32_t layers, int64_t max_cache_len, int64_t reserve, int64_t b,
                      int64_t h, int64_t n, int64_t d, kvc_dtype dt) {
  kvc_model_config cfg = config(layers);
  x->c = device_cache(preset(p, &cfg, max_cache_len), 0);
  if (x->c == NULL) return 0;
  if (reserve) CHECK_OK(kvc_cache_reserve(x->c, reserve));
  kv_make(&x->prefill, 0, b, h, n, d, dt);
  kv_make(&x->token, 0, b, h, 1, d, dt);
  return 1;
}

/* Destroys the cache and the inputs, then checks that the backend holds nothing `when`. */
static void bench_close(bench* x, const char* when) {
  kvc_cache_destroy(x->c);
  kv_free(&x->prefill);
  kv_free(&x->token);
  check_nothing_held(when);
}

/* Counts since `before`: launches, and whether anything was allocated or freed. */
typedef struct cost {
  uint64_t launches, allocations, frees, copies;
} cost;

static cost since(const kvc_emulated_counters* before) {
  kvc_emulated_counters c = now();
  cost k = {c.launches - before->launches, c.allocations - before->allocations, c.frees - before->frees,
            c.batch_copies - before->batch_copies};
  return k;
}

/* The steady decode step of a dynamic cache with reserved room: one launch per update and per update_all. */
static void test_launches_dynamic(void) {
  bench x;
  REQUIRE(bench_open(&x, KVC_PRESET_DYNAMIC, 4, 0, 64, 2, 2, 8, 16, KVC_DTYPE_FLOAT16));
  kvc_emulated_counters before = now();
  CHECK_OK(step_all(x.c, 4, &x.prefill));
  cost k = since(&before);
  printf("  prefill of 4 reserved dynamic layers: %llu launch(es), %llu allocation(s)\n",
         (unsigned long long)k.launches, (unsigned long long)k.allocations);
  CHECK_EQ_U64(k.launches, 1); /* the stores are zeroed when allocated: only the writes, batched */
  for (int s = 0; s < 10; s++) {
    before = now();
    CHECK_OK(step_all(x.c, 4, &x.token));
    k = since(&before);
    CHECK_EQ_U64(k.launches, 1);
    CHECK_EQ_U64(k.copies, 8); /* K and V of 4 layers in that one launch */
    CHECK_EQ_U64(k.allocations, 0);
    CHECK_EQ_U64(k.frees, 0);
    for (uint32_t l = 0; l < 4; l++) {
      before = now();
      CHECK_OK(kvc_cache_update(x.c, l, &x.token.k, &x.token.v, NULL, NULL));
      k = since(&before);
      CHECK_EQ_U64(k.launches, 1);
      CHECK_EQ_U64(k.allocations + k.frees, 0);
    }
  }
  check_memory_is_held(x.c, "dynamic cache");
  bench_close(&x, "after the dynamic cache");
}

/* A Llama-3-8B-like step: 32 layers, 8 KV heads, head dim 128, bfloat16. */
static void test_launches_llama_step(void) {
  bench x;
  REQUIRE(bench_open(&x, KVC_PRESET_DYNAMIC, 32, 0, 48, 1, 8, 16, 128, KVC_DTYPE_BFLOAT16));
  CHECK_OK(step_all(x.c, 32, &x.prefill));
  for (int s = 0; s < 8; s++) {
    kvc_emulated_counters before = now();
    CHECK_OK(step_all(x.c, 32, &x.token));
    cost k = since(&before);
    CHECK_EQ_U64(k.launches, 1);
    CHECK_EQ_U64(k.copies, 64);
    CHECK_EQ_U64(k.allocations + k.frees, 0);
  }
  bench_close(&x, "after the 32-layer cache");
}

/* A device pool's per-layer write: one launch per call (K and V together), nothing allocated, every step. */
static void test_launches_pool_write_layer(void) {
  kvc_pool* p = NULL;
  REQUIRE_OK(gp_create(KVC_POOL_LAYOUT_NHD, &p));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  int64_t ks[3] = {1, 2, 4}, vs[3] = {1, 2, 3};
  float hk[8] = {1, 2, 3, 4, 5, 6, 7, 8}, hv[6] = {1, 2, 3, 4, 5, 6};
  kvc_tensor k = dtensor(ks, 3, hk, 8), v = dtensor(vs, 3, hv, 6);
  REQUIRE(k.data && v.data);
  int64_t slots[2];
  for (int32_t t = 0; t < 6; t++) {
    REQUIRE_OK(kvc_pool_reserve(s, &t, 1, slots));
    for (uint32_t layer = 0; layer < 2; layer++) {
      kvc_emulated_counters before = now();
      CHECK_OK(kvc_pool_write_layer(p, layer, &k, &v, slots, 1));
      cost c = since(&before);
      CHECK_EQ_U64(c.launches, 1);
      CHECK_EQ_U64(c.allocations + c.frees, 0);
    }
    REQUIRE_OK(kvc_pool_commit(s));
  }
  drt_free(0, k.data);
  drt_free(0, v.data);
  kvc_pool_destroy(p);
  check_nothing_held("after the pool");
}

/* Without reserve the stores double: steps in between cost one launch; a growth step costs the copy of each
   layer's history (K and V) besides the batched write. */
static void test_launches_growth(void) {
  kvc_cache* c = device_cache(preset(KVC_PRESET_DYNAMIC, NULL, 0), 0);
  REQUIRE(c != NULL);
  dev_kv token;
  kv_make(&token, 0, 1, 2, 1, 8, KVC_DTYPE_FLOAT32);
  uint64_t growth_steps = 0, max_growth = 0;
  for (int s = 0; s < 300; s++) {
    kvc_emulated_counters before = now();
    CHECK_OK(step_all(c, 3, &token));
    cost k = since(&before);
    if (s > 0 && k.allocations) {
      growth_steps++;
      if (k.launches > max_growth) max_growth = k.launches;
      CHECK(k.launches <= 1 + 2 * 3); /* one history copy per K and V of each layer, plus the write */
    } else if (s > 0) {
      CHECK_EQ_U64(k.launches, 1);
    }
  }
  printf("  300 decode steps of 3 growing dynamic layers: %llu growth steps, at most %llu launches each\n",
         (unsigned long long)growth_steps, (unsigned long long)max_growth);
  CHECK(growth_steps > 0 && growth_steps <= 12); /* geometric growth */
  kvc_cache_destroy(c);
  kv_free(&token);
  check_nothing_held("after the growing cache");
}

/* Static caches: nothing allocated, freed or synchronised by an update, from the first step after early
   initialization; one launch per update_all, prefill included. */
static void test_launches_static(void) {
  bench x;
  REQUIRE(bench_open(&x, KVC_PRESET_STATIC, 4, 32, 0, 2, 2, 5, 16, KVC_DTYPE_BFLOAT16));
  kvc_init_options init = tu_init_options(2, 2, 16, 0, KVC_DTYPE_BFLOAT16);
  CHECK_OK(kvc_cache_early_initialization(x.c, &init));
  kvc_emulated_counters before = now();
  CHECK_OK(step_all(x.c, 4, &x.prefill));
  cost k = since(&before);
  CHECK_EQ_U64(k.launches, 1);
  CHECK_EQ_U64(k.allocations + k.frees, 0);
  for (int s = 0; s < 12; s++) {
    before = now();
    CHECK_OK(step_all(x.c, 4, &x.token));
    k = since(&before);
    CHECK_EQ_U64(k.launches, 1);
    CHECK_EQ_U64(k.allocations + k.frees, 0);
  }
  /* cache_position writes (transformers 4.57): consecutive positions are one copy each, batched. */
  kvc_update_options u = KVC_UPDATE_OPTIONS_INIT;
  const int64_t pos[1] = {20};
  u.cache_position = pos;
  u.cache_position_length = 1;
  before = now();
  CHECK_OK(kvc_cache_update(x.c, 0, &x.token.k, &x.token.v, &u, NULL));
  k = since(&before);
  CHECK_EQ_U64(k.launches, 1);
  CHECK_EQ_U64(k.allocations + k.frees, 0);
  check_memory_is_held(x.c, "static cache");
  bench_close(&x, "after the static cache");
}

/*
 * Sliding layers keep a window in a store of more slots and compact once per
 * (slots - kept) tokens: a steady step is one launch. A compaction step also
 * moves each compacting layer's kept K and V (one copy_4d each) and, for the
 * static kinds, zeroes the slots after them (one fill_zero_4d each): those
 * run when issued, outside the step's batch. Measured, printed and bounded by
 * `per_layer` launches per layer.
 */
static void sliding_costs(kvc_cache* c, uint32_t layers, const char* name, int steps, uint64_t per_layer) {
  dev_kv token;
  kv_make(&token, 0, 1, 2, 1, 8, KVC_DTYPE_FLOAT16);
  uint64_t one = 0, more = 0, total = 0;
  cost worst = {0, 0, 0, 0};
  kvc_emulated_counters worst_before, worst_after;
  memset(&worst_before, 0, sizeof worst_before);
  memset(&worst_after, 0, sizeof worst_after);
  for (int s = 0; s < steps; s++) {
    kvc_emulated_counters before = now();
    CHECK_OK(step_all(c, layers, &token));
    cost k = since(&before);
    if (s < 8) continue; /* filling the window */
    CHECK_EQ_U64(k.allocations + k.frees, 0);
    total += k.launches;
    if (k.launches == 1)
      one++;
    else
      more++;
    if (k.launches > worst.launches) {
      worst = k;
      worst_before = before;
      worst_after = now();
    }
    CHECK(k.launches <= 1 + per_layer * layers);
  }
  printf("  %s, %u layers: %llu one-launch steps, %llu compaction steps of at most %llu launches "
         "(%llu copy_4d_batch, %llu copy_4d, %llu fill_zero_4d), %.2f launches per step on average\n",
         name, layers, (unsigned long long)one, (unsigned long long)more, (unsigned long long)worst.launches,
         (unsigned long long)(worst_after.batch_calls - worst_before.batch_calls),
         (unsigned long long)(worst_after.copy_4d_calls - worst_before.copy_4d_calls),
         (unsigned long long)(worst_after.fill_zero_calls - worst_before.fill_zero_calls),
         (double)total / (double)(one + more));
  CHECK(more > 0);      /* the windows did move */
  CHECK(one > 2 * more); /* compaction is the exception, not the rule */
  kv_free(&token);
}

static void test_launches_sliding(void) {
  kvc_model_config cfg = config(4);
  cfg.sliding_window = 4;
  kvc_cache* c = device_cache(preset(KVC_PRESET_DYNAMIC, &cfg, 0), 0); /* every layer dynamic sliding */
  REQUIRE(c != NULL);
  sliding_costs(c, 4, "dynamic sliding window 4", 80, 2);
  kvc_cache_destroy(c);
  c = device_cache(preset(KVC_PRESET_SLIDING_WINDOW, &cfg, 32), 0); /* static sliding */
  REQUIRE(c != NULL);
  sliding_costs(c, 4, "static sliding window 4", 80, 4);
  kvc_cache_destroy(c);
  check_nothing_held("after the sliding caches");
}

/* Offloading: what a layer's step costs in the forward-pass order, and the bytes of both tiers. */
static void test_offload_costs_and_tiers(void) {
  bench x;
  REQUIRE(bench_open(&x, KVC_PRESET_OFFLOADED, 4, 0, 40, 1, 2, 6, 16, KVC_DTYPE_FLOAT16));
  for (uint32_t l = 0; l < 4; l++) CHECK_OK(kvc_cache_update(x.c, l, &x.prefill.k, &x.prefill.v, NULL, NULL));
  check_memory_is_held(x.c, "offloaded cache after prefill");
  kvc_emulated_counters before = now();
  for (int s = 0; s < 5; s++)
    for (uint32_t l = 0; l < 4; l++) CHECK_OK(kvc_cache_update(x.c, l, &x.token.k, &x.token.v, NULL, NULL));
  kvc_emulated_counters after = now();
  double per_layer = (double)(after.launches - before.launches) / 20.0;
  printf("  offloaded layer step: %.2f launches (%.2f tier copies, %.2f tier waits) per layer update\n", per_layer,
         (double)(after.tier_copies - before.tier_copies) / 20.0,
         (double)(after.tier_waits - before.tier_waits) / 20.0);
  /* A prefetch and an offload of K and V, and the write: no more. */
  CHECK(after.launches - before.launches <= 20 * 5);
  CHECK(after.tier_copies - before.tier_copies >= 20 * 2);
  check_memory_is_held(x.c, "offloaded cache while decoding");
  CHECK_OK(kvc_cache_offload(x.c, 0));
  CHECK_OK(kvc_cache_prefetch(x.c, 2));
  check_memory_is_held(x.c, "offloaded cache after an explicit offload and prefetch");
  bench_close(&x, "after the offloaded cache");
}

/* ------------------------------------------------------------------ leaks */

/* Every kind and operation, failed calls included; afterwards nothing is held. */
static void test_no_leaks(void) {
  static const kvc_preset presets[] = {KVC_PRESET_DYNAMIC,        KVC_PRESET_STATIC,
                                       KVC_PRESET_SLIDING_WINDOW, KVC_PRESET_HYBRID,
                                       KVC_PRESET_HYBRID_CHUNKED, KVC_PRESET_OFFLOADED,
                                       KVC_PRESET_OFFLOADED_STATIC, KVC_PRESET_OFFLOADED_HYBRID,
                                       KVC_PRESET_SINK};
  dev_kv a, b, wrong;
  kv_make(&a, 0, 2, 2, 5, 8, KVC_DTYPE_FLOAT16);
  kv_make(&b, 0, 2, 2, 1, 8, KVC_DTYPE_FLOAT16);
  kv_make(&wrong, 0, 2, 3, 1, 8, KVC_DTYPE_FLOAT16);
  for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
    kvc_model_config cfg = config(3);
    cfg.sliding_window = 3;
    cfg.attention_chunk_size = 3;
    kvc_cache_options o = preset(presets[p], &cfg, 12);
    o.window_length = 4;
    o.num_sink_tokens = 1;
    kvc_cache* c = device_cache(o, 0);
    if (!c) continue;
    CHECK_OK(step_all(c, 3, &a));
    for (int s = 0; s < 9; s++) kvc_error_destroy(step_all(c, 3, &b)); /* static ones overflow: refused */
    CHECK_FAILS(kvc_cache_update(c, 1, &wrong.k, &wrong.v, NULL, NULL));
    const int64_t beams[2] = {1, 0};
    CHECK_OK(kvc_cache_reorder(c, beams, 2));
    kvc_error_destroy(kvc_cache_crop(c, -1));
    kvc_error_destroy(kvc_cache_batch_repeat_interleave(c, 2));
    const int64_t keep[2] = {1, 0};
    kvc_error_destroy(kvc_cache_batch_select_indices(c, keep, 2));
    kvc_error_destroy(kvc_cache_offload(c, 0));
    kvc_error_destroy(kvc_cache_prefetch(c, 0));
    kvc_error_destroy(kvc_cache_reserve(c, 30));
    int64_t batch = 0;
    kvc_layer_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    if (!kvc_cache_layer_info(c, 0, &info)) batch = info.batch_size;
    kvc_cache* parts[8];
    size_t n = 0;
    if (batch > 0 && !kvc_cache_batch_split(c, batch, 1, parts, 8, &n)) {
      kvc_cache* whole = NULL;
      CHECK_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, n, &whole));
      kvc_cache_destroy(whole);
      for (size_t i = 0; i < n; i++) kvc_cache_destroy(parts[i]);
    }
    kvc_cache* copy = NULL;
    CHECK_OK(kvc_cache_clone(c, &copy));
    kvc_error_destroy(step_all(copy, 3, &b));
    kvc_cache_destroy(copy);
    CHECK_OK(kvc_cache_reset(c));
    kvc_cache_destroy(c);
    char when[64];
    snprintf(when, sizeof when, "after preset %d", (int)presets[p]);
    check_nothing_held(when);
  }
  /* Linear states and a cache refused at its first update (quantized on a device). */
  kvc_model_config cfg = config(2);
  cfg.conv_kernel = 4;
  kvc_cache* c = device_cache(preset(KVC_PRESET_MAMBA, &cfg, 0), 0);
  if (c) {
    int64_t xs[3] = {2, 6, 3}, ss[3] = {2, 6, 4};
    void* d = drt_alloc(0, 2 * 6 * 4 * 2);
    kvc_tensor x = {d, {drt_device_type(), 0}, 3, kvc_dtype_to_data_type(KVC_DTYPE_FLOAT16), xs, NULL, 0};
    kvc_tensor st = {d, {drt_device_type(), 0}, 3, kvc_dtype_to_data_type(KVC_DTYPE_FLOAT16), ss, NULL, 0};
    for (int s = 0; s < 12; s++) CHECK_OK(kvc_cache_update_conv_state(c, s % 2, &x, NULL, NULL));
    CHECK_OK(kvc_cache_update_recurrent_state(c, 0, 0, &st, NULL));
    CHECK_OK(kvc_cache_batch_repeat_interleave(c, 2));
    kvc_cache_destroy(c);
    drt_free(0, d);
  }
  c = device_cache(preset(KVC_PRESET_QUANTIZED, &cfg, 0), 0);
  if (c) CHECK_FAILS(kvc_cache_update(c, 0, &a.k, &a.v, NULL, NULL));
  kvc_cache_destroy(c);
  kv_free(&a);
  kv_free(&b);
  kv_free(&wrong);
  check_nothing_held("after every preset");
}

/* --------------------------------------------------------------- streams */

static void ops_on(kvc_cache* c, const dev_kv* a, const dev_kv* b) {
  CHECK_OK(step_all(c, 2, a));
  CHECK_OK(kvc_cache_update(c, 1, &b->k, &b->v, NULL, NULL));
  const int64_t beams[2] = {1, 1};
  CHECK_OK(kvc_cache_reorder(c, beams, 2));
  CHECK_OK(kvc_cache_crop(c, -1));
  CHECK_OK(kvc_cache_reserve(c, 50));
  CHECK_OK(kvc_cache_offload(c, 0));
  CHECK_OK(kvc_cache_prefetch(c, 0));
}

/* Every operation of a bound cache runs on its stream; clones and splits inherit the stream. */
static void test_bound_stream(void) {
  void* s1 = drt_stream_create(0);
  void* s2 = drt_stream_create(0);
  REQUIRE(s1 && s2);
  dev_kv a, b;
  kv_make(&a, 0, 2, 2, 3, 8, KVC_DTYPE_BFLOAT16);
  kv_make(&b, 0, 2, 2, 1, 8, KVC_DTYPE_BFLOAT16);
  kvc_model_config cfg = config(2);
  kvc_cache* c = device_cache(preset(KVC_PRESET_DYNAMIC, &cfg, 0), 0);
  REQUIRE(c != NULL);
  CHECK_EQ_PTR(kvc_cache_stream(c), NULL);
  kvc_emulated_counters before = now();
  CHECK_OK(kvc_cache_set_stream(c, s1));
  CHECK_EQ_PTR(kvc_cache_stream(c), s1);
  CHECK_EQ_U64(now().stream_changes - before.stream_changes, 1);
  emulated_probe_expect_stream(1, s1);
  ops_on(c, &a, &b);
  CHECK_EQ_PTR(now().last_stream, s1);
  kvc_cache* copy = NULL;
  CHECK_OK(kvc_cache_clone(c, &copy));
  CHECK_EQ_PTR(kvc_cache_stream(copy), s1);
  ops_on(copy, &a, &b);
  kvc_cache* parts[2];
  size_t n = 0;
  CHECK_OK(kvc_cache_batch_split(c, 2, 1, parts, 2, &n));
  REQUIRE_EQ_I64(n, 2);
  CHECK_EQ_PTR(kvc_cache_stream(parts[0]), s1);
  kvc_cache* whole = NULL;
  CHECK_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &whole));
  CHECK_EQ_PTR(kvc_cache_stream(whole), s1);
  kvc_cache_destroy(whole);
  CHECK_EQ_U64(now().stream_mismatches, before.stream_mismatches);

  /* Moved to another stream: the work after it runs there. */
  CHECK_OK(kvc_cache_set_stream(copy, s2));
  emulated_probe_expect_stream(1, s2);
  ops_on(copy, &b, &b);
  CHECK_EQ_PTR(now().last_stream, s2);
  kvc_cache_destroy(copy);
  CHECK_EQ_U64(now().stream_mismatches, before.stream_mismatches);
  /* Splits bound to different streams cannot be stacked (their work would be unordered). */
  emulated_probe_expect_stream(0, NULL);
  CHECK_OK(kvc_cache_set_stream(parts[1], s2));
  CHECK_FAILS(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &whole));
  kvc_cache_destroy(parts[0]);
  kvc_cache_destroy(parts[1]);

  /* Back to the default stream. */
  CHECK_OK(kvc_cache_set_stream(c, NULL));
  emulated_probe_expect_stream(1, NULL);
  ops_on(c, &b, &b);
  kvc_cache_destroy(c);
  CHECK_EQ_U64(now().stream_mismatches, before.stream_mismatches);
  emulated_probe_expect_stream(0, NULL);
  kv_free(&a);
  kv_free(&b);
  drt_stream_destroy(0, s1);
  drt_stream_destroy(0, s2);
  check_nothing_held("after the stream tests");
}

/* A cache on device 1 does all its work there (the plugin refuses memory of another device). */
static void test_second_device(void) {
  if (drt_device_count() < 2) {
    printf("  test_second_device: SKIPPED: one emulated device (set %s=2)\n", KVC_EMULATED_DEVICES_ENV);
    return;
  }
  dev_kv a;
  kv_make(&a, 1, 1, 2, 2, 8, KVC_DTYPE_FLOAT32);
  kvc_model_config cfg = config(2);
  kvc_cache* c = device_cache(preset(KVC_PRESET_OFFLOADED, &cfg, 0), 1);
  REQUIRE(c != NULL);
  for (int s = 0; s < 4; s++) CHECK_OK(step_all(c, 2, &a));
  CHECK_EQ_I64(now().last_device_id, 1);
  kvc_cache* copy = NULL;
  CHECK_OK(kvc_cache_clone(c, &copy));
  CHECK_OK(step_all(copy, 2, &a));
  CHECK_EQ_I64(now().last_device_id, 1);
  kvc_cache_destroy(copy);
  kvc_cache_destroy(c);
  kv_free(&a);
  /* A device id beyond the devices: NO_DEVICE, nothing opened. */
  kvc_cache_options o = preset(KVC_PRESET_DYNAMIC, NULL, 0);
  o.device.device_type = drt_device_type();
  o.device.device_id = drt_device_count();
  kvc_cache* none = NULL;
  CHECK_ERR(kvc_cache_create(&o, &none), KVC_ERROR_NO_DEVICE);
  check_nothing_held("after the second device");
}

/* ----------------------------------------- a machine the core cannot use */

/* Asking for the device gives NO_DEVICE with a message containing `reason`; CPU caches work as ever. */
static void check_device_refused(const char* reason) {
  kvc_cache_options o = preset(KVC_PRESET_DYNAMIC, NULL, 0);
  o.device.device_type = drt_device_type();
  kvc_cache* c = NULL;
  kvc_error* e = kvc_cache_create(&o, &c);
  CHECK(c == NULL);
  if (CHECK(e != NULL)) {
    CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_NO_DEVICE);
    if (!CHECK(strstr(kvc_error_message(e), reason) != NULL))
      fprintf(stderr, "  the message does not say \"%s\": %s\n", reason, kvc_error_message(e));
    printf("  kvc_cache_create on the device: %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
  }
  kvc_cache* cpu = NULL;
  CHECK_OK(kvc_cache_create(NULL, &cpu));
  kvc_cache_destroy(cpu);
}

/* KVC_EMULATED_DEVICES=0: the plugin loads and finds nothing, as the real one on a machine without a GPU. */
static void test_no_device(void) { check_device_refused("found no device"); }

/* KVC_EMULATED_API_VERSION=<other>: a plugin of another release is refused, naming both versions. */
static void test_other_release_refused(void) {
  char both[96];
  snprintf(both, sizeof both, "speaks backend API version %u but this core needs version %u",
           (unsigned)emulated_probe_api_version(), (unsigned)KVC_BACKEND_API_VERSION);
  check_device_refused(both);
}

int main(void) {
  char why[600] = "";
  if (emulated_probe_open(why, sizeof why)) {
    printf("FAILED: %s\n", why);
    return 1;
  }
  /* The two environments under which the core must refuse the plugin (CTest runs this program in both). */
  if (emulated_probe_api_version() != KVC_BACKEND_API_VERSION) {
    TU_RUN(test_other_release_refused);
    check_nothing_held("after the refusal");
    return tu_finish();
  }
  if (emulated_probe_device_count() == 0) {
    TU_RUN(test_no_device);
    check_nothing_held("after the refusal");
    return tu_finish();
  }
  gt_open_or_skip("test_gpu_emulated_contract");
  check_nothing_held("at start");
  TU_RUN(test_launches_dynamic);
  TU_RUN(test_launches_llama_step);
  TU_RUN(test_launches_pool_write_layer);
  TU_RUN(test_launches_growth);
  TU_RUN(test_launches_static);
  TU_RUN(test_launches_sliding);
  TU_RUN(test_offload_costs_and_tiers);
  TU_RUN(test_no_leaks);
  TU_RUN(test_bound_stream);
  TU_RUN(test_second_device);
  return tu_finish();
}
