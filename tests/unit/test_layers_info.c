/*
 * What each layer kind reports about itself: kvc_layer_info before and after
 * the first update, max_length per layer and over all layers, the stored
 * view (layer_view), and kvc_cache_memory.
 */
#include "test_util.h"

typedef struct kind_case {
  kvc_layer_kind kind;
  int64_t window, max_cache_len;
  int64_t capacity, max_length;
  uint8_t sliding, chunked, compileable;
} kind_case;

static const kind_case CASES[] = {
    {KVC_LAYER_DYNAMIC, 0, 0, -1, -1, 0, 0, 0},
    {KVC_LAYER_DYNAMIC_SLIDING, 5, 0, 4, 5, 1, 0, 0},
    {KVC_LAYER_DYNAMIC_CHUNKED, 7, 0, 6, 7, 1, 1, 0},
    {KVC_LAYER_STATIC, 0, 9, 9, 9, 0, 0, 1},
    {KVC_LAYER_STATIC_SLIDING, 5, 9, 5, 5, 1, 0, 1},
    {KVC_LAYER_STATIC_SLIDING, 50, 9, 9, 9, 1, 0, 1},
    {KVC_LAYER_STATIC_CHUNKED, 4, 9, 4, 4, 1, 1, 1},
    {KVC_LAYER_STATIC_CHUNKED, 40, 6, 6, 6, 1, 1, 1},
};
#define NCASES (sizeof CASES / sizeof *CASES)

static void test_layer_info_per_kind(void) {
  for (size_t i = 0; i < NCASES; i++) {
    const kind_case* k = &CASES[i];
    kvc_cache* c = tu_one_layer_cache(k->kind, k->window, k->max_cache_len);
    REQUIRE(c != NULL);
    kvc_layer_info li = tu_info(c, 0);
    CHECK_EQ_I64(li.kind, k->kind);
    CHECK_EQ_I64(li.window, k->window);
    CHECK_EQ_I64(li.max_cache_len, k->max_cache_len);
    CHECK_EQ_I64(li.capacity, k->capacity);
    CHECK_EQ_I64(li.is_sliding, k->sliding);
    CHECK_EQ_I64(li.is_chunked, k->chunked);
    CHECK_EQ_I64(li.is_compileable, k->compileable);
    CHECK_EQ_I64(li.is_initialized, 0);
    CHECK_EQ_I64(li.records_past, 0);
    CHECK_EQ_I64(li.dtype, KVC_DTYPE_UNSET);
    CHECK_EQ_I64(li.batch_size, 0);
    CHECK_EQ_I64(li.seq_length, 0);
    CHECK_EQ_I64(li.stored_length, 0);
    CHECK_EQ_I64(tu_max_len(c, 0), k->max_length);
    CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), k->max_length);

    REQUIRE_OK(tu_update_tokens(c, 0, 3, 2, 3, 4, 6, 0, NULL, NULL));
    li = tu_info(c, 0);
    CHECK_GEOMETRY(li, KVC_DTYPE_FLOAT32, 3, 2, 4, 6, 3);
    CHECK_EQ_I64(li.capacity, k->capacity);
    kvc_kv st = tu_view(c, 0);
    CHECK_EQ_I64(li.stored_length, st.key.shape[2]);
    CHECK_EQ_I64(tu_max_len(c, 0), k->max_length);
    kvc_cache_destroy(c);
  }
}

/* max_length over all layers is the maximum; a layer index beyond gives -1. */
static void test_max_length_all_layers(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 6, 0), tu_layer(KVC_LAYER_STATIC, 0, 11),
                                 tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 11));
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 11);
  CHECK_EQ_I64(tu_max_len(c, 3), -1);
  kvc_cache_destroy(c);

  kvc_layer_options m[2] = {tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 6, 0), tu_layer(KVC_LAYER_DYNAMIC_CHUNKED, 3, 0)};
  c = tu_custom_cache(2, m);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 6);
  kvc_cache_destroy(c);

  kvc_layer_options d[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_CHUNKED, 3, 0)};
  c = tu_custom_cache(2, d);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 3); /* max(-1, 3), as transformers' max() */
  kvc_cache_destroy(c);
}

/* Views: 4-D, CPU, the cache dtype, head_dim contiguous; index and state errors. */
static void test_layer_view(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC_SLIDING, 3, 8));
  REQUIRE(c != NULL);
  kvc_kv v;
  memset(&v, 0x5a, sizeof v);
  kvc_kv untouched = v;
  CHECK_ERR(kvc_cache_layer_view(c, 0, &v), KVC_ERROR_INVALID_STATE);
  CHECK_ERR(kvc_cache_layer_view(c, 2, &v), KVC_ERROR_OUT_OF_RANGE);
  CHECK(memcmp(&v, &untouched, sizeof v) == 0);
  kvc_layer_info li;
  TU_SIZED(li);
  CHECK_ERR(kvc_cache_layer_info(c, 2, &li), KVC_ERROR_OUT_OF_RANGE);

  for (uint32_t i = 0; i < 2; i++) REQUIRE_OK(tu_update_tokens(c, i, 2, 3, 5, 4, 2, 0, NULL, NULL));
  for (uint32_t i = 0; i < 2; i++) {
    v = tu_view(c, i);
    const kvc_tensor* ts[2] = {&v.key, &v.value};
    for (int j = 0; j < 2; j++) {
      CHECK_EQ_I64(ts[j]->ndim, 4);
      CHECK_EQ_I64(ts[j]->device.device_type, KVC_DEVICE_CPU);
      CHECK_EQ_I64(kvc_dtype_from_data_type(ts[j]->dtype), KVC_DTYPE_FLOAT32);
      CHECK_EQ_I64(ts[j]->dtype.lanes, 1);
      CHECK(ts[j]->strides == NULL || ts[j]->strides[3] == 1);
    }
  }
  v = tu_view(c, 0);
  CHECK_KV_SEQ(v, 0, 1, 2, 3, 4);
  v = tu_view(c, 1);
  CHECK_KV_SEQ(v, 2, 3, 4);
  kvc_cache_destroy(c);
}

/* bytes_used is the stored views; bytes_reserved covers it. */
static void test_memory_info(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0),
                                 tu_layer(KVC_LAYER_STATIC, 0, 10), tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 10));
  REQUIRE(c != NULL);
  kvc_memory_info m = tu_memory(c);
  CHECK_EQ_U64(m.bytes_used, 0);
  CHECK_EQ_U64(m.bytes_reserved, 0);
  const int64_t b = 2, h = 3, dk = 4, dv = 2;
  const uint64_t per_token = (uint64_t)(b * h * (dk + dv)) * 4;
  for (uint32_t i = 0; i < 4; i++) REQUIRE_OK(tu_update_tokens(c, i, b, h, 6, dk, dv, 0, NULL, NULL));
  m = tu_memory(c);
  CHECK_EQ_U64(m.bytes_used, per_token * (6 + 3 + 10 + 4));
  CHECK(m.bytes_reserved >= m.bytes_used);
  kvc_cache_destroy(c);

  kvc_cache* d = tu_holding_tokens(tu_lazy_cache(), 0, b, h, 7, dk, dv);
  REQUIRE(d != NULL);
  m = tu_memory(d);
  CHECK_EQ_U64(m.bytes_used, per_token * 7);
  REQUIRE_OK(kvc_cache_crop(d, -3));
  m = tu_memory(d);
  CHECK_EQ_U64(m.bytes_used, per_token * 4);
  kvc_cache_destroy(d);

  /* float16 halves it */
  kvc_cache* e = tu_lazy_cache();
  REQUIRE(e != NULL);
  tu_tensor k, v;
  tu_tensor_make(&k, KVC_DTYPE_FLOAT16, b, h, 7, dk, NULL);
  tu_tensor_make(&v, KVC_DTYPE_FLOAT16, b, h, 7, dv, NULL);
  REQUIRE_OK(kvc_cache_update(e, 0, &k.t, &v.t, NULL, NULL));
  m = tu_memory(e);
  CHECK_EQ_U64(m.bytes_used, per_token * 7 / 2);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  kvc_cache_destroy(e);
}

/* NULL handles: destroy accepts them, num_layers is 0. */
static void test_null_handles(void) {
  kvc_cache_destroy(NULL);
  CHECK_EQ_I64(kvc_cache_num_layers(NULL), 0);
}

int main(void) {
  TU_RUN(test_layer_info_per_kind);
  TU_RUN(test_max_length_all_layers);
  TU_RUN(test_layer_view);
  TU_RUN(test_memory_info);
  TU_RUN(test_null_handles);
  return tu_finish();
}
