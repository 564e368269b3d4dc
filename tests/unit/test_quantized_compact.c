/*
 * test_quantized_compact.c: KVC_QUANT_MODE_COMPACT. Its updates return
 * exactly what incremental mode's return for the same inputs (the same
 * tokens are quantized the same way; only where the history is kept
 * differs), through decode steps, update_all, batch operations, crop into a
 * quantized block, clone and reset; it holds less memory than a plain
 * cache, and none more per step once warm beyond the codes.
 */
#include "test_errors.h"
#include "test_quantized.h"

#define F32 KVC_DTYPE_FLOAT32
#define BF16 KVC_DTYPE_BFLOAT16

enum { B = 3, H = 2, D = 8, LAYERS = 2 };

static const tq_setting SETTINGS[] = {
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_COMPACT, 4, 0, 0, 4, 3},   /* per token */
    {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_COMPACT, 2, -1, 0, 4, 2},  /* per-channel keys: blocks of 4 tokens */
    {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_COMPACT, 3, 1, 0, 4, 0},      /* no residual, per-channel values */
    {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_COMPACT, 8, 0, 0, 2, 5},      /* per-channel both */
};
#define NSETTINGS (sizeof SETTINGS / sizeof SETTINGS[0])

/* An incremental cache and a compact one with the same setting. */
typedef struct pair {
  kvc_cache* inc;
  kvc_cache* cmp;
} pair;

static int pair_make(pair* p, const tq_setting* s) {
  tq_setting inc = *s;
  inc.mode = KVC_QUANT_MODE_INCREMENTAL;
  p->inc = tq_cache(&inc, LAYERS);
  p->cmp = tq_cache(s, LAYERS);
  return p->inc && p->cmp;
}

static void pair_free(pair* p) {
  TU_DESTROY(p->inc, p->cmp);
}

static int kv_equal(const kvc_kv* a, const kvc_kv* b) {
  tq_ref r;
  memset(&r, 0, sizeof r);
  tq_ref_from_kv(&r, a);
  int ok = tq_equal(b, &r, 0);
  tq_ref_free(&r);
  return ok;
}

/* One update_all of n tokens in both caches; every layer's returns agree bit for bit. */
static void step_both(pair* p, int64_t batch, int64_t n, tq_rng* rng, kvc_dtype dt) {
  tu_tensor k[LAYERS], v[LAYERS];
  kvc_tensor kt[LAYERS], vt[LAYERS];
  for (int i = 0; i < LAYERS; i++) {
    tq_normal_tensor(&k[i], dt, batch, H, n, D, rng, 1.0f, NULL);
    tq_normal_tensor(&v[i], dt, batch, H, n, D, rng, 1.0f, NULL);
    kt[i] = k[i].t;
    vt[i] = v[i].t;
  }
  kvc_kv a[LAYERS], b[LAYERS];
  if (CHECK_OK(kvc_cache_update_all(p->inc, LAYERS, kt, vt, NULL, a)) &&
      CHECK_OK(kvc_cache_update_all(p->cmp, LAYERS, kt, vt, NULL, b))) {
    /* Every layer's view of the compact call is still valid after the call's later layers were updated. */
    for (int i = 0; i < LAYERS; i++) CHECK(kv_equal(&a[i], &b[i]));
    for (int i = 0; i < LAYERS; i++) CHECK_EQ_I64(tq_quantized(p->cmp, i), tq_quantized(p->inc, i));
    int64_t sa = 0, sb = 0;
    CHECK_OK(kvc_cache_seq_length(p->inc, 0, &sa));
    CHECK_OK(kvc_cache_seq_length(p->cmp, 0, &sb));
    CHECK_EQ_I64(sb, sa);
  }
  tu_tensors_free(k, v, LAYERS);
}

static void test_same_returns_as_incremental(void) {
  for (size_t i = 0; i < NSETTINGS; i++) {
    pair p;
    tq_rng rng = {0x1234567u + i};
    if (!pair_make(&p, &SETTINGS[i])) {
      pair_free(&p);
      continue;
    }
    step_both(&p, B, 9, &rng, F32);
    for (int s = 0; s < 23; s++) step_both(&p, B, 1, &rng, F32);
    step_both(&p, B, 6, &rng, F32); /* a chunk crossing several blocks */
    CHECK(tq_quantized(p.cmp, 0) > 0);

    int64_t beams[B] = {2, 0, 0};
    CHECK_OK(kvc_cache_reorder(p.inc, beams, B));
    CHECK_OK(kvc_cache_reorder(p.cmp, beams, B));
    step_both(&p, B, 1, &rng, F32);
    CHECK_OK(kvc_cache_batch_repeat_interleave(p.inc, 2));
    CHECK_OK(kvc_cache_batch_repeat_interleave(p.cmp, 2));
    step_both(&p, 2 * B, 1, &rng, F32);
    int64_t keep[2] = {5, 1};
    CHECK_OK(kvc_cache_batch_select_indices(p.inc, keep, 2));
    CHECK_OK(kvc_cache_batch_select_indices(p.cmp, keep, 2));
    step_both(&p, 2, 1, &rng, F32);

    /* Crop into the middle of a quantized block: its kept tokens return to the residual. */
    int64_t q = tq_quantized(p.cmp, 0), cut = q - 2 > 0 ? q - 2 : 1;
    CHECK_OK(kvc_cache_crop(p.inc, cut));
    CHECK_OK(kvc_cache_crop(p.cmp, cut));
    CHECK_EQ_I64(tq_quantized(p.cmp, 0), tq_quantized(p.inc, 0));
    int64_t len = 0;
    CHECK_OK(kvc_cache_seq_length(p.cmp, 0, &len));
    CHECK_EQ_I64(len, cut);
    for (int s = 0; s < 7; s++) step_both(&p, 2, 1, &rng, F32);

    /* A clone continues exactly as its original does. */
    kvc_cache *ci = NULL, *cc = NULL;
    CHECK_OK(kvc_cache_clone(p.inc, &ci));
    CHECK_OK(kvc_cache_clone(p.cmp, &cc));
    pair_free(&p);
    p.inc = ci;
    p.cmp = cc;
    if (ci && cc) {
      for (int s = 0; s < 5; s++) step_both(&p, 2, 1, &rng, F32);
      CHECK_OK(kvc_cache_crop(p.inc, 3));
      CHECK_OK(kvc_cache_crop(p.cmp, 3));
      step_both(&p, 2, 4, &rng, F32);
      CHECK_OK(kvc_cache_reset(p.inc));
      CHECK_OK(kvc_cache_reset(p.cmp));
      step_both(&p, 2, 11, &rng, F32);
      step_both(&p, 2, 1, &rng, F32);
    }
    pair_free(&p);
  }
}

/* The layer view of a compact layer is the residual: the last tokens of what the update returned. */
static void test_layer_view_is_the_residual(void) {
  tq_rng rng = {99};
  kvc_cache* c = tq_cache(&SETTINGS[0], 1);
  if (!c) return;
  kvc_kv out;
  REQUIRE_OK(tq_update(c, 0, F32, B, H, 20, D, D, &rng, NULL, NULL, &out));
  tq_ref r;
  memset(&r, 0, sizeof r);
  tq_ref_from_kv(&r, &out);
  int64_t q = tq_quantized(c, 0);
  CHECK_EQ_I64(q, 17);
  for (int w = 0; w < 2; w++) { /* keep tokens q.. of the reference */
    float* x = w ? r.v : r.k;
    for (int64_t i = 0; i < r.b * r.h; i++) memmove(x + i * (r.s - q) * D, x + (i * r.s + q) * D, sizeof(float) * (size_t)((r.s - q) * D));
  }
  r.s -= q;
  kvc_kv view = tu_view(c, 0);
  CHECK(tq_equal(&view, &r, 0));
  tq_ref_free(&r);
  kvc_cache_destroy(c);
}

enum { MH = 2, MD = 128, MLAYERS = 32 };

/* Feeds every layer `n` bf16 tokens of batch 1 (one layer at a time, as a model does), then `steps` steps. */
static kvc_memory_info grow(kvc_cache* c, int64_t n, int steps, tq_rng* rng) {
  kvc_memory_info m;
  memset(&m, 0, sizeof m);
  for (int s = 0; s < (n ? 1 : 0) + steps; s++)
    for (uint32_t i = 0; i < MLAYERS; i++)
      if (!CHECK_OK(tq_update(c, i, BF16, 1, MH, s == 0 && n ? n : 1, MD, MD, rng, NULL, NULL, NULL))) return m;
  return tu_memory(c);
}

static void test_memory(void) {
  tq_rng rng = {7};
  tq_setting s = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_COMPACT, 4, 0, 0, 64, 128};
  kvc_cache* c = tq_cache(&s, MLAYERS);
  kvc_cache* plain = NULL;
  kvc_cache_options o;
  kvc_cache_options_init(&o);
  CHECK_OK(kvc_cache_create(&o, &plain)); /* a lazy dynamic cache */
  if (!c || !plain) {
    TU_DESTROY(c, plain);
    return;
  }
  kvc_memory_info m = grow(c, 1024, 0, &rng), d = grow(plain, 1024, 0, &rng);
  /* Per token and tensor: MH heads of MD/64 groups, each 2 bf16 parameters and 32 bytes of codes. */
  const uint64_t token_codes = 2ull * MH * (MD / 64) * (2 * 2 + 32);
  const uint64_t codes = MLAYERS * (1024ull - 128) * token_codes, copy = 1ull * MH * 1024 * 2 * MD * 2;
  const uint64_t residual = MLAYERS * (128ull + 1 + 32) * MH * 2 * MD * 2; /* the store after the prefill */
  CHECK_EQ_U64(m.bytes_quantized, codes);
  /* codes + scales + residual + one layer's working copy (dequantizing needs no memory of its own) */
  CHECK_EQ_U64(m.bytes_reserved, codes + residual + copy);
  fprintf(TU_LOG, "  compact 4-bit, %d layers, 1024 tokens: %llu B reserved, bf16 dynamic %llu B (%.3fx)\n", MLAYERS,
          (unsigned long long)m.bytes_reserved, (unsigned long long)d.bytes_reserved,
          (double)m.bytes_reserved / (double)d.bytes_reserved);
  CHECK((double)m.bytes_reserved < 0.45 * (double)d.bytes_reserved);
  /* Steady state: after one step (the scratch and the group buffers have grown past the next 200 tokens)
     nothing grows but the codes held. Each step dequantizes the whole prefix of 32 layers: instrumented
     builds take 40 steps. */
  const int steady = TU_INSTRUMENTED ? 40 : 200;
  kvc_memory_info w = grow(c, 0, 1, &rng), after = grow(c, 0, steady, &rng);
  CHECK_EQ_U64(after.bytes_quantized - w.bytes_quantized, (uint64_t)steady * MLAYERS * token_codes);
  CHECK_EQ_U64(after.bytes_reserved, w.bytes_reserved);
  TU_DESTROY(c, plain);
}

static void test_errors(void) {
  kvc_quant_options q = KVC_QUANT_OPTIONS_INIT;
  q.mode = 3;
  kvc_cache* c = NULL;
  EXPECT_ERR(tq_create(&q, 1, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "mode is 3",
             "KVC_QUANT_MODE_COMPACT (2)");
  CHECK(c == NULL);

  /* A per-token group that does not divide head_dim is refused before anything changes. */
  tq_setting s = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_COMPACT, 4, 0, 0, 3, 2};
  tq_rng rng = {5};
  c = tq_cache(&s, 1);
  if (!c) return;
  EXPECT_ERR(tq_update(c, 0, F32, 1, H, 4, D, D, &rng, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "layer 0",
             "head_dim is 8", "q_group_size is 3");
  kvc_cache_destroy(c);

  /* A mismatched update of an initialized compact layer with quantized history leaves it exactly as it was. */
  c = tq_cache(&SETTINGS[1], 1);
  if (!c) return;
  REQUIRE_OK(tq_update(c, 0, F32, B, H, 12, D, D, &rng, NULL, NULL, NULL));
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, B, H, 1, D + 1, D, &rng, NULL, NULL, NULL),
                       KVC_ERROR_SHAPE_MISMATCH, "kvc_cache_update", "head_dim", "is 9", "holds 8");
  EXPECT_ERR_UNCHANGED(c, tq_update(c, 0, F32, B + 1, H, 1, D, D, &rng, NULL, NULL, NULL),
                       KVC_ERROR_SHAPE_MISMATCH, "kvc_cache_update", "batch", "is 4", "holds 3");
  int64_t bad[1] = {B};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, bad, 1), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_batch_select_indices", "indices[0] is 3", "[0, 3)");
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_same_returns_as_incremental);
  TU_RUN(test_layer_view_is_the_residual);
  TU_RUN(test_memory);
  TU_RUN(test_errors);
  return tu_finish();
}
