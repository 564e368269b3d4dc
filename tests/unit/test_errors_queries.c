/*
 * test_errors_queries.c: bad input to the read-only queries (layer_info,
 * layer_view, seq_length, max_length, usable_length, mask_sizes, batch_size,
 * memory). Each case checks the exact code, the message, that out-params
 * keep their sentinel, and that the cache did not change.
 */
#include "test_errors.h"


#define SENTINEL_I64 INT64_C(-424242)

/* Dynamic, dynamic sliding (window 4) and static (6 slots) layers holding 2 tokens, and an untouched static layer. */
static kvc_cache* make_cache(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0),
                                 tu_layer(KVC_LAYER_STATIC, 0, 6), tu_layer(KVC_LAYER_STATIC, 0, 6));
  if (!c) return NULL;
  int ok = 1;
  for (uint32_t i = 0; ok && i < 3; i++) ok = CHECK_OK(tu_update_tokens(c, i, 2, 2, 2, 4, 3, 0, NULL, NULL));
  return tu_kept(c, ok);
}

static void test_null_cache(void) {
  int64_t a = SENTINEL_I64, b = SENTINEL_I64;
  kvc_layer_info li;
  memset(&li, 0x5a, sizeof li);
  li.struct_size = sizeof li;
  kvc_kv kv;
  memset(&kv, 0x5a, sizeof kv);
  kvc_memory_info mi;
  memset(&mi, 0x5a, sizeof mi);
  mi.struct_size = sizeof mi;

  EXPECT_ERR(kvc_cache_layer_info(NULL, 0, &li), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_layer_info", "cache", "NULL");
  EXPECT_ERR(kvc_cache_layer_view(NULL, 0, &kv), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_layer_view", "cache", "NULL");
  EXPECT_ERR(kvc_cache_seq_length(NULL, 0, &a), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_seq_length", "cache", "NULL");
  EXPECT_ERR(kvc_cache_max_length(NULL, 0, &a), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_max_length", "cache", "NULL");
  EXPECT_ERR(kvc_cache_max_length(NULL, KVC_ALL_LAYERS, &a), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_max_length",
             "cache", "NULL");
  EXPECT_ERR(kvc_cache_usable_length(NULL, 1, 0, &a), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_usable_length",
             "cache", "NULL");
  EXPECT_ERR(kvc_cache_mask_sizes(NULL, 1, 0, &a, &b), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_mask_sizes", "cache",
             "NULL");
  EXPECT_ERR(kvc_cache_batch_size(NULL, &a), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_batch_size", "cache", "NULL");
  EXPECT_ERR(kvc_cache_memory(NULL, &mi), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_memory", "cache", "NULL");
  CHECK_EQ_I64(a, SENTINEL_I64);
  CHECK_EQ_I64(b, SENTINEL_I64);
  CHECK_EQ_I64(li.kind, (kvc_layer_kind)0x5a5a5a5a);
  CHECK_EQ_U64(mi.bytes_used, UINT64_C(0x5a5a5a5a5a5a5a5a));
  CHECK_EQ_I64(kv.key.ndim, 0x5a5a5a5a);
}

static void test_null_out(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  int64_t a = SENTINEL_I64;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_info(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_layer_info",
                       "out", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_view(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_layer_view",
                       "out", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_seq_length(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_seq_length",
                       "out", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_max_length(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_max_length",
                       "out", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_usable_length(c, 1, 0, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_usable_length", "out", "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_mask_sizes(c, 1, 0, NULL, &a), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_mask_sizes", "kv_length", "NULL");
  CHECK_EQ_I64(a, SENTINEL_I64);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_mask_sizes(c, 1, 0, &a, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_mask_sizes", "kv_offset", "NULL");
  CHECK_EQ_I64(a, SENTINEL_I64);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_size(c, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_batch_size", "out",
                       "NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_memory(c, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_memory", "out", "NULL");
  kvc_cache_destroy(c);
}

/* Query q (0: kvc_cache_layer_info of layer 0, 1: kvc_cache_memory) given an out struct of struct_size `bad` and
 * 0x5a in every other byte: refused, naming the size, and the struct left byte for byte as it was. */
static void expect_struct_size_refused(kvc_cache* c, int q, uint32_t bad) {
  union {
    kvc_layer_info li;
    kvc_memory_info mi;
  } out, was;
  memset(&out, 0x5a, sizeof out);
  out.li.struct_size = bad; /* the first field of both */
  was = out;
  char num[32];
  snprintf(num, sizeof num, "%u", bad);
  if (q == 0)
    EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_info(c, 0, &out.li), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_layer_info",
                         "struct_size", num);
  else
    EXPECT_ERR_UNCHANGED(c, kvc_cache_memory(c, &out.mi), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_memory",
                         "struct_size", num);
  CHECK_EQ_U64(out.li.struct_size, bad);
  CHECK(memcmp(&out, &was, sizeof out) == 0);
}

/* The caller fills struct_size of these out structs: sizes the library does not know are rejected untouched. */
static void test_out_struct_sizes(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  const size_t sizes[2] = {sizeof(kvc_layer_info), sizeof(kvc_memory_info)};
  for (int q = 0; q < 2; q++) {
    const uint32_t bad[4] = {0, 4, (uint32_t)sizes[q] - 1, (uint32_t)sizes[q] + 8};
    for (size_t i = 0; i < 4; i++) expect_struct_size_refused(c, q, bad[i]);
  }
  kvc_cache_destroy(c);
}

/* layer_info and layer_view address existing layers only (the others answer "beyond" without error). */
static void test_layer_out_of_range(void) {
  kvc_cache* c = make_cache();
  kvc_cache* lazy = tu_lazy_cache();
  REQUIRE(c != NULL && lazy != NULL);
  static const uint32_t bad[] = {4, 5, 1000, UINT32_MAX};
  char num[32];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(num, sizeof num, "%u", bad[i]);
    kvc_layer_info li;
    memset(&li, 0x5a, sizeof li);
    li.struct_size = sizeof li;
    kvc_kv kv;
    memset(&kv, 0x5a, sizeof kv);
    EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_info(c, bad[i], &li), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_layer_info",
                         "layer", num, "4");
    EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_view(c, bad[i], &kv), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_layer_view",
                         "layer", num);
    CHECK_EQ_I64(li.kind, (kvc_layer_kind)0x5a5a5a5a);
    CHECK_EQ_I64(kv.key.ndim, 0x5a5a5a5a);
  }
  /* A lazy cache before its first update has no layer 0. */
  kvc_layer_info li;
  memset(&li, 0x5a, sizeof li);
  li.struct_size = sizeof li;
  kvc_kv kv;
  memset(&kv, 0x5a, sizeof kv);
  EXPECT_ERR_UNCHANGED(lazy, kvc_cache_layer_info(lazy, 0, &li), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_layer_info",
                       "layer", "0");
  EXPECT_ERR_UNCHANGED(lazy, kvc_cache_layer_view(lazy, 0, &kv), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_layer_view",
                       "layer", "0");
  CHECK_EQ_I64(li.kind, (kvc_layer_kind)0x5a5a5a5a);
  CHECK_EQ_I64(kv.key.ndim, 0x5a5a5a5a);

  /* max_length takes a signed layer: below KVC_ALL_LAYERS is no layer at all. */
  int64_t a = SENTINEL_I64;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_max_length(c, -2, &a), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_max_length", "layer",
                       "-2");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_max_length(c, INT32_MIN, &a), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_max_length",
                       "layer", "-2147483648");
  CHECK_EQ_I64(a, SENTINEL_I64);
  TU_DESTROY(c, lazy);
}

static void test_view_of_uninitialized_layer(void) {
  kvc_cache* c = make_cache(); /* layer 3 never updated */
  REQUIRE(c != NULL);
  kvc_kv kv;
  memset(&kv, 0x5a, sizeof kv);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_view(c, 3, &kv), KVC_ERROR_INVALID_STATE, "kvc_cache_layer_view",
                       "layer 3", "initialized");
  CHECK_EQ_I64(kv.key.ndim, 0x5a5a5a5a);
  kvc_cache_destroy(c);
}

static void test_negative_lengths(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  int64_t a = SENTINEL_I64, b = SENTINEL_I64;
  for (uint32_t layer = 0; layer < 5; layer++) {
    EXPECT_ERR_UNCHANGED(c, kvc_cache_usable_length(c, -1, layer, &a), KVC_ERROR_INVALID_ARGUMENT,
                         "kvc_cache_usable_length", "new_seq_length", "-1");
    EXPECT_ERR_UNCHANGED(c, kvc_cache_usable_length(c, INT64_MIN, layer, &a), KVC_ERROR_INVALID_ARGUMENT,
                         "kvc_cache_usable_length", "new_seq_length", "-9223372036854775808");
    EXPECT_ERR_UNCHANGED(c, kvc_cache_mask_sizes(c, -3, layer, &a, &b), KVC_ERROR_INVALID_ARGUMENT,
                         "kvc_cache_mask_sizes", "query_length", "-3");
  }
  CHECK_EQ_I64(a, SENTINEL_I64);
  CHECK_EQ_I64(b, SENTINEL_I64);
  kvc_cache_destroy(c);
}

/* Static layers of one cache filled with different batch sizes: Cache.batch_size raises. */
static void test_batch_size_inconsistent(void) {
  kvc_cache* c = tu_holding_tokens(TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_STATIC, 0, 4), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                                                   tu_layer(KVC_LAYER_STATIC_SLIDING, 2, 4)),
                                   0, 2, 1, 1, 4, 4);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 1, 5, 1, 1, 4, 4, 0, NULL, NULL));
  int64_t a = SENTINEL_I64;
  REQUIRE_OK(kvc_cache_batch_size(c, &a)); /* the dynamic layer's batch does not count */
  CHECK_EQ_I64(a, 2);
  REQUIRE_OK(tu_update_tokens(c, 2, 3, 1, 1, 4, 4, 0, NULL, NULL));
  a = SENTINEL_I64;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_size(c, &a), KVC_ERROR_INVALID_STATE, "kvc_cache_batch_size", "batch", "2",
                       "3");
  CHECK_EQ_I64(a, SENTINEL_I64);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_null_cache);
  TU_RUN(test_null_out);
  TU_RUN(test_out_struct_sizes);
  TU_RUN(test_layer_out_of_range);
  TU_RUN(test_view_of_uninitialized_layer);
  TU_RUN(test_negative_lengths);
  TU_RUN(test_batch_size_inconsistent);
  return tu_finish();
}
