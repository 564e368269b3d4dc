/*
 * get_query_offset and the MtpCache / DFlashCache offsets (transformers 5.14 /
 * 5.15; docs/transformers-5.24.md, item 4): kvc_cache_query_offset,
 * kvc_cache_set_previous_accepted_tokens and what they add to the mask sizes.
 */
#include "test_util.h"

static kvc_cache* lazy_with(kvc_query_offset_rule rule) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.query_offset_rule = rule;
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  return c;
}

static int64_t offset(const kvc_cache* c, uint32_t layer) {
  int64_t v = -999;
  CHECK_OK(kvc_cache_query_offset(c, layer, &v));
  return v;
}

static void check_mask(const kvc_cache* c, int64_t q, uint32_t layer, int64_t len, int64_t off) {
  int64_t l = -1, o = -1;
  CHECK_OK(kvc_cache_mask_sizes(c, q, layer, &l, &o));
  CHECK_EQ_I64(l, len);
  CHECK_EQ_I64(o, off);
}

static void test_plain_offset_is_the_sequence_length(void) {
  kvc_cache* c = lazy_with(KVC_QUERY_OFFSET_PLAIN);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(offset(c, 0), 0);
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 3, 2, 2, 0, NULL, NULL));
  CHECK_EQ_I64(offset(c, 0), 3);
  CHECK_EQ_I64(offset(c, 5), 0); /* a layer not created yet */
  check_mask(c, 2, 0, 5, 0);
  int64_t v = 0;
  CHECK_ERR(kvc_cache_set_previous_accepted_tokens(c, 1), KVC_ERROR_UNSUPPORTED);
  CHECK_ERR(kvc_cache_query_offset(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_cache_query_offset(NULL, 0, &v), KVC_ERROR_INVALID_ARGUMENT);
  kvc_cache_destroy(c);
}

/* MtpCache: depth k runs k + 1 tokens ahead, in the query offset and in kv_offset. */
static void test_mtp(void) {
  kvc_cache* c = tu_holding_tokens(lazy_with(KVC_QUERY_OFFSET_MTP), 0, 1, 1, 3, 2, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 1, 1, 1, 2, 2, 2, 0, NULL, NULL));
  CHECK_EQ_I64(offset(c, 0), 4);
  CHECK_EQ_I64(offset(c, 1), 4);
  CHECK_EQ_I64(offset(c, 4), 5);
  check_mask(c, 2, 0, 5, 1);
  check_mask(c, 1, 1, 3, 2);
  check_mask(c, 3, 4, 3, 5);
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_EQ_I64(offset(d, 1), 4);
  TU_DESTROY(d, c);
}

/* DFlashCache: the previously accepted tokens, in the query offset and in kv_length. */
static void test_dflash(void) {
  kvc_cache* c = tu_holding_tokens(lazy_with(KVC_QUERY_OFFSET_DFLASH), 0, 1, 1, 3, 2, 2);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(offset(c, 0), 3);
  check_mask(c, 2, 0, 5, 0);
  REQUIRE_OK(kvc_cache_set_previous_accepted_tokens(c, 4));
  CHECK_EQ_I64(offset(c, 0), 7);
  check_mask(c, 2, 0, 9, 0);
  check_mask(c, 2, 3, 6, 0);
  CHECK_UNCHANGED_BY(c, CHECK_ERR(kvc_cache_set_previous_accepted_tokens(c, -1), KVC_ERROR_INVALID_ARGUMENT));
  CHECK_EQ_I64(offset(c, 0), 7);
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_EQ_I64(offset(d, 0), 7);
  TU_DESTROY(d, c);
}

static void test_bad_rule(void) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.query_offset_rule = 3;
  kvc_cache* c = NULL;
  CHECK_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(c == NULL);
}

int main(void) {
  TU_RUN(test_plain_offset_is_the_sequence_length);
  TU_RUN(test_mtp);
  TU_RUN(test_dflash);
  TU_RUN(test_bad_rule);
  return tu_finish();
}
