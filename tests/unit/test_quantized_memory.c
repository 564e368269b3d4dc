/*
 * test_quantized_memory.c: kvc_memory_info of QUANTIZED layers.
 * bytes_quantized is exactly the packed codes plus the scales and zero
 * points (in the cache's dtype) of the quantized tokens, computed here from
 * the shapes; the store (working memory, the dequantized history and the
 * residual) and the growth reserve count in bytes_reserved only.
 */
#include "test_quantized.h"

static uint64_t packed(int64_t n, int nbits) { return (uint64_t)(n * nbits + 7) / 8; }

static void test_incremental_exact(void) {
  static const tq_setting sets[] = {
      {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 5},
      {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 2, -1, 0, 8, 3},
      {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 3, 1, 0, 8, 0},
      {KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_INCREMENTAL, 1, 0, 0, 5, 7},
  };
  static const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  for (size_t i = 0; i < sizeof sets / sizeof sets[0]; i++)
    for (int di = 0; di < 3; di++) {
      kvc_cache* c = tq_cache(&sets[i], 1);
      REQUIRE(c);
      tq_rng rng = {i * 3 + (uint64_t)di};
      const int64_t b = 3, h = 2, dk = 16, dv = 40;
      size_t elem = kvc_dtype_size(dts[di]);
      uint64_t last_reserved = 0;
      int grew = 0;
      for (int step = 0; step < 60; step++) {
        REQUIRE_OK(tq_update(c, 0, dts[di], b, h, step ? 1 : 9, dk, dv, &rng, NULL, NULL, NULL));
        kvc_memory_info m = tu_memory(c);
        int64_t q = tq_quantized(c, 0), s = tu_seq(c, 0);
        CHECK_EQ_U64(m.bytes_quantized, tq_incremental_bytes(&sets[i], b, h, dk, dv, q, elem));
        CHECK_EQ_U64(m.bytes_used, (uint64_t)(b * h * s * (dk + dv)) * elem);
        CHECK(m.bytes_reserved >= m.bytes_used + m.bytes_quantized);
        CHECK_EQ_U64(m.bytes_device, m.bytes_reserved);
        grew += m.bytes_reserved != last_reserved;
        last_reserved = m.bytes_reserved;
      }
      CHECK(grew <= 10); /* geometric growth: a few reallocations over 60 steps, not one per step */
      kvc_cache_destroy(c);
    }
}

/*
 * Transformers mode: every group of transformers' grouping of the whole
 * [B, H, S, D] tensor, when the groups stay within batch rows; none when they
 * cross rows (the history then lives in the store only, until the next flush).
 */
static void test_transformers_exact(void) {
  struct {
    tq_setting s;
    int64_t b;
    int within_rows;
  } cases[] = {
      {{KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 8, 2}, 3, 1},
      {{KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 2, -1, -1, 2, 2}, 2, 1},  /* H*S even */
      {{KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 1, 1, 16, 2}, 2, 1},     /* D % G == 0 */
      {{KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 2}, 1, 1},      /* one row */
      {{KVC_QUANTIZER_HQQ, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 2}, 2, 0},      /* strided across rows */
  };
  const int64_t h = 2, d = 16;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kvc_cache* c = tq_cache(&cases[i].s, 1);
    REQUIRE(c);
    tq_rng rng = {40 + i};
    int64_t b = cases[i].b;
    uint64_t store = (uint64_t)(b * h * 64 * 2 * d) * 2; /* 64 slots (the first store), K and V, float16 */
    int64_t before = 0;
    for (int step = 0; step < 7; step++) {
      REQUIRE_OK(tq_update(c, 0, KVC_DTYPE_FLOAT16, b, h, step ? 1 : 4, d, d, &rng, NULL, NULL, NULL));
      int64_t q = tq_quantized(c, 0);
      uint64_t groups = (uint64_t)(b * h * q * d) / (uint64_t)cases[i].s.group;
      uint64_t want = cases[i].within_rows ? 2 * groups * (2 * 2 + packed(cases[i].s.group, cases[i].s.nbits)) : 0;
      kvc_memory_info m = tu_memory(c);
      CHECK_EQ_U64(m.bytes_quantized, want);
      /* A quantizing call keeps the store it returns from until the next update: two stores for one step. */
      CHECK_EQ_U64(m.bytes_reserved - m.bytes_quantized, (q != before ? 2 : 1) * store);
      before = q;
    }
    kvc_cache_destroy(c);
  }
}

/* Memory per layer adds up over layers, and reset gives the quantized bytes back. */
static void test_layers_add_up(void) {
  tq_setting set = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, 0, 0, 4, 2};
  kvc_cache* one = tq_cache(&set, 1);
  kvc_cache* three = tq_cache(&set, 3);
  REQUIRE(one && three);
  tq_rng a = {9}, b = {9};
  REQUIRE_OK(tq_update(one, 0, KVC_DTYPE_FLOAT32, 1, 1, 10, 8, 8, &a, NULL, NULL, NULL));
  for (uint32_t l = 0; l < 3; l++) {
    b.s = 9;
    REQUIRE_OK(tq_update(three, l, KVC_DTYPE_FLOAT32, 1, 1, 10, 8, 8, &b, NULL, NULL, NULL));
  }
  CHECK_EQ_U64(tu_memory(three).bytes_quantized, 3 * tu_memory(one).bytes_quantized);
  CHECK_EQ_U64(tu_memory(three).bytes_reserved, 3 * tu_memory(one).bytes_reserved);
  REQUIRE_OK(kvc_cache_reset(three));
  CHECK_EQ_U64(tu_memory(three).bytes_quantized, 0);
  TU_DESTROY(one, three);
}

int main(void) {
  TU_RUN(test_incremental_exact);
  TU_RUN(test_transformers_exact);
  TU_RUN(test_layers_add_up);
  return tu_finish();
}
