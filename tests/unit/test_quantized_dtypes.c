/*
 * test_quantized_dtypes.c: QUANTIZED layers on float32, float16 and
 * bfloat16, with both quantizers and both modes: the residual comes back
 * bit for bit, and every quantized value lies within the quantizer's error
 * bound of its group (incremental mode: per-token groups of q_group_size
 * head_dim elements, per-channel groups of q_group_size tokens).
 *
 * Bounds, in quantization steps (max - min) / (2^nbits - 1) of the group,
 * plus 4 units in the last place of the dtype at the group's largest
 * magnitude (quanto computes in the dtype): quanto's min/max rounding is
 * within 1/2 step; HQQ moves the zero point to lower the mean error of the
 * call (proximal refinement), so an element may be up to 1 step away, and
 * the mean error stays below 1/3 step.
 */
#include "test_quantized.h"

static const kvc_dtype DTYPES[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};

static double ulp(kvc_dtype dt, double x) {
  int mant = dt == KVC_DTYPE_FLOAT32 ? 23 : dt == KVC_DTYPE_FLOAT16 ? 10 : 7;
  int e;
  frexp(x > 0 ? x : 1e-30, &e);
  return ldexp(1.0, e - 1 - mant);
}

typedef struct err_stats {
  double max_steps, sum_steps;
  int64_t count, over;
} err_stats;

/*
 * Checks the first q tokens of `got` against `exact` ([b, h, s, d] floats),
 * grouped as the incremental mode groups tensor `which` of setting `set`.
 */
static void group_errors(const kvc_tensor* got, const float* exact, int64_t s, const tq_setting* set, int which,
                         int64_t q, kvc_dtype dt, double bound, err_stats* st) {
  int64_t b = got->shape[0], h = got->shape[1], d = got->shape[3], g = set->group;
  int axis = which ? set->axis_value : set->axis_key;
  int channel = set->quantizer == KVC_QUANTIZER_QUANTO ? axis == -1 : axis == 0;
  int64_t ngroups = channel ? (q / g) * d : q * (d / g);
  for (int64_t bb = 0; bb < b; bb++)
    for (int64_t hh = 0; hh < h; hh++)
      for (int64_t k = 0; k < ngroups; k++) {
        int64_t t0 = channel ? (k / d) * g : k / (d / g), e0 = channel ? k % d : (k % (d / g)) * g;
        double lo = 1e30, hi = -1e30, amax = 0;
        for (int64_t i = 0; i < g; i++) {
          int64_t t = channel ? t0 + i : t0, e = channel ? e0 : e0 + i;
          double x = exact[((bb * h + hh) * s + t) * d + e];
          lo = x < lo ? x : lo;
          hi = x > hi ? x : hi;
          amax = fabs(x) > amax ? fabs(x) : amax;
        }
        double step = (hi - lo) / ((1 << set->nbits) - 1), slack = 4 * ulp(dt, amax);
        for (int64_t i = 0; i < g; i++) {
          int64_t t = channel ? t0 + i : t0, e = channel ? e0 : e0 + i;
          double x = exact[((bb * h + hh) * s + t) * d + e], y = tu_get(got, bb, hh, t, e);
          double err = fabs(y - x), in_steps = step > 0 ? err / step : (err > slack ? 1e9 : 0);
          if (in_steps > st->max_steps) st->max_steps = in_steps;
          st->sum_steps += in_steps;
          st->count++;
          if (err > bound * step + slack) st->over++;
        }
      }
}

/* The residual (tokens q..s-1) holds exactly the inputs. */
static int residual_exact(const kvc_tensor* got, const float* exact, int64_t q) {
  int64_t b = got->shape[0], h = got->shape[1], s = got->shape[2], d = got->shape[3];
  for (int64_t i = 0; i < b * h; i++)
    for (int64_t t = q; t < s; t++)
      for (int64_t e = 0; e < d; e++)
        if (tu_get(got, i / h, i % h, t, e) != exact[(i * s + t) * d + e]) return 0;
  return 1;
}

/* Incremental mode: prefill then decode; per-group bounds on the quantized tokens, exact residual. */
static void run_incremental(const tq_setting* set, kvc_dtype dt) {
  enum { B = 2, H = 3, DK = 16, DV = 8, S = 40 };
  kvc_cache* c = tq_cache(set, 1);
  if (!c) return;
  tq_rng rng = {1000 + (uint64_t)dt * 7 + (uint64_t)set->quantizer};
  float* k = (float*)malloc(sizeof(float) * B * H * S * DK);
  float* v = (float*)malloc(sizeof(float) * B * H * S * DV);
  float* ks = (float*)malloc(sizeof(float) * B * H * S * DK);
  float* vs = (float*)malloc(sizeof(float) * B * H * S * DV);
  if (!k || !v || !ks || !vs) abort();
  int64_t seq = 0;
  while (seq < S) {
    int64_t n = seq == 0 ? 17 : 1;
    if (!CHECK_OK(tq_update(c, 0, dt, B, H, n, DK, DV, &rng, ks, vs, NULL))) break;
    for (int64_t i = 0; i < B * H; i++) {
      memcpy(k + (i * S + seq) * DK, ks + i * n * DK, sizeof(float) * (size_t)(n * DK));
      memcpy(v + (i * S + seq) * DV, vs + i * n * DV, sizeof(float) * (size_t)(n * DV));
    }
    seq += n;
  }
  kvc_kv view = tu_view(c, 0);
  int64_t q = tq_quantized(c, 0);
  CHECK(q >= S - set->residual - set->group && q <= S - set->residual);
  double bound = set->quantizer == KVC_QUANTIZER_QUANTO ? 0.5 : 1.0;
  err_stats st[2];
  memset(st, 0, sizeof st);
  group_errors(&view.key, k, S, set, 0, q, dt, bound, &st[0]);
  group_errors(&view.value, v, S, set, 1, q, dt, bound, &st[1]);
  for (int w = 0; w < 2; w++) {
    CHECK(st[w].count > 0);
    CHECK_EQ_I64(st[w].over, 0);
    if (set->quantizer == KVC_QUANTIZER_HQQ) CHECK(st[w].sum_steps / (double)st[w].count < 1.0 / 3.0);
    if (getenv("KVC_TEST_VERBOSE"))
      printf("    %s nbits %d axis %d dtype %d: mean %.3f, max %.3f steps over %lld values\n",
             set->quantizer == KVC_QUANTIZER_QUANTO ? "quanto" : "hqq", set->nbits,
             w ? set->axis_value : set->axis_key, (int)dt, st[w].sum_steps / (double)st[w].count, st[w].max_steps,
             (long long)st[w].count);
  }
  CHECK(residual_exact(&view.key, k, q));
  CHECK(residual_exact(&view.value, v, q));
  free(k);
  free(v);
  free(ks);
  free(vs);
  kvc_cache_destroy(c);
}

static void test_incremental_all_dtypes(void) {
  static const tq_setting sets[] = {
      {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 8, 4},
      {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 2, -1, 0, 4, 3},
      {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 4, 1, 1, 8, 4},
      {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 3, 0, 1, 8, 2},
      {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 8, 0, 0, 4, 5},
  };
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    for (int d = 0; d < 3; d++) run_incremental(&sets[i], DTYPES[d]);
}

/*
 * Transformers mode: the prefill is returned bit for bit in its dtype, and
 * the dequantized history that later calls return keeps the dtype and the
 * bounds of transformers' per-token grouping (quanto axis 0, HQQ axis 1).
 */
static void test_transformers_all_dtypes(void) {
  enum { B = 1, H = 2, D = 8, P = 6 };
  for (int qz = 0; qz < 2; qz++)
    for (int di = 0; di < 3; di++) {
      kvc_dtype dt = DTYPES[di];
      tq_setting set = {qz ? KVC_QUANTIZER_HQQ : KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, qz ? 1 : 0,
                        qz ? 1 : 0, 4, 8};
      kvc_cache* c = tq_cache(&set, 1);
      REQUIRE(c);
      tq_rng rng = {77 + (uint64_t)di};
      tu_tensor k, v;
      float kv[B * H * P * D], vv[B * H * P * D];
      tq_normal_tensor(&k, dt, B, H, P, D, &rng, 3.0f, kv);
      tq_normal_tensor(&v, dt, B, H, P, D, &rng, 0.5f, vv);
      kvc_kv out;
      REQUIRE_OK(kvc_cache_update(c, 0, &k.t, &v.t, NULL, &out));
      CHECK_EQ_I64(kvc_dtype_from_data_type(out.key.dtype), dt);
      size_t kb = 0, vb = 0;
      unsigned char* gk = tu_view_bytes_alloc(&out.key, &kb);
      unsigned char* gv = tu_view_bytes_alloc(&out.value, &vb);
      CHECK(kb == (size_t)(B * H * P * D) * tu_dtype_bytes(dt) && memcmp(gk, k.alloc, kb) == 0);
      CHECK(vb == (size_t)(B * H * P * D) * tu_dtype_bytes(dt) && memcmp(gv, v.alloc, vb) == 0);
      free(gk);
      free(gv);
      REQUIRE_OK(tq_update(c, 0, dt, B, H, 1, D, D, &rng, NULL, NULL, &out));
      CHECK_EQ_I64(kvc_dtype_from_data_type(out.value.dtype), dt);
      tq_setting grouping = set;
      grouping.mode = KVC_QUANT_MODE_INCREMENTAL; /* per-token groups of 4: the same groups as transformers' here */
      err_stats st[2];
      memset(st, 0, sizeof st);
      double bound = qz ? 1.0 : 0.5;
      group_errors(&out.key, kv, P, &grouping, 0, P, dt, bound, &st[0]);
      group_errors(&out.value, vv, P, &grouping, 1, P, dt, bound, &st[1]);
      CHECK_EQ_I64(st[0].over + st[1].over, 0);
      CHECK(st[0].max_steps > 0 && st[1].max_steps > 0); /* quantized, not copied */
      tu_tensor_free(&k);
      tu_tensor_free(&v);
      kvc_cache_destroy(c);
    }
}

/* Tokens whose group has a single value (max == min): quanto's scale is 0, the value survives exactly. */
static void test_constant_groups(void) {
  for (int di = 0; di < 3; di++) {
    kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 0}, 1);
    REQUIRE(c);
    float vals[2 * 8];
    for (int i = 0; i < 16; i++) vals[i] = i < 8 ? 1.5f : -0.25f;
    tu_tensor k, v;
    tu_tensor_make(&k, DTYPES[di], 1, 1, 2, 8, vals);
    tu_tensor_make(&v, DTYPES[di], 1, 1, 2, 8, vals);
    kvc_kv out;
    REQUIRE_OK(kvc_cache_update(c, 0, &k.t, &v.t, NULL, &out));
    CHECK_EQ_I64(tq_quantized(c, 0), 2);
    for (int t = 0; t < 2; t++)
      for (int e = 0; e < 8; e++) {
        CHECK(tu_get(&out.key, 0, 0, t, e) == vals[t * 8 + e]);
        CHECK(tu_get(&out.value, 0, 0, t, e) == vals[t * 8 + e]);
      }
    tu_tensor_free(&k);
    tu_tensor_free(&v);
    kvc_cache_destroy(c);
  }
}

int main(void) {
  TU_RUN(test_incremental_all_dtypes);
  TU_RUN(test_transformers_all_dtypes);
  TU_RUN(test_constant_groups);
  return tu_finish();
}
