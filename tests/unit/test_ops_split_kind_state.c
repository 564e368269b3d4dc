/*
 * batch_split and from_batch_splits of layers whose kind state holds no
 * rows: a quantized layer whose first update failed keeps "not initialized,
 * batch 0" in every split and in the stack, as in the cache it came from
 * (found by tests/fuzz/fuzz_kinds.c; seed
 * tests/fuzz/corpus/kinds/regress_split_failed_quantized_layer).
 */
#include "test_util.h"

/* [DYNAMIC, QUANTIZED with q_group_size 64]: keys of head_dim 4 cannot be quantized incrementally. */
static kvc_cache* dynamic_and_quantized(void) {
  kvc_layer_options lo[2];
  kvc_layer_options_init(&lo[0]);
  kvc_layer_options_init(&lo[1]);
  lo[1].kind = KVC_LAYER_QUANTIZED; /* NULL quant: KVC_QUANT_OPTIONS_INIT, q_group_size 64 */
  return tu_custom_cache(2, lo);
}

static void test_split_keeps_failed_quantized_layer_empty(void) {
  kvc_cache* c = tu_holding_tokens(dynamic_and_quantized(), 0, 2, 1, 3, 4, 4);
  REQUIRE(c != NULL);
  /* the quantized layer's first update fails (head_dim 4, q_group_size 64) and leaves it not initialized */
  CHECK_ERR(tu_update_tokens(c, 1, 2, 1, 3, 4, 4, 100, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT);
  kvc_layer_info before = tu_info(c, 1);
  CHECK_EQ_I64(before.is_initialized, 0);
  CHECK_EQ_I64(before.batch_size, 0);

  kvc_cache* parts[2] = {NULL, NULL};
  size_t count = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, 2, 1, parts, 2, &count));
  REQUIRE_EQ_I64(count, 2);
  for (size_t k = 0; k < count; k++) {
    kvc_layer_info li = tu_info(parts[k], 1);
    CHECK_EQ_I64(li.is_initialized, 0);
    CHECK_EQ_I64(li.batch_size, 0);
    CHECK_EQ_I64(tu_info(parts[k], 0).batch_size, 1);
  }
  kvc_cache* stacked = NULL;
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &stacked));
  CHECK_EQ_I64(tu_info(stacked, 1).batch_size, 0);
  CHECK_CACHES_EQUAL_CONTENTS(c, stacked);

  /* the layer still takes its geometry from its first successful update, in every cache */
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(stacked, 1, 2, 1, 3, 64, 64, 200, NULL, &out));
  CHECK_SHAPE(out.key, 2, 1, 3, 64);
  REQUIRE_OK(tu_update_tokens(parts[0], 1, 1, 1, 3, 64, 64, 200, NULL, &out));
  CHECK_SHAPE(out.key, 1, 1, 3, 64);
  kvc_cache_destroy(stacked);
  for (size_t k = 0; k < count; k++) kvc_cache_destroy(parts[k]);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_split_keeps_failed_quantized_layer_empty);
  return tu_finish();
}
