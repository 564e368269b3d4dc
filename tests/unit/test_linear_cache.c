/*
 * test_linear_cache.c: linear-attention layers inside caches: the MAMBA and
 * HYBRID_MAMBA presets and the LINEAR layer types of DynamicCache(config) and
 * StaticCache(config) ('Layer types and presets'), layer info, the cache-level rules of 'The cache as a whole'
 * (sequence-length queries redirected to the first attention layer,
 * has_previous_state, max length, early initialization), and the hybrids'
 * K/V and states together, including crop and reset as Python's MRO
 * resolves them ('Hybrid linear-attention layers').
 */
#include "test_linear.h"

static kvc_cache* preset_cache(kvc_preset preset, const kvc_layer_type* types, uint32_t n, int64_t window,
                               int64_t max_len, uint32_t states, int64_t kernel) {
  kvc_model_config cfg = tu_config(n, types, window, 0);
  cfg.number_of_conv_states = states;
  cfg.conv_kernel = kernel;
  const kvc_cache_options defaults = KVC_CACHE_OPTIONS_INIT;
  return tu_preset_cache(preset, &cfg, max_len, defaults.offload);
}

static kvc_error* seq_err(const kvc_cache* c, uint32_t layer) {
  int64_t v = 0;
  return kvc_cache_seq_length(c, layer, &v);
}

static kvc_error* mask_err(const kvc_cache* c, uint32_t layer) {
  int64_t a = 0, b = 0;
  return kvc_cache_mask_sizes(c, 3, layer, &a, &b);
}

/* MambaCache: every layer LINEAR with the config's K and number of states. */
static void test_mamba_preset(void) {
  kvc_cache* c = preset_cache(KVC_PRESET_MAMBA, NULL, 3, 0, 0, 2, 4);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(kvc_cache_num_layers(c), 3);
  for (uint32_t i = 0; i < 3; i++) {
    kvc_layer_info li = tu_info(c, i);
    CHECK_EQ_I64(li.kind, KVC_LAYER_LINEAR);
    CHECK_EQ_I64(li.num_states, 2);
    CHECK_EQ_I64(li.conv_kernel_size, 4);
    CHECK(li.is_linear);
    CHECK(li.is_compileable);
    CHECK(!li.is_initialized);
    CHECK(!li.has_previous_state);
    CHECK_EQ_I64(li.capacity, 0);
    CHECK_EQ_I64(tu_max_len(c, (int32_t)i), -1);
  }
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), -1);
  /* No attention layer: sequence lengths do not exist ('The cache as a whole'), except beyond the layers. */
  CHECK_ERR(seq_err(c, 0), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(seq_err(c, 1), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(mask_err(c, 0), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(mask_err(c, 2), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_I64(tu_seq(c, 3), 0);
  CHECK_MASK(c, 3, 7, 3, 0);
  /* K comes from the config: a 1-column first input is padded to 4. */
  kvc_tensor ret;
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  o.state_index = 1;
  REQUIRE_OK(tl_conv(c, 2, 1, 3, 0, 1, &o, &ret));
  const int64_t pad[4] = {-1, -1, -1, 0};
  CHECK_CONV(&ret, 1, 3, pad, 4, NULL);
  CHECK_EQ_I64(tl_has_prev(c, KVC_ALL_LAYERS, 1), 1); /* the last linear layer is 2 */
  CHECK_EQ_I64(tl_has_prev(c, KVC_ALL_LAYERS, -1), 0); /* its state 0 has not been updated */
  CHECK_EQ_I64(tl_has_prev(c, 0, 1), 0);
  CHECK_EQ_I64(tl_has_prev(c, 9, 0), 0); /* beyond the layers: False */
  kvc_layer_info li = tu_info(c, 2);
  CHECK(li.is_initialized);
  CHECK_EQ_I64(li.batch_size, 1);
  CHECK_EQ_I64(li.dtype, KVC_DTYPE_FLOAT32);
  /* No K/V anywhere. */
  kvc_kv kv;
  CHECK_ERR(kvc_cache_layer_view(c, 2, &kv), KVC_ERROR_UNSUPPORTED);
  CHECK_ERR(tu_update_tokens(c, 0, 1, 1, 1, 2, 2, 0, NULL, NULL), KVC_ERROR_UNSUPPORTED);
  int64_t b = 0;
  CHECK_OK(kvc_cache_batch_size(c, &b));
  CHECK_EQ_I64(b, -1); /* only static attention layers report a batch size */
  kvc_cache_destroy(c);
}

/* Jamba: LINEAR for mamba layers, DYNAMIC for attention layers; layer 0 queries go to the first attention layer. */
static void test_hybrid_mamba_preset(void) {
  const kvc_layer_type t[4] = {KVC_LAYER_TYPE_LINEAR_ATTENTION, KVC_LAYER_TYPE_LINEAR_ATTENTION,
                               KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_LINEAR_ATTENTION};
  kvc_cache* c = preset_cache(KVC_PRESET_HYBRID_MAMBA, t, 4, 0, 0, 0, 3);
  REQUIRE(c != NULL);
  const kvc_layer_kind want[4] = {KVC_LAYER_LINEAR, KVC_LAYER_LINEAR, KVC_LAYER_DYNAMIC, KVC_LAYER_LINEAR};
  for (uint32_t i = 0; i < 4; i++) CHECK_EQ_I64(tu_info(c, i).kind, want[i]);
  CHECK_EQ_I64(tu_info(c, 0).num_states, 1);
  REQUIRE_OK(tu_update_tokens(c, 2, 2, 1, 5, 2, 2, 0, NULL, NULL));
  CHECK_EQ_I64(tu_seq(c, 0), 5); /* redirected to layer 2 */
  CHECK_EQ_I64(tu_seq(c, 2), 5);
  CHECK_ERR(seq_err(c, 1), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(seq_err(c, 3), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_MASK(c, 2, 0, 7, 0);
  CHECK_ERR(mask_err(c, 3), KVC_ERROR_INVALID_ARGUMENT);
  int v = 0;
  CHECK_ERR(kvc_cache_has_previous_state(c, 2, -1, &v), KVC_ERROR_INVALID_ARGUMENT);
  REQUIRE_OK(tl_conv(c, 3, 2, 2, 0, 3, NULL, NULL));
  CHECK_EQ_I64(tl_has_prev(c, KVC_ALL_LAYERS, -1), 1);
  CHECK_EQ_I64(tl_has_prev(c, 0, -1), 0);
  /* The preset needs layer_types. */
  kvc_model_config cfg = tu_config(2, NULL, 0, 0);
  kvc_cache_options o = tu_preset_options(KVC_PRESET_HYBRID_MAMBA, &cfg, 0, KVC_OFFLOAD_DEFAULT);
  kvc_cache* bad = NULL;
  CHECK_ERR(kvc_cache_create(&o, &bad), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(bad == NULL);
  kvc_cache_destroy(c);
}

/* DynamicCache(config) / StaticCache(config) map linear_attention, hybrid and hybrid_sliding ('Layer types and presets'). */
static void test_config_layer_types(void) {
  const kvc_layer_type t[4] = {KVC_LAYER_TYPE_HYBRID, KVC_LAYER_TYPE_HYBRID_SLIDING, KVC_LAYER_TYPE_LINEAR_ATTENTION,
                               KVC_LAYER_TYPE_FULL_ATTENTION};
  kvc_cache* d = preset_cache(KVC_PRESET_DYNAMIC, t, 4, 3, 0, 2, 0);
  kvc_cache* s = preset_cache(KVC_PRESET_STATIC, t, 4, 3, 6, 2, 0);
  REQUIRE(d != NULL && s != NULL);
  const kvc_layer_kind dk[4] = {KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_LINEAR_DYNAMIC_SLIDING, KVC_LAYER_LINEAR,
                                KVC_LAYER_DYNAMIC};
  const kvc_layer_kind sk[4] = {KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR_STATIC_SLIDING, KVC_LAYER_LINEAR,
                                KVC_LAYER_STATIC};
  /* transformers 5.24's is_linear: the layers without K/V only (5.23's, every linear layer but the full-attention
   * dynamic hybrid, is what transformers_release 52300 answers: replayed by v5_linear_layers). */
  const int lin_d[4] = {0, 0, 1, 0}, lin_s[4] = {0, 0, 1, 0};
  const int comp_d[4] = {0, 0, 1, 0}, comp_s[4] = {1, 1, 1, 1};
  const int64_t win[4] = {0, 3, 0, 0};
  for (uint32_t i = 0; i < 4; i++) {
    kvc_layer_info a = tu_info(d, i), b = tu_info(s, i);
    CHECK_EQ_I64(a.kind, dk[i]);
    CHECK_EQ_I64(b.kind, sk[i]);
    CHECK_EQ_I64(a.is_linear, lin_d[i]);
    CHECK_EQ_I64(b.is_linear, lin_s[i]);
    CHECK_EQ_I64(a.is_compileable, comp_d[i]);
    CHECK_EQ_I64(b.is_compileable, comp_s[i]);
    CHECK_EQ_I64(a.window, win[i]);
    CHECK_EQ_I64(b.window, win[i]);
    CHECK_EQ_I64(a.num_states, i < 3 ? 2 : 0);
    CHECK_EQ_I64(a.is_sliding, i == 1);
  }
  CHECK_EQ_I64(tu_info(s, 0).max_cache_len, 6);
  CHECK_EQ_I64(tu_info(s, 1).capacity, 3);
  /* get_max_length of every linear kind is -1, even the static hybrids (MRO, 'Hybrid linear-attention layers'); the cache's is the static M. */
  for (int32_t i = 0; i < 3; i++) {
    CHECK_EQ_I64(tu_max_len(d, i), -1);
    CHECK_EQ_I64(tu_max_len(s, i), -1);
  }
  CHECK_EQ_I64(tu_max_len(s, 3), 6);
  CHECK_EQ_I64(tu_max_len(s, KVC_ALL_LAYERS), 6);
  CHECK_EQ_I64(tu_max_len(d, KVC_ALL_LAYERS), -1);
  /* Early initialization skips every linear kind (supports_early_init is False for all five). */
  kvc_init_options io = tu_init_options(2, 1, 4, 0, KVC_DTYPE_FLOAT16);
  REQUIRE_OK(kvc_cache_early_initialization(s, &io));
  for (uint32_t i = 0; i < 3; i++) CHECK(!tu_info(s, i).is_initialized);
  CHECK(tu_info(s, 3).is_initialized);
  /* Per-layer lists: the entries of linear layers are not used, so they may be anything. */
  const int64_t heads[4] = {0, -1, 0, 2}, dims[4] = {0, 0, 0, 8};
  io.num_kv_heads_per_layer = heads;
  io.head_dim_per_layer = dims;
  REQUIRE_OK(kvc_cache_early_initialization(d, &io));
  CHECK(!tu_info(d, 0).is_initialized);
  CHECK_EQ_I64(tu_info(d, 3).num_kv_heads, 2);
  TU_DESTROY(d, s);
}

/* A dynamic hybrid holds K/V and states side by side; reset clears both. */
static void test_hybrid_kv_and_states(void) {
  kvc_layer_kind k = KVC_LAYER_LINEAR_DYNAMIC;
  kvc_cache* c = tl_cache(1, &k, 0, 0, 1, 3);
  REQUIRE(c != NULL);
  kvc_kv kv;
  REQUIRE_OK(tu_update_tokens(c, 0, 2, 2, 4, 3, 2, 0, NULL, &kv));
  CHECK_KV_SEQ(kv, 0, 1, 2, 3);
  kvc_tensor ret;
  REQUIRE_OK(tl_conv(c, 0, 2, 5, 0, 4, NULL, &ret));
  int64_t shape[3] = {2, 5, 2};
  tl_tensor s;
  tl_rec_input(&s, KVC_DTYPE_FLOAT32, 3, shape, 7.0f);
  kvc_tensor rv;
  REQUIRE_OK(kvc_cache_update_recurrent_state(c, 0, 0, &s.t, &rv));
  float f[20];
  REQUIRE_EQ_I64(tu_read_view(&rv, f), 20);
  CHECK_EQ_F64(f[0], 7.0);
  CHECK_EQ_F64(f[19], 26.0);
  tl_free(&s);
  REQUIRE_OK(tu_update_tokens(c, 0, 2, 2, 1, 3, 2, 4, NULL, &kv));
  CHECK_KV_SEQ(kv, 0, 1, 2, 3, 4);
  CHECK_EQ_I64(tu_seq(c, 0), 5);
  CHECK_MASK(c, 1, 0, 6, 0);
  kvc_layer_info li = tu_info(c, 0);
  CHECK(!li.is_linear);
  CHECK(li.has_previous_state);
  CHECK_EQ_I64(li.conv_kernel_size, 3);
  kvc_tensor st = tl_conv_view(c, 0, 0);
  const int64_t last3[3] = {1, 2, 3};
  CHECK_CONV(&st, 2, 5, last3, 3, NULL);
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 0);
  st = tl_conv_view(c, 0, 0);
  const int64_t zeros[3] = {-1, -1, -1};
  CHECK_CONV(&st, 2, 5, zeros, 3, NULL);
  /* A new sequence on the same layer. */
  REQUIRE_OK(tu_update_tokens(c, 0, 2, 2, 2, 3, 2, 50, NULL, &kv));
  CHECK_KV_SEQ(kv, 50, 51);
  kvc_cache_destroy(c);
}

/* The static hybrids: static K/V (counter, zero padding) and the states. */
static void test_static_hybrids(void) {
  const kvc_layer_kind kinds[2] = {KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR_STATIC_SLIDING};
  kvc_cache* c = tl_cache(2, kinds, 3, 5, 1, 2);
  REQUIRE(c != NULL);
  kvc_kv kv;
  REQUIRE_OK(tu_update_tokens(c, 0, 1, 1, 2, 2, 2, 0, NULL, &kv));
  CHECK_KV_SEQ(kv, 0, 1, -1, -1, -1);
  REQUIRE_OK(tu_update_tokens(c, 1, 1, 1, 4, 2, 2, 0, NULL, &kv));
  CHECK_KV_SEQ(kv, 0, 1, 2, 3);
  CHECK_EQ_I64(tu_seq(c, 1), 4);
  CHECK_MASK(c, 1, 1, 3, 2);
  REQUIRE_OK(tl_conv(c, 1, 1, 2, 0, 1, NULL, NULL));
  int64_t b = 0;
  CHECK_OK(kvc_cache_batch_size(c, &b));
  CHECK_EQ_I64(b, 1);
  /* Static kinds have no select / repeat; reorder works on both parts. */
  const int64_t idx[1] = {0};
  CHECK_ERR(kvc_cache_batch_select_indices(c, idx, 1), KVC_ERROR_UNSUPPORTED);
  CHECK_ERR(kvc_cache_batch_repeat_interleave(c, 2), KVC_ERROR_UNSUPPORTED);
  CHECK_OK(kvc_cache_reorder(c, idx, 1));
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  CHECK_LAYER_SEQ(c, 0, -1, -1, -1, -1, -1);
  kvc_cache_destroy(c);
}

/* Crop as the MRO resolves it: dynamic hybrids crop both parts, static hybrids only the states. */
static void test_hybrid_crop(void) {
  const kvc_layer_kind kinds[3] = {KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR_DYNAMIC_SLIDING};
  kvc_cache* c = tl_cache(3, kinds, 4, 8, 1, 2);
  REQUIRE(c != NULL);
  /* Without recording the linear part refuses, even though a dynamic layer alone would accept. */
  CHECK_ERR(kvc_cache_crop(c, -1), KVC_ERROR_INVALID_STATE);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  for (uint32_t i = 0; i < 3; i++) CHECK(tu_info(c, i).records_past);
  for (uint32_t i = 0; i < 3; i++) {
    REQUIRE_OK(tu_update_tokens(c, i, 1, 1, 6, 2, 2, 0, NULL, NULL));
    REQUIRE_OK(tl_conv(c, i, 1, 1, 0, 6, NULL, NULL));
  }
  CHECK_ERR(kvc_cache_crop(c, 1), KVC_ERROR_INVALID_STATE);
  REQUIRE_OK(kvc_cache_crop(c, -2));
  const int64_t conv[2] = {2, 3};
  for (uint32_t i = 0; i < 3; i++) {
    kvc_tensor st = tl_conv_view(c, i, 0);
    CHECK_CONV(&st, 1, 1, conv, 2, NULL);
  }
  CHECK_EQ_I64(tu_seq(c, 0), 4); /* dynamic part cropped */
  CHECK_EQ_I64(tu_seq(c, 1), 6); /* static part untouched */
  CHECK_EQ_I64(tu_seq(c, 2), 4); /* recording sliding part rolled back by 2 */
  CHECK_LAYER_SEQ(c, 2, 1, 2, 3);
  kvc_cache_destroy(c);
}

/* A pure linear layer has no update; update_all over a cache with one is refused before anything is written. */
static void test_no_kv_update_on_linear(void) {
  const kvc_layer_kind kinds[2] = {KVC_LAYER_DYNAMIC, KVC_LAYER_LINEAR};
  kvc_cache* c = tl_cache(2, kinds, 0, 0, 1, 2);
  REQUIRE(c != NULL);
  tu_tensor k[2], v[2];
  kvc_tensor kt[2], vt[2];
  for (int i = 0; i < 2; i++) {
    tu_tensor_tokens(&k[i], 1, 1, 1, 2, 0, 0);
    tu_tensor_tokens(&v[i], 1, 1, 1, 2, 0, 1);
    kt[i] = k[i].t;
    vt[i] = v[i].t;
  }
  CHECK_ERR(kvc_cache_update_all(c, 2, kt, vt, NULL, NULL), KVC_ERROR_UNSUPPORTED);
  CHECK(!tu_info(c, 0).is_initialized);
  tu_tensors_free(k, v, 2);
  kvc_cache_destroy(c);
}

/* Several recurrent-state shapes and dtypes, written in place: the view's address stays, contents follow. */
static void test_recurrent_state_in_place(void) {
  kvc_cache* c = tl_linear(3, 2);
  REQUIRE(c != NULL);
  const int64_t s1[1] = {2}, s4[4] = {2, 3, 2, 2}, s6[6] = {2, 1, 2, 1, 3, 2};
  const int ndims[3] = {1, 4, 6};
  const int64_t* shapes[3] = {s1, s4, s6};
  const kvc_dtype dts[3] = {KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16};
  for (uint32_t i = 0; i < 3; i++) {
    tl_tensor a, b;
    tl_rec_input(&a, dts[i], ndims[i], shapes[i], 1.0f);
    tl_rec_input(&b, dts[i], ndims[i], shapes[i], 100.0f);
    kvc_tensor r1, r2;
    REQUIRE_OK(kvc_cache_update_recurrent_state(c, 0, i, &a.t, &r1));
    void* first = r1.data;
    REQUIRE_OK(kvc_cache_update_recurrent_state(c, 0, i, &b.t, &r2));
    CHECK_EQ_PTR(r2.data, first);
    CHECK_EQ_I64(r2.ndim, ndims[i]);
    for (int d = 0; d < ndims[i]; d++) CHECK_EQ_I64(r2.shape[d], shapes[i][d]);
    CHECK_EQ_I64(kvc_dtype_from_data_type(r2.dtype), dts[i]);
    size_t bytes = (size_t)tl_numel(ndims[i], shapes[i]) * tu_dtype_bytes(dts[i]);
    unsigned char* got = (unsigned char*)malloc(bytes);
    REQUIRE(got != NULL);
    CHECK_EQ_U64(tu_read_view_bytes(&r2, got), bytes);
    CHECK(memcmp(got, b.alloc, bytes) == 0);
    free(got);
    tl_free(&a);
    tl_free(&b);
  }
  /* A recurrent state alone does not count as a previous state (only conv updates do, as transformers). */
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 0);
  /* Strided input: a transposed recurrent state reads back in logical order. */
  const int64_t shape[3] = {2, 3, 4};
  float vals[24];
  for (int i = 0; i < 24; i++) vals[i] = (float)(i + 1);
  tl_tensor t;
  tl_make(&t, KVC_DTYPE_FLOAT32, 3, shape, vals, 1);
  kvc_cache* d = tl_linear(1, 2);
  REQUIRE(d != NULL);
  kvc_tensor r;
  REQUIRE_OK(kvc_cache_update_recurrent_state(d, 0, 0, &t.t, &r));
  float back[24];
  REQUIRE_EQ_I64(tu_read_view(&r, back), 24);
  CHECK(memcmp(back, vals, sizeof vals) == 0);
  tl_free(&t);
  TU_DESTROY(d, c);
}

/* State views of unallocated states, and memory accounting of states. */
static void test_views_and_memory(void) {
  kvc_cache* c = tl_linear(2, 3);
  REQUIRE(c != NULL);
  kvc_tensor cv, rv;
  memset(&cv, 0xab, sizeof cv);
  memset(&rv, 0xab, sizeof rv);
  REQUIRE_OK(kvc_cache_state_view(c, 0, 1, &cv, &rv));
  CHECK(cv.data == NULL && cv.ndim == 0);
  CHECK(rv.data == NULL && rv.ndim == 0);
  CHECK_EQ_I64(cv.device.device_type, KVC_DEVICE_CPU);
  CHECK_EQ_I64(rv.byte_offset, 0);
  CHECK_OK(kvc_cache_state_view(c, 0, 0, NULL, NULL));
  CHECK_EQ_U64(tu_memory(c).bytes_state, 0);
  REQUIRE_OK(tl_conv(c, 0, 2, 5, 0, 2, NULL, NULL));
  const int64_t shape[2] = {2, 7};
  tl_tensor s;
  tl_rec_input(&s, KVC_DTYPE_FLOAT16, 2, shape, 0.0f);
  REQUIRE_OK(kvc_cache_update_recurrent_state(c, 0, 1, &s.t, NULL));
  tl_free(&s);
  kvc_memory_info m = tu_memory(c);
  /* The conv buffer keeps 4K time slots (so that decoding moves it back once every 3K columns), plus the SSM state. */
  CHECK_EQ_U64(m.bytes_state, 2u * 5u * 12u * 4u + 2u * 7u * 2u);
  CHECK_EQ_U64(m.bytes_reserved, m.bytes_state);
  CHECK_EQ_U64(m.bytes_used, 0);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_mamba_preset);
  TU_RUN(test_hybrid_mamba_preset);
  TU_RUN(test_config_layer_types);
  TU_RUN(test_hybrid_kv_and_states);
  TU_RUN(test_static_hybrids);
  TU_RUN(test_hybrid_crop);
  TU_RUN(test_no_kv_update_on_linear);
  TU_RUN(test_recurrent_state_in_place);
  TU_RUN(test_views_and_memory);
  return tu_finish();
}
