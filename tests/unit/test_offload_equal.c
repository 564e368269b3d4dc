/*
 * Offloading changes where bytes live, never what a caller sees: the same
 * seeded sequence of operations runs on a cache with offloading and on the
 * same cache without, and every returned view, every stored view and every
 * query (snapshot_equal_contents: lengths, mask sizes, usable lengths,
 * shapes, dtypes, bytes used) must be bit-identical after every operation,
 * errors included. Operations: update (in model order and out of order),
 * update_all, crop, reorder, select, repeat, reset, clone, reserve,
 * activate_past_recording, batch split + stack, early initialization, and
 * explicit offload/prefetch of the offloaded cache's layers. The views an
 * update returned are read again before the next operation: offloading
 * right after the write must not free what they point at.
 */
#include "test_offload_util.h"

#define MAXL 8

typedef struct pair {
  kvc_cache* plain;
  kvc_cache* offl;
  kvc_dtype dt;
  int64_t batch, heads, dk, dv;
  uint32_t layers; /* layers a lazy cache may grow to, or the configured count */
  uint64_t rng;
  uint32_t next_layer;
  /* the last update's returned views (of the offloaded cache) and the bytes they held */
  int nlast;
  kvc_kv last[MAXL];
  unsigned char* last_bytes[MAXL][2];
  size_t last_n[MAXL][2];
  const char* label;
  int op;
} pair;

static uint64_t rnd(pair* p, uint64_t n) {
  p->rng = p->rng * 6364136223846793005ull + 1442695040888963407ull;
  return (p->rng >> 33) % n;
}

static void forget_last(pair* p) {
  for (int i = 0; i < p->nlast; i++)
    for (int w = 0; w < 2; w++) free(p->last_bytes[i][w]);
  p->nlast = 0;
}

/* The views of the last update must still hold what they held when returned. */
static void check_last_views(pair* p) {
  for (int i = 0; i < p->nlast; i++)
    for (int w = 0; w < 2; w++) {
      size_t n = 0;
      unsigned char* now = tu_view_bytes_alloc(w ? &p->last[i].value : &p->last[i].key, &n);
      if (!tu_report(n == p->last_n[i][w] && memcmp(now, p->last_bytes[i][w], n) == 0, __FILE__, __LINE__,
                     "a view returned by the last update still holds its tokens"))
        fprintf(TU_LOG, "    %s, before operation %d\n", p->label, p->op);
      free(now);
    }
}

static void remember(pair* p, const kvc_kv* out, int n) {
  forget_last(p);
  for (int i = 0; i < n; i++) {
    p->last[i] = out[i];
    p->last_bytes[i][0] = tu_view_bytes_alloc(&out[i].key, &p->last_n[i][0]);
    p->last_bytes[i][1] = tu_view_bytes_alloc(&out[i].value, &p->last_n[i][1]);
  }
  p->nlast = n;
}

/* Both calls must agree: both succeed, or both fail with the same code. Returns 1 when both succeeded. */
static int same_outcome(pair* p, kvc_error* a, kvc_error* b, const char* what) {
  kvc_code ca = kvc_error_code(a), cb = kvc_error_code(b);
  kvc_error_destroy(a);
  kvc_error_destroy(b);
  if (!tu_report(ca == cb, __FILE__, __LINE__, "same outcome with and without offloading"))
    fprintf(TU_LOG, "    %s, operation %d (%s): %s without offloading, %s with\n", p->label, p->op, what,
            kvc_code_name(ca), kvc_code_name(cb));
  return ca == KVC_OK && cb == KVC_OK;
}

static void check_same(pair* p, const char* what) {
  tu_snapshot a, b;
  snapshot(p->plain, &a);
  snapshot(p->offl, &b);
  if (!tu_report(snapshot_equal_contents(&a, &b), __FILE__, __LINE__, "snapshot_equal_contents(plain, offloaded)"))
    fprintf(TU_LOG, "    %s, operation %d (%s)\n", p->label, p->op, what);
  snapshot_free(&a);
  snapshot_free(&b);
  kvc_memory_info m = tu_memory(p->offl);
  CHECK_EQ_U64(m.bytes_device + m.bytes_host, m.bytes_reserved);
}

/* The batch the caches hold now (layers may have been selected or repeated). */
static int64_t current_batch(const pair* p) {
  for (uint32_t i = 0; i < kvc_cache_num_layers(p->plain); i++) {
    kvc_layer_info li = tu_info(p->plain, i);
    if (li.is_initialized) return li.batch_size;
  }
  return p->batch;
}

static void op_update(pair* p, uint32_t layer, int64_t n) {
  int64_t b = current_batch(p);
  uint64_t seed = rnd(p, 1u << 30);
  kvc_kv x, y;
  memset(&x, 0, sizeof x);
  memset(&y, 0, sizeof y);
  tu_snapshot before;
  char tiers_before[MAXL + 1];
  snapshot(p->offl, &before);
  ot_tiers(p->offl, tiers_before);
  kvc_error* ea = ot_update(p->plain, layer, p->dt, b, p->heads, n, p->dk, p->dv, seed, &x);
  kvc_error* eb = ot_update(p->offl, layer, p->dt, b, p->heads, n, p->dk, p->dv, seed, &y);
  int failed = eb != NULL;
  if (same_outcome(p, ea, eb, "update")) {
    CHECK_SAME_KV(x, y);
    remember(p, &y, 1);
  } else if (failed) {
    /* a failed update on the offloaded cache changed nothing, its tiers included */
    tu_snapshot after;
    snapshot(p->offl, &after);
    CHECK_SNAPSHOT_EQUAL(&before, &after);
    snapshot_free(&after);
    CHECK_TIERS(p->offl, tiers_before, "a failed update");
  }
  snapshot_free(&before);
}

static void op_update_all(pair* p, uint32_t count, int64_t n) {
  int64_t b = current_batch(p);
  tu_tensor k[MAXL], v[MAXL];
  kvc_tensor kt[MAXL], vt[MAXL];
  for (uint32_t i = 0; i < count; i++) {
    uint64_t seed = rnd(p, 1u << 30);
    ot_random(&k[i], p->dt, b, p->heads, n, p->dk, seed);
    ot_random(&v[i], p->dt, b, p->heads, n, p->dv, seed + 1);
    kt[i] = k[i].t;
    vt[i] = v[i].t;
  }
  kvc_kv x[MAXL], y[MAXL];
  kvc_error* ea = kvc_cache_update_all(p->plain, count, kt, vt, NULL, x);
  kvc_error* eb = kvc_cache_update_all(p->offl, count, kt, vt, NULL, y);
  if (same_outcome(p, ea, eb, "update_all")) {
    for (uint32_t i = 0; i < count; i++) CHECK_SAME_KV(x[i], y[i]);
    remember(p, y, (int)count);
  }
  tu_tensors_free(k, v, count);
}

static void replace(pair* p, kvc_cache* plain, kvc_cache* offl) {
  forget_last(p);
  TU_DESTROY(p->plain, p->offl);
  p->plain = plain;
  p->offl = offl;
}

/* Splits both caches into single rows, checks each pair of splits, and stacks them back. */
static void op_split_stack(pair* p) {
  int64_t b = current_batch(p);
  kvc_cache *sa[8] = {0}, *sb[8] = {0};
  size_t na = 0, nb = 0;
  if (!same_outcome(p, kvc_cache_batch_split(p->plain, b, 1, sa, 8, &na),
                    kvc_cache_batch_split(p->offl, b, 1, sb, 8, &nb), "batch_split"))
    return;
  CHECK_EQ_I64(na, nb);
  for (size_t i = 0; i < na && i < nb; i++) {
    CHECK_CACHES_EQUAL_CONTENTS(sa[i], sb[i]);
  }
  kvc_cache *ra = NULL, *rb = NULL;
  if (same_outcome(p, kvc_cache_from_batch_splits((const kvc_cache* const*)sa, na, &ra),
                   kvc_cache_from_batch_splits((const kvc_cache* const*)sb, nb, &rb), "from_batch_splits"))
    replace(p, ra, rb);
  for (size_t i = 0; i < na; i++) kvc_cache_destroy(sa[i]);
  for (size_t i = 0; i < nb; i++) kvc_cache_destroy(sb[i]);
}

static void one_op(pair* p) {
  uint32_t nl = kvc_cache_num_layers(p->plain);
  uint32_t span = nl > p->layers ? nl : p->layers;
  int64_t b = current_batch(p);
  uint64_t r = rnd(p, 100);
  const char* what = "update";
  /* Right before the next mutating call: the last update's views are still valid here, and end now. */
  check_last_views(p);
  forget_last(p);
  if (r < 45) {
    /* mostly the model's order, layer after layer; now and then a layer out of order */
    uint32_t layer = rnd(p, 8) ? p->next_layer : (uint32_t)rnd(p, span);
    p->next_layer = (layer + 1) % span;
    op_update(p, layer, rnd(p, 6) ? 1 + (int64_t)rnd(p, 2) : 2 + (int64_t)rnd(p, 6));
  } else if (r < 55) {
    what = "update_all";
    op_update_all(p, nl ? nl : p->layers, 1 + (int64_t)rnd(p, 3));
  } else if (r < 61) {
    what = "crop";
    int64_t x = (int64_t)rnd(p, 7) - 4;
    same_outcome(p, kvc_cache_crop(p->plain, x), kvc_cache_crop(p->offl, x), what);
  } else if (r < 67) {
    what = "reorder";
    int64_t idx[8];
    for (int64_t i = 0; i < b; i++) idx[i] = (int64_t)rnd(p, (uint64_t)b);
    same_outcome(p, kvc_cache_reorder(p->plain, idx, (size_t)b), kvc_cache_reorder(p->offl, idx, (size_t)b), what);
  } else if (r < 70) {
    what = "select";
    int64_t idx[8], n = 1 + (int64_t)rnd(p, (uint64_t)b);
    for (int64_t i = 0; i < n; i++) idx[i] = (int64_t)rnd(p, (uint64_t)b);
    same_outcome(p, kvc_cache_batch_select_indices(p->plain, idx, (size_t)n),
                 kvc_cache_batch_select_indices(p->offl, idx, (size_t)n), what);
  } else if (r < 73 && b <= 2) {
    what = "repeat";
    same_outcome(p, kvc_cache_batch_repeat_interleave(p->plain, 2), kvc_cache_batch_repeat_interleave(p->offl, 2),
                 what);
  } else if (r < 78) {
    what = "reset";
    same_outcome(p, kvc_cache_reset(p->plain), kvc_cache_reset(p->offl), what);
  } else if (r < 82) {
    what = "clone";
    kvc_cache *a = NULL, *c = NULL;
    if (same_outcome(p, kvc_cache_clone(p->plain, &a), kvc_cache_clone(p->offl, &c), what)) {
      char t1[MAXL + 1], t2[MAXL + 1];
      ot_tiers(p->offl, t1);
      ot_tiers(c, t2);
      CHECK(strcmp(t1, t2) == 0); /* a deep copy keeps every layer's tier */
      replace(p, a, c);
    }
  } else if (r < 85) {
    what = "reserve";
    int64_t t = (int64_t)rnd(p, 90);
    same_outcome(p, kvc_cache_reserve(p->plain, t), kvc_cache_reserve(p->offl, t), what);
  } else if (r < 87) {
    what = "activate_past_recording";
    same_outcome(p, kvc_cache_activate_past_recording(p->plain), kvc_cache_activate_past_recording(p->offl), what);
  } else if (r < 90) {
    what = "split + stack";
    op_split_stack(p);
  } else if (nl) {
    /* explicit moves change tiers only */
    uint32_t layer = (uint32_t)rnd(p, nl);
    what = rnd(p, 2) ? "offload" : "prefetch";
    CHECK_OK(what[0] == 'o' ? kvc_cache_offload(p->offl, layer) : kvc_cache_prefetch(p->offl, layer));
  }
  check_same(p, what);
}

typedef struct config {
  const char* label;
  kvc_preset plain_preset, offl_preset;
  kvc_offload offload; /* for offl_preset (DEFAULT = the preset's own) */
  const char* types;   /* "" = lazy */
  int64_t window, chunk, max_cache_len;
  kvc_dtype dt;
  int early;           /* early-initialize both caches first */
  uint32_t custom;     /* > 0: a custom cache of these many layers from custom_layers */
} config;

static const kvc_layer_kind custom_kinds[4] = {KVC_LAYER_DYNAMIC, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_DYNAMIC_SLIDING,
                                               KVC_LAYER_STATIC};

static kvc_cache* custom_cache(kvc_offload offload) {
  kvc_layer_options l[4];
  for (int i = 0; i < 4; i++) l[i] = tu_layer(custom_kinds[i], 3, 9);
  return tu_custom_offload_cache(4, l, offload);
}

static void run_config(const config* cf, uint64_t seed, int ops) {
  pair p;
  memset(&p, 0, sizeof p);
  p.label = cf->label;
  p.dt = cf->dt;
  p.batch = 2;
  p.heads = 2;
  p.dk = 3;
  p.dv = 2;
  p.rng = seed;
  if (cf->custom) {
    p.plain = custom_cache(KVC_OFFLOAD_NONE);
    p.offl = custom_cache(cf->offload);
  } else {
    p.plain = ot_cache(cf->plain_preset, cf->types, cf->window, cf->chunk, cf->max_cache_len, KVC_OFFLOAD_DEFAULT);
    p.offl = ot_cache(cf->offl_preset, cf->types, cf->window, cf->chunk, cf->max_cache_len, cf->offload);
  }
  if (!p.plain || !p.offl) {
    TU_DESTROY(p.plain, p.offl);
    return;
  }
  p.layers = kvc_cache_num_layers(p.plain) ? kvc_cache_num_layers(p.plain) : 4;
  if (cf->early) {
    kvc_init_options io = tu_init_options(p.batch, p.heads, p.dk, p.dv, p.dt);
    same_outcome(&p, kvc_cache_early_initialization(p.plain, &io), kvc_cache_early_initialization(p.offl, &io),
                 "early_initialization");
  }
  for (p.op = 1; p.op <= ops; p.op++) one_op(&p);
  check_last_views(&p);
  forget_last(&p);
  TU_DESTROY(p.plain, p.offl);
}

static const config configs[] = {
    {"lazy DynamicCache / OffloadedCache, f32", KVC_PRESET_DYNAMIC, KVC_PRESET_OFFLOADED, KVC_OFFLOAD_DEFAULT, "", 0, 0,
     0, KVC_DTYPE_FLOAT32, 0, 0},
    {"DynamicCache(config) fsfcf, every layer offloaded, f16", KVC_PRESET_DYNAMIC, KVC_PRESET_DYNAMIC, KVC_OFFLOAD_ALL,
     "fsfcf", 3, 4, 0, KVC_DTYPE_FLOAT16, 0, 0},
    {"DynamicCache(config) fsfcf, non-sliding offloaded, f32, early init", KVC_PRESET_DYNAMIC, KVC_PRESET_DYNAMIC,
     KVC_OFFLOAD_NON_SLIDING, "fsfcf", 3, 4, 0, KVC_DTYPE_FLOAT32, 1, 0},
    {"StaticCache fsf / OffloadedStaticCache, bf16", KVC_PRESET_STATIC, KVC_PRESET_OFFLOADED_STATIC,
     KVC_OFFLOAD_DEFAULT, "fsf", 4, 0, 10, KVC_DTYPE_BFLOAT16, 0, 0},
    {"StaticCache fsf, every layer offloaded, f16, early init", KVC_PRESET_STATIC, KVC_PRESET_STATIC, KVC_OFFLOAD_ALL,
     "fsf", 4, 0, 10, KVC_DTYPE_FLOAT16, 1, 0},
    {"HybridChunkedCache cfcf / OffloadedHybridCache, f32", KVC_PRESET_HYBRID_CHUNKED, KVC_PRESET_OFFLOADED_HYBRID,
     KVC_OFFLOAD_DEFAULT, "cfcf", 0, 3, 12, KVC_DTYPE_FLOAT32, 0, 0},
    {"HybridChunkedCache cfcf, every layer offloaded, f16", KVC_PRESET_HYBRID_CHUNKED, KVC_PRESET_HYBRID_CHUNKED,
     KVC_OFFLOAD_ALL, "cfcf", 0, 3, 12, KVC_DTYPE_FLOAT16, 0, 0},
    {"custom d ss ds s, every layer offloaded, f32", KVC_PRESET_CUSTOM, KVC_PRESET_CUSTOM, KVC_OFFLOAD_ALL, "", 0, 0, 0,
     KVC_DTYPE_FLOAT32, 0, 4},
};

static void test_offloaded_equals_plain(void) {
  for (size_t c = 0; c < sizeof configs / sizeof configs[0]; c++)
    for (uint64_t seed = 1; seed <= 3; seed++) run_config(&configs[c], seed * 7919 + c, 250);
}

int main(void) {
  TU_RUN(test_offloaded_equals_plain);
  return tu_finish();
}
