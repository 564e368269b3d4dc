/*
 * test_quantized_timeline.c: when QUANTIZED layers quantize and what their
 * updates return, in both modes: the quantized layer trace of docs/semantics.md, transformers
 * 5.23's flush rule with several tokens, residual_length 0 and 1, zero-token
 * updates, lazy and early initialization, several layers, and the
 * incremental mode's blocks.
 */
#include "test_quantized.h"

#define F32 KVC_DTYPE_FLOAT32

/* The reference of an update's new tokens alone. */
static void ref_of(tq_ref* r, int64_t b, int64_t h, int64_t d, const float* k, const float* v, int64_t n) {
  memset(r, 0, sizeof *r);
  r->b = b;
  r->h = h;
  r->dk = r->dv = d;
  r->k = (float*)malloc(sizeof(float));
  r->v = (float*)malloc(sizeof(float));
  tq_ref_append(r, k, v, n);
}

/* The layer's stored view as a reference. */
static void ref_view(tq_ref* r, const kvc_cache* c, uint32_t layer) {
  kvc_kv kv = tu_view(c, layer);
  tq_ref_from_kv(r, &kv);
}

/*
 * Every element of `got` lies within `steps` quantization steps of `exact`,
 * where a step is (max - min) / (2^nbits - 1) of its group: `group`
 * consecutive head_dim elements of one token.
 */
static int within_steps(const kvc_tensor* got, const float* exact, int64_t group, int nbits, double steps) {
  int64_t b = got->shape[0], h = got->shape[1], s = got->shape[2], d = got->shape[3];
  for (int64_t i = 0; i < b * h * s; i++)
    for (int64_t j = 0; j < d / group; j++) {
      const float* x = exact + i * d + j * group;
      float lo = x[0], hi = x[0];
      for (int64_t e = 1; e < group; e++) {
        lo = x[e] < lo ? x[e] : lo;
        hi = x[e] > hi ? x[e] : hi;
      }
      double step = (hi - lo) / ((1 << nbits) - 1);
      for (int64_t e = 0; e < group; e++) {
        int64_t t = i % s, hh = (i / s) % h, bb = i / (s * h);
        float g = tu_get(got, bb, hh, t, j * group + e);
        if (fabs((double)g - x[e]) > steps * step + 1e-6 * (fabs(x[e]) + 1.0)) {
          fprintf(TU_LOG, "  element [%lld,%lld,%lld,%lld]: %.9g vs exact %.9g, step %.9g\n", (long long)bb,
                  (long long)hh, (long long)t, (long long)(j * group + e), g, x[e], step);
          return 0;
        }
      }
    }
  return 1;
}

/* docs/semantics.md's quantized layer trace with R = 4 (the same in 5.23 for one-token steps), in transformers mode. */
static void test_d5_trace(void) {
  kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 4}, 1);
  REQUIRE(c);
  enum { B = 2, H = 2, D = 8 };
  tq_rng rng = {42};
  float k[B * H * 5 * D], v[B * H * 5 * D];
  kvc_kv out;
  CHECK_MASK(c, 5, 0, 5, 0);
  REQUIRE_OK(tq_update(c, 0, F32, B, H, 5, D, D, &rng, k, v, &out));
  tq_ref in, hist;
  ref_of(&in, B, H, D, k, v, 5);
  CHECK(tq_equal(&out, &in, 0)); /* the prefill comes back exactly as given */
  CHECK_EQ_I64(tq_quantized(c, 0), 5);
  CHECK_EQ_I64(tu_seq(c, 0), 5);
  memset(&hist, 0, sizeof hist);
  ref_view(&hist, c, 0);
  CHECK(!tq_equal(&out, &hist, 1)); /* ... but what the next step builds on is its dequantization */
  kvc_kv view = tu_view(c, 0);
  CHECK(within_steps(&view.key, in.k, 4, 4, 0.5));
  CHECK(within_steps(&view.value, in.v, 4, 4, 0.5));

  static const struct {
    int64_t returned, quantized;
    int flush;
  } steps[] = {{6, 5, 0}, {7, 5, 0}, {8, 5, 0}, {9, 9, 1}, {10, 9, 0}, {11, 9, 0}, {12, 9, 0}, {13, 13, 1}};
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    ref_view(&hist, c, 0);
    CHECK_MASK(c, 1, 0, steps[i].returned, 0);
    REQUIRE_OK(tq_update(c, 0, F32, B, H, 1, D, D, &rng, k, v, &out));
    tq_ref_append(&hist, k, v, 1);
    /* Every call returns the history it built on plus the new token, quantized or not by this call. */
    CHECK(tq_equal(&out, &hist, 0));
    CHECK_EQ_I64(out.key.shape[2], steps[i].returned);
    CHECK_EQ_I64(tq_quantized(c, 0), steps[i].quantized);
    CHECK_EQ_I64(tu_seq(c, 0), steps[i].returned);
    view = tu_view(c, 0);
    /* A flush quantizes what it returned: the next step sees its dequantization (the new token included). */
    CHECK_EQ_I64(tq_equal(&view, &hist, 1), !steps[i].flush);
    if (steps[i].flush) {
      CHECK(within_steps(&view.key, hist.k, 4, 4, 0.5));
      CHECK(within_steps(&view.value, hist.v, 4, 4, 0.5));
    }
  }
  tq_ref_free(&in);
  tq_ref_free(&hist);
  kvc_cache_destroy(c);
}

/* transformers 5.23: flush when the residual plus the new tokens reach residual_length (several tokens). */
static void test_flush_rule_with_several_tokens(void) {
  kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 1, 1, 4, 4}, 1);
  REQUIRE(c);
  tq_rng rng = {7};
  static const struct {
    int64_t n, quantized;
  } steps[] = {{2, 2}, {3, 2}, {2, 7}, {5, 12}, {1, 12}, {3, 16}, {4, 20}, {1, 20}};
  kvc_kv out;
  for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, steps[i].n, 4, 4, &rng, NULL, NULL, &out));
    CHECK_EQ_I64(tq_quantized(c, 0), steps[i].quantized);
  }
  CHECK_EQ_I64(tu_seq(c, 0), 21);
  kvc_cache_destroy(c);
}

/* residual_length 0 and 1: every call after the first quantizes everything. */
static void test_tiny_residual(void) {
  for (int64_t r = 0; r <= 1; r++) {
    kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 2, -1, 0, 2, r}, 1);
    REQUIRE(c);
    tq_rng rng = {11};
    int64_t seq = 0;
    for (int i = 0; i < 5; i++) {
      int64_t n = i == 0 ? 4 : 2;
      REQUIRE_OK(tq_update(c, 0, F32, 1, 1, n, 2, 2, &rng, NULL, NULL, NULL));
      seq += n;
      CHECK_EQ_I64(tq_quantized(c, 0), seq);
    }
    kvc_cache_destroy(c);
  }
}

/* Nothing to store: the stored history comes back and nothing is quantized, in both modes. */
static void test_zero_tokens(void) {
  for (int mode = 0; mode < 2; mode++) {
    tq_rng rng = {5};
    kvc_cache* c = tq_cache_holding(&(tq_setting){KVC_QUANTIZER_QUANTO, mode, 4, 0, 0, 4, 3}, 1, &rng, 1, 2, 6, 4, 4);
    REQUIRE(c);
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 2, 4, 4, &rng, NULL, NULL, NULL));
    int64_t q = tq_quantized(c, 0);
    tq_ref before;
    memset(&before, 0, sizeof before);
    ref_view(&before, c, 0);
    kvc_kv out;
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 0, 4, 4, &rng, NULL, NULL, &out));
    CHECK(tq_equal(&out, &before, 0));
    CHECK_EQ_I64(tq_quantized(c, 0), q);
    CHECK_EQ_I64(tu_seq(c, 0), 8);
    tq_ref_free(&before);
    kvc_cache_destroy(c);
  }
}

/* Layers are initialized by their first update; early initialization leaves the first-call semantics intact. */
static void test_lazy_and_early_initialization(void) {
  tq_setting set = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 4};
  kvc_cache* c = tq_cache(&set, 2);
  REQUIRE(c);
  kvc_layer_info info = tu_info(c, 1);
  CHECK_EQ_I64(info.is_initialized, 0);
  CHECK_EQ_I64(info.kind, KVC_LAYER_QUANTIZED);
  CHECK_EQ_I64(info.quantized_length, 0);
  kvc_kv kv;
  CHECK_ERR(kvc_cache_layer_view(c, 1, &kv), KVC_ERROR_INVALID_STATE);
  CHECK_EQ_I64(tu_seq(c, 1), 0);
  CHECK_MASK(c, 3, 1, 3, 0);
  CHECK_EQ_I64(tu_max_len(c, 1), -1);
  CHECK_EQ_I64(tu_memory(c).bytes_quantized, 0);
  tq_rng rng = {3};
  REQUIRE_OK(tq_update(c, 0, F32, 1, 1, 3, 4, 4, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 1);
  CHECK_EQ_I64(tu_info(c, 1).is_initialized, 0);
  kvc_cache_destroy(c);

  c = tq_cache(&set, 1);
  REQUIRE(c);
  kvc_init_options io = KVC_INIT_OPTIONS_INIT;
  io.batch_size = 2;
  io.dtype = F32;
  io.num_kv_heads = 1;
  io.k_head_dim = io.v_head_dim = 4;
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 1);
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  float k[2 * 3 * 4], v[2 * 3 * 4];
  kvc_kv out;
  REQUIRE_OK(tq_update(c, 0, F32, 2, 1, 3, 4, 4, &rng, k, v, &out));
  tq_ref in;
  ref_of(&in, 2, 1, 4, k, v, 3);
  CHECK(tq_equal(&out, &in, 0)); /* still the first call: returned as given, all of it quantized */
  CHECK_EQ_I64(tq_quantized(c, 0), 3);
  tq_ref_free(&in);
  kvc_cache_destroy(c);
}

/* update_all over several layers: each layer keeps its own timeline. */
static void test_several_layers(void) {
  kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 2, 0, 1, 4, 3}, 3);
  REQUIRE(c);
  tq_rng rng = {9};
  for (int step = 0; step < 6; step++) {
    int64_t n = step == 0 ? 4 : 1;
    tu_tensor k[3], v[3];
    kvc_tensor kt[3], vt[3];
    for (int i = 0; i < 3; i++) {
      tq_normal_tensor(&k[i], F32, 1, 2, n, 4, &rng, 1.0f, NULL);
      tq_normal_tensor(&v[i], F32, 1, 2, n, 4, &rng, 1.0f, NULL);
      kt[i] = k[i].t;
      vt[i] = v[i].t;
    }
    kvc_kv out[3];
    REQUIRE_OK(kvc_cache_update_all(c, 3, kt, vt, NULL, out));
    for (int i = 0; i < 3; i++) {
      CHECK_EQ_I64(out[i].key.shape[2], 4 + step);
      /* 4 quantized by the first call; the residual then holds 1, 2 and flushes at the third step. */
      CHECK_EQ_I64(tq_quantized(c, (uint32_t)i), step < 3 ? 4 : 7);
      tu_tensor_free(&k[i]);
      tu_tensor_free(&v[i]);
    }
  }
  kvc_cache_destroy(c);
}

/*
 * Incremental mode with per-token groups: tokens beyond residual_length are
 * quantized one by one, once; what was returned for them never changes again.
 */
static void test_incremental_per_token(void) {
  kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 4}, 1);
  REQUIRE(c);
  enum { B = 2, H = 2, D = 8 };
  tq_rng rng = {21};
  float k[B * H * 10 * D], v[B * H * 10 * D];
  kvc_kv out;
  REQUIRE_OK(tq_update(c, 0, F32, B, H, 10, D, D, &rng, k, v, &out));
  CHECK_EQ_I64(tq_quantized(c, 0), 6);
  tq_ref in, prev, ret;
  ref_of(&in, B, H, D, k, v, 10);
  memset(&prev, 0, sizeof prev);
  memset(&ret, 0, sizeof ret);
  tq_ref_from_kv(&ret, &out);
  CHECK(within_steps(&out.key, in.k, 4, 4, 0.5));
  CHECK(within_steps(&out.value, in.v, 4, 4, 0.5));
  /* The six oldest tokens were quantized (some value changed), the last four come back exactly. */
  int changed = 0, kept = 1;
  for (int64_t b = 0; b < B * H; b++)
    for (int64_t t = 0; t < 10; t++)
      for (int64_t e = 0; e < D; e++) {
        int64_t i = (b * 10 + t) * D + e;
        if (t < 6) changed |= ret.k[i] != k[i] || ret.v[i] != v[i];
        if (t >= 6) kept &= ret.k[i] == k[i] && ret.v[i] == v[i];
      }
  CHECK(changed);
  CHECK(kept);
  for (int step = 0; step < 6; step++) {
    ref_view(&prev, c, 0);
    CHECK(tq_equal(&out, &prev, 0)); /* the store holds what was returned */
    REQUIRE_OK(tq_update(c, 0, F32, B, H, 1, D, D, &rng, k, v, &out));
    CHECK_EQ_I64(tq_quantized(c, 0), 7 + step);
    tq_ref_from_kv(&ret, &out);
    tq_ref_crop(&ret, 6 + step);
    tq_ref_crop(&prev, 6 + step);
    int same = 1; /* the history quantized before this step is returned unchanged */
    for (int64_t i = 0; i < ret.b * ret.h * ret.s * D; i++) same &= ret.k[i] == prev.k[i] && ret.v[i] == prev.v[i];
    CHECK(same);
  }
  tq_ref_free(&in);
  tq_ref_free(&prev);
  tq_ref_free(&ret);
  kvc_cache_destroy(c);
}

/* Per-channel groups quantize q_group_size tokens at a time, for keys and values alike. */
static void test_incremental_blocks(void) {
  tq_rng rng = {33};
  kvc_cache* c = tq_cache_holding(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 2, -1, 0, 4, 2}, 1, &rng, 1, 2, 10, 4, 8);
  REQUIRE(c);
  CHECK_EQ_I64(tq_quantized(c, 0), 8); /* 10 - 2 = 8 over the residual: two blocks */
  static const int64_t expect_q[] = {8, 8, 8, 12, 12, 12, 12, 16};
  for (int i = 0; i < 8; i++) {
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 1, 4, 8, &rng, NULL, NULL, NULL));
    CHECK_EQ_I64(tq_quantized(c, 0), expect_q[i]);
  }
  /* HQQ per-channel on both: the same blocks. */
  tq_setting hqq = {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 3, 0, 0, 3, 0};
  kvc_cache* h = tq_cache(&hqq, 1);
  REQUIRE(h);
  REQUIRE_OK(tq_update(h, 0, F32, 2, 1, 7, 5, 5, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tq_quantized(h, 0), 6);
  REQUIRE_OK(tq_update(h, 0, F32, 2, 1, 2, 5, 5, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tq_quantized(h, 0), 9);
  TU_DESTROY(h, c);
}

int main(void) {
  TU_RUN(test_d5_trace);
  TU_RUN(test_flush_rule_with_several_tokens);
  TU_RUN(test_tiny_residual);
  TU_RUN(test_zero_tokens);
  TU_RUN(test_lazy_and_early_initialization);
  TU_RUN(test_several_layers);
  TU_RUN(test_incremental_per_token);
  TU_RUN(test_incremental_blocks);
  return tu_finish();
}
