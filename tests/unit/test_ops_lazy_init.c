/*
 * How layers come to exist and get their geometry: lazy DynamicCache (layers
 * appear up to the updated index), early_initialization (allocate before the
 * first update, skip initialized layers, per-layer heads and head dims), and
 * create_from_tensors (the legacy tuple format / DDP constructor).
 */
#include "test_util.h"

/* Skipped indices of a lazy cache get uninitialized layers with the lazy-cache answers. */
static void test_lazy_cache_layers(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), -1);
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  CHECK_MASK(c, 5, 0, 5, 0);
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 3, 1, 2, 4, 3, 3, 0, NULL, &out));
  CHECK_KV_SEQ(out, 0, 1, 2, 3);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 4);
  for (uint32_t i = 0; i < 3; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.kind, KVC_LAYER_DYNAMIC);
    CHECK_EQ_I64(li.is_initialized, 0);
    CHECK_EQ_I64(li.dtype, KVC_DTYPE_UNSET);
    CHECK_EQ_I64(li.batch_size, 0);
    CHECK_EQ_I64(tu_seq(c, i), 0);
    CHECK_MASK(c, 3, i, 3, 0);
    CHECK_EQ_I64(tu_max_len(c, (int32_t)i), -1);
    kvc_kv v;
    CHECK_ERR(kvc_cache_layer_view(c, i, &v), KVC_ERROR_INVALID_STATE);
  }
  kvc_layer_info li = tu_info(c, 3);
  CHECK_EQ_I64(li.is_initialized, 1);
  CHECK_EQ_I64(li.kind, KVC_LAYER_DYNAMIC);
  CHECK_EQ_I64(li.seq_length, 4);
  /* beyond the layers: the lazy-cache rules */
  CHECK_EQ_I64(tu_seq(c, 9), 0);
  CHECK_EQ_I64(tu_max_len(c, 9), -1);
  CHECK_MASK(c, 2, 9, 2, 0);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), -1);
  /* a skipped layer can be filled later with its own geometry */
  REQUIRE_OK(tu_update_tokens(c, 1, 3, 1, 2, 5, 6, 0, NULL, &out));
  CHECK_SHAPE(out.key, 3, 1, 2, 5);
  CHECK_SHAPE(out.value, 3, 1, 2, 6);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 4);
  kvc_cache_destroy(c);
}

/* The same through an explicit KVC_PRESET_DYNAMIC without a config. */
static void test_lazy_preset_without_config(void) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_create(&o, &c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  REQUIRE_OK(tu_update_tokens(c, 1, 1, 1, 1, 2, 2, 0, NULL, NULL));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 2);
  kvc_cache_destroy(c);
}

static const kvc_layer_options* four_kinds(void) {
  static kvc_layer_options l[4];
  static const kvc_layer_kind kinds[4] = {KVC_LAYER_STATIC, KVC_LAYER_DYNAMIC, KVC_LAYER_STATIC_SLIDING,
                                          KVC_LAYER_DYNAMIC_SLIDING};
  static const int64_t wm[4][2] = {{0, 5}, {0, 0}, {3, 5}, {3, 0}}; /* window, max_cache_len */
  return tu_layers(l, 4, kinds, wm);
}

static void test_early_initialization(void) {
  kvc_cache* c = tu_custom_cache(4, four_kinds());
  REQUIRE(c != NULL);
  kvc_init_options io = tu_init_options(2, 3, 4, 6, KVC_DTYPE_FLOAT16);
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  for (uint32_t i = 0; i < 4; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_GEOMETRY(li, KVC_DTYPE_FLOAT16, 2, 3, 4, 6, 0);
    CHECK_EQ_I64(tu_seq(c, i), 0);
  }
  /* static buffers exist, zeroed; dynamic layers are empty */
  kvc_kv st = tu_view(c, 0);
  CHECK_SHAPE(st.key, 2, 3, 5, 4);
  CHECK_SHAPE(st.value, 2, 3, 5, 6);
  CHECK_TOKENS(st, TU_LIST(-1, -1, -1, -1, -1), 5);
  st = tu_view(c, 1);
  CHECK_SHAPE(st.key, 2, 3, 0, 4);
  st = tu_view(c, 2);
  CHECK_SHAPE(st.key, 2, 3, 3, 4);
  int64_t bs = -9;
  CHECK_OK(kvc_cache_batch_size(c, &bs));
  CHECK_EQ_I64(bs, 2);
  /* the geometry is fixed: a float32 update or another head count is refused */
  CHECK_ERR(tu_update_tokens(c, 1, 2, 3, 1, 4, 6, 0, NULL, NULL), KVC_ERROR_DTYPE_MISMATCH);
  tu_tensor k, v;
  float ones[2 * 2 * 1 * 4];
  for (int i = 0; i < 16; i++) ones[i] = 1.0f;
  tu_tensor_make(&k, KVC_DTYPE_FLOAT16, 2, 2, 1, 4, ones);
  tu_tensor_make(&v, KVC_DTYPE_FLOAT16, 2, 2, 1, 6, NULL);
  CHECK_ERR(kvc_cache_update(c, 0, &k.t, &v.t, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  kvc_cache_destroy(c);
}

/* Layers already initialized by an update keep their geometry and contents. */
static void test_early_initialization_skips_initialized(void) {
  kvc_cache* c = tu_holding_tokens(tu_custom_cache(4, four_kinds()), 0, 1, 1, 2, 2, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 3, 1, 1, 2, 2, 2, 0, NULL, NULL));
  kvc_init_options io = tu_init_options(4, 2, 8, 0, KVC_DTYPE_BFLOAT16);
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  const uint32_t touched[2] = {0, 3};
  for (int j = 0; j < 2; j++) {
    kvc_layer_info li = tu_info(c, touched[j]);
    CHECK_EQ_I64(li.dtype, KVC_DTYPE_FLOAT32);
    CHECK_EQ_I64(li.batch_size, 1);
    CHECK_EQ_I64(li.num_kv_heads, 1);
    CHECK_EQ_I64(li.seq_length, 2);
  }
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1, -1, -1, -1);
  for (uint32_t i = 1; i < 3; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.dtype, KVC_DTYPE_BFLOAT16);
    CHECK_EQ_I64(li.batch_size, 4);
    CHECK_EQ_I64(li.k_head_dim, 8);
    CHECK_EQ_I64(li.v_head_dim, 8); /* 0 = same as k_head_dim */
  }
  kvc_cache_destroy(c);
}

/* Per-layer heads and head dims (head_dim_per_layer sets keys and values). */
static void test_early_initialization_per_layer(void) {
  kvc_cache* c = tu_custom_cache(4, four_kinds());
  REQUIRE(c != NULL);
  const int64_t heads[4] = {1, 2, 3, 4};
  const int64_t dims[4] = {8, 4, 2, 1};
  kvc_init_options io = KVC_INIT_OPTIONS_INIT;
  io.batch_size = 1;
  io.num_kv_heads = 99; /* ignored where the per-layer array is given */
  io.k_head_dim = 99;
  io.dtype = KVC_DTYPE_FLOAT32;
  io.num_kv_heads_per_layer = heads;
  io.head_dim_per_layer = dims;
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  for (uint32_t i = 0; i < 4; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.num_kv_heads, heads[i]);
    CHECK_EQ_I64(li.k_head_dim, dims[i]);
    CHECK_EQ_I64(li.v_head_dim, dims[i]);
    kvc_kv out;
    CHECK_OK(tu_update_tokens(c, i, 1, heads[i], 1, dims[i], dims[i], 0, NULL, &out));
  }
  kvc_cache_destroy(c);
}

/* A lazy cache without layers has nothing to initialize. */
static void test_early_initialization_lazy(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  kvc_init_options io = tu_init_options(1, 1, 2, 0, KVC_DTYPE_FLOAT32);
  CHECK_OK(kvc_cache_early_initialization(c, &io));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  kvc_cache_destroy(c);
}

/* create_from_tensors: a lazy DynamicCache by default, any preset otherwise. */
static void test_create_from_tensors(void) {
  tu_tensor k[3], v[3];
  kvc_tensor ka[3], va[3];
  for (int i = 0; i < 3; i++) {
    tu_tensor_tokens(&k[i], 2, 2, 3 + i, 4, 10 * i, 0);
    tu_tensor_tokens(&v[i], 2, 2, 3 + i, 5, 10 * i, 1);
    ka[i] = k[i].t;
    va[i] = v[i].t;
  }
  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_create_from_tensors(NULL, 3, ka, va, &c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 3);
  for (uint32_t i = 0; i < 3; i++) {
    int64_t want[8];
    kvc_kv st = tu_view(c, i);
    CHECK_TOKENS(st, tu_range(want, 10 * i, 10 * i + 3 + i), 3 + i);
    CHECK_EQ_I64(tu_info(c, i).kind, KVC_LAYER_DYNAMIC);
  }
  kvc_cache_destroy(c);

  /* the tensors were copied: changing them afterwards does not reach the cache */
  kvc_layer_options l[3] = {tu_layer(KVC_LAYER_STATIC, 0, 8), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 3, 0),
                            tu_layer(KVC_LAYER_STATIC_SLIDING, 4, 8)};
  kvc_cache_options o = tu_custom_options(3, l);
  c = NULL;
  REQUIRE_OK(kvc_cache_create_from_tensors(&o, 3, ka, va, &c));
  for (int i = 0; i < 3; i++) memset(k[i].alloc, 0, 4);
  kvc_kv st = tu_view(c, 0);
  CHECK_KV_SEQ(st, 0, 1, 2, -1, -1, -1, -1, -1);
  st = tu_view(c, 1);
  CHECK_KV_SEQ(st, 12, 13);
  CHECK_EQ_I64(tu_seq(c, 1), 4);
  st = tu_view(c, 2);
  CHECK_KV_SEQ(st, 21, 22, 23, 24);
  CHECK_EQ_I64(tu_seq(c, 2), 5);
  kvc_cache_destroy(c);

  /* more tensors than a fixed layer list holds, or a bad tensor: nothing is created */
  kvc_cache* sentinel = (kvc_cache*)&o;
  c = sentinel;
  o.num_layers = 2;
  CHECK_FAILS(kvc_cache_create_from_tensors(&o, 3, ka, va, &c));
  CHECK_EQ_PTR(c, sentinel);
  va[2] = va[0]; /* the seq length of its value differs from its key */
  CHECK_FAILS(kvc_cache_create_from_tensors(NULL, 3, ka, va, &c));
  CHECK_EQ_PTR(c, sentinel);
  tu_tensors_free(k, v, 3);
}

int main(void) {
  TU_RUN(test_lazy_cache_layers);
  TU_RUN(test_lazy_preset_without_config);
  TU_RUN(test_early_initialization);
  TU_RUN(test_early_initialization_skips_initialized);
  TU_RUN(test_early_initialization_per_layer);
  TU_RUN(test_early_initialization_lazy);
  TU_RUN(test_create_from_tensors);
  return tu_finish();
}
