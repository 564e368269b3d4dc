/*
 * test_quantized_crop.c: crop and reset of QUANTIZED layers act on the
 * quantized tokens as well as on the residual (transformers cropped and
 * reset only the residual up to 5.22, docs/semantics.md, 'Edge cases', item 13). Crop follows the
 * dynamic layer's argument rules (negative removes, positive is the legacy
 * absolute length, 0 does nothing).
 */
#include "test_quantized.h"

#define F32 KVC_DTYPE_FLOAT32

static void ref_view(tq_ref* r, const kvc_cache* c) {
  kvc_kv kv = tu_view(c, 0);
  tq_ref_from_kv(r, &kv);
}

/* A crop into a per-channel block gives the block's kept tokens back to the residual, values unchanged. */
static void test_crop_across_a_block(void) {
  tq_setting set = {KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_INCREMENTAL, 4, -1, 0, 4, 2};
  tq_rng rng = {1};
  kvc_cache* c = tq_cache_holding(&set, 1, &rng, 2, 2, 13, 8, 4);
  REQUIRE(c);
  CHECK_EQ_I64(tq_quantized(c, 0), 8);
  CHECK_EQ_U64(tu_memory(c).bytes_quantized, tq_incremental_bytes(&set, 2, 2, 8, 4, 8, 4));
  tq_ref ref;
  memset(&ref, 0, sizeof ref);
  ref_view(&ref, c);

  REQUIRE_OK(kvc_cache_crop(c, -3)); /* 10 kept: only residual tokens go */
  tq_ref_crop(&ref, 10);
  kvc_kv view = tu_view(c, 0);
  CHECK(tq_equal(&view, &ref, 0));
  CHECK_EQ_I64(tq_quantized(c, 0), 8);
  CHECK_MASK(c, 1, 0, 11, 0);

  REQUIRE_OK(kvc_cache_crop(c, -3)); /* 7 kept: into the second block, whose tokens 4..6 become residual */
  tq_ref_crop(&ref, 7);
  view = tu_view(c, 0);
  CHECK(tq_equal(&view, &ref, 0));
  CHECK_EQ_I64(tq_quantized(c, 0), 4);
  CHECK_EQ_I64(tu_seq(c, 0), 7);
  CHECK_EQ_U64(tu_memory(c).bytes_quantized, tq_incremental_bytes(&set, 2, 2, 8, 4, 4, 4));

  /* The next update returns the cropped history and the new token; the block fills again later. */
  float k[2 * 2 * 8], v[2 * 2 * 4];
  kvc_kv out;
  REQUIRE_OK(tq_update(c, 0, F32, 2, 2, 1, 8, 4, &rng, k, v, &out));
  tq_ref_append(&ref, k, v, 1);
  CHECK(tq_equal(&out, &ref, 0));
  CHECK_EQ_I64(tq_quantized(c, 0), 4); /* 8 stored, 4 quantized: 4 residual < 2 + a block */
  for (int i = 0; i < 2; i++) REQUIRE_OK(tq_update(c, 0, F32, 2, 2, 1, 8, 4, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tq_quantized(c, 0), 8);
  tq_ref_free(&ref);
  kvc_cache_destroy(c);
}

/* The argument rules: 0 does nothing, positive is an absolute length, too much empties. */
static void test_crop_arguments(void) {
  for (int mode = 0; mode < 2; mode++) {
    tq_rng rng = {2};
    kvc_cache* c = tq_cache_holding(&(tq_setting){KVC_QUANTIZER_HQQ, mode, 4, 1, 1, 4, 3}, 1, &rng, 1, 2, 9, 4, 4);
    REQUIRE(c);
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 1, 4, 4, &rng, NULL, NULL, NULL));
    int64_t q = tq_quantized(c, 0);
    REQUIRE_OK(kvc_cache_crop(c, 0));
    CHECK_EQ_I64(tu_seq(c, 0), 10);
    CHECK_EQ_I64(tq_quantized(c, 0), q);
    REQUIRE_OK(kvc_cache_crop(c, 12)); /* longer than the layer: nothing to cut */
    CHECK_EQ_I64(tu_seq(c, 0), 10);
    REQUIRE_OK(kvc_cache_crop(c, 5));
    CHECK_EQ_I64(tu_seq(c, 0), 5);
    CHECK_EQ_I64(tq_quantized(c, 0), 5);
    REQUIRE_OK(kvc_cache_crop(c, -99));
    CHECK_EQ_I64(tu_seq(c, 0), 0);
    CHECK_EQ_I64(tq_quantized(c, 0), 0);
    CHECK_EQ_U64(tu_memory(c).bytes_quantized, 0);
    /* An emptied layer starts afresh: in transformers mode the next call is a first call again. */
    float k[2 * 3 * 4], v[2 * 3 * 4];
    kvc_kv out;
    REQUIRE_OK(tq_update(c, 0, F32, 1, 2, 3, 4, 4, &rng, k, v, &out));
    CHECK_EQ_I64(tq_quantized(c, 0), mode == KVC_QUANT_MODE_TRANSFORMERS ? 3 : 0);
    CHECK(tu_get(&out.key, 0, 1, 2, 3) == k[(1 * 3 + 2) * 4 + 3]);
    kvc_cache_destroy(c);
  }
}

/*
 * Transformers mode: a crop into the quantized history keeps the store's
 * dequantized values as the history (transformers would quantize from them
 * again at the next flush anyway); its packed groups described the cut
 * tokens too and are dropped until then.
 */
static void test_crop_transformers_mode(void) {
  tq_rng rng = {3};
  kvc_cache* c = tq_cache_holding(&(tq_setting){KVC_QUANTIZER_QUANTO, KVC_QUANT_MODE_TRANSFORMERS, 4, 0, 0, 4, 3}, 1, &rng, 2, 2, 6, 8, 8);
  REQUIRE(c);
  REQUIRE_OK(tq_update(c, 0, F32, 2, 2, 1, 8, 8, &rng, NULL, NULL, NULL));
  CHECK_EQ_I64(tq_quantized(c, 0), 6);
  uint64_t six = tu_memory(c).bytes_quantized;
  CHECK(six > 0);
  REQUIRE_OK(kvc_cache_crop(c, -1)); /* the residual token only */
  CHECK_EQ_I64(tq_quantized(c, 0), 6);
  CHECK_EQ_U64(tu_memory(c).bytes_quantized, six);
  tq_ref ref;
  memset(&ref, 0, sizeof ref);
  ref_view(&ref, c);
  REQUIRE_OK(kvc_cache_crop(c, -2));
  tq_ref_crop(&ref, 4);
  kvc_kv view = tu_view(c, 0);
  CHECK(tq_equal(&view, &ref, 0));
  CHECK_EQ_I64(tq_quantized(c, 0), 4);
  CHECK_EQ_U64(tu_memory(c).bytes_quantized, 0);
  /* residual 0: the next two steps append, the third flushes (0 + 1 + 1 + 1 >= 3) and quantizes 7 tokens. */
  float k[2 * 2 * 8], v[2 * 2 * 8];
  kvc_kv out;
  for (int i = 0; i < 3; i++) {
    REQUIRE_OK(tq_update(c, 0, F32, 2, 2, 1, 8, 8, &rng, k, v, &out));
    tq_ref_append(&ref, k, v, 1);
    CHECK(tq_equal(&out, &ref, 0));
  }
  CHECK_EQ_I64(tq_quantized(c, 0), 7);
  CHECK_EQ_U64(tu_memory(c).bytes_quantized, 2 * 2 * 7 * 2 * 2 * (2 * 4 + 2)); /* K and V: 2 groups per token */
  tq_ref_free(&ref);
  kvc_cache_destroy(c);
}

/* reset drops everything, quantized tokens and packed groups included; the layer stays initialized. */
static void test_reset(void) {
  for (int mode = 0; mode < 2; mode++) {
    kvc_cache* c = tq_cache(&(tq_setting){KVC_QUANTIZER_QUANTO, mode, 2, 0, -1, 2, 2}, 2);
    REQUIRE(c);
    tq_rng rng = {4};
    for (uint32_t l = 0; l < 2; l++) {
      REQUIRE_OK(tq_update(c, l, F32, 2, 1, 8, 4, 4, &rng, NULL, NULL, NULL));
      REQUIRE_OK(tq_update(c, l, F32, 2, 1, 2, 4, 4, &rng, NULL, NULL, NULL));
    }
    CHECK(tu_memory(c).bytes_quantized > 0);
    REQUIRE_OK(kvc_cache_reset(c));
    kvc_memory_info m = tu_memory(c);
    CHECK_EQ_U64(m.bytes_quantized, 0);
    CHECK_EQ_U64(m.bytes_used, 0);
    for (uint32_t l = 0; l < 2; l++) {
      kvc_layer_info info = tu_info(c, l);
      CHECK_EQ_I64(info.is_initialized, 1);
      CHECK_EQ_I64(info.seq_length, 0);
      CHECK_EQ_I64(info.quantized_length, 0);
      CHECK_MASK(c, 4, l, 4, 0);
    }
    float k[2 * 4 * 4], v[2 * 4 * 4];
    kvc_kv out;
    REQUIRE_OK(tq_update(c, 0, F32, 2, 1, 4, 4, 4, &rng, k, v, &out));
    CHECK_EQ_I64(out.key.shape[2], 4);
    CHECK_EQ_I64(tq_quantized(c, 0), mode == KVC_QUANT_MODE_TRANSFORMERS ? 4 : 2);
    if (mode == KVC_QUANT_MODE_TRANSFORMERS) CHECK(tu_get(&out.value, 1, 0, 3, 2) == v[(1 * 4 + 3) * 4 + 2]);
    kvc_cache_destroy(c);
  }
}

int main(void) {
  TU_RUN(test_crop_across_a_block);
  TU_RUN(test_crop_arguments);
  TU_RUN(test_crop_transformers_mode);
  TU_RUN(test_reset);
  return tu_finish();
}
