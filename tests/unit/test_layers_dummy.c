/*
 * KVC_LAYER_DUMMY, transformers' DummyLayer (5.23; docs/transformers-5.24.md,
 * item 11): a layer that stores nothing. Update is refused and leaves the
 * cache as it was; every other operation passes over it; the length queries
 * treat it as transformers treats a layer that is not a CacheLayerMixin; the
 * presets build it for KVC_LAYER_TYPE_DUMMY.
 */
#include "test_errors.h"
#include "test_linear.h"

#define B 2
#define H 1
#define D 2

/* [DYNAMIC, DUMMY, STATIC(8)]: the dummy between two attention kinds. */
static kvc_cache* mixed(void) {
  return TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DUMMY, 0, 0),
                         tu_layer(KVC_LAYER_STATIC, 0, 8));
}

static void test_info_and_queries(void) {
  kvc_cache* c = mixed();
  REQUIRE(c != NULL);
  kvc_layer_info li = tu_info(c, 1);
  CHECK_EQ_I64(li.kind, KVC_LAYER_DUMMY);
  CHECK_EQ_I64(li.is_initialized, 0); /* no storage, ever */
  CHECK_EQ_I64(li.is_compileable, 1); /* DummyLayer.is_compileable */
  CHECK_EQ_I64(li.is_sliding, 0);
  CHECK_EQ_I64(li.is_linear, 0);
  CHECK_EQ_I64(li.capacity, 0);
  CHECK_EQ_I64(li.seq_length, 0);
  CHECK_EQ_I64(li.dtype, KVC_DTYPE_UNSET);
  CHECK_EQ_I64(tu_max_len(c, 1), -1);
  CHECK_EQ_I64(tu_max_len(c, KVC_ALL_LAYERS), 8); /* the dummy's -1 does not count */
  uint8_t croppable = 0;
  CHECK_OK(kvc_cache_is_croppable(c, 1, &croppable));
  CHECK_EQ_I64(croppable, 1);
  CHECK_OK(kvc_cache_is_croppable(c, KVC_ALL_LAYERS, &croppable));
  CHECK_EQ_I64(croppable, 1);

  REQUIRE_OK(tu_update_tokens(c, 0, B, H, 3, D, D, 0, NULL, NULL));
  REQUIRE_OK(tu_update_tokens(c, 2, B, H, 3, D, D, 0, NULL, NULL));
  CHECK_EQ_I64(tu_seq(c, 0), 3);
  int64_t v = -7, off = -7;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_seq_length(c, 1, &v), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_seq_length",
                       "layer 1 is a dummy layer", "does not track a sequence length");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_mask_sizes(c, 2, 1, &v, &off), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_mask_sizes", "layer 1 is a dummy layer");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_query_offset(c, 1, &v), KVC_ERROR_INVALID_ARGUMENT, "layer 1 is a dummy layer");
  CHECK_EQ_I64(v, -7);
  CHECK_EQ_I64(off, -7);
  kvc_kv kv;
  memset(&kv, 0, sizeof kv);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_view(c, 1, &kv), KVC_ERROR_UNSUPPORTED, "kvc_cache_layer_view", "layer 1",
                       "dummy", "stores nothing");
  int prev = -1;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_has_previous_state(c, 1, -1, &prev), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_has_previous_state", "layer 1 is a dummy layer");
  int64_t bs = 0;
  CHECK_OK(kvc_cache_batch_size(c, &bs));
  CHECK_EQ_I64(bs, B); /* the static layer's; the dummy has none */
  kvc_memory_info m;
  TU_SIZED(m);
  kvc_cache* only = tu_one_layer_cache(KVC_LAYER_DUMMY, 0, 0);
  REQUIRE(only != NULL);
  CHECK_OK(kvc_cache_memory(only, &m));
  CHECK_EQ_U64(m.bytes_reserved, 0);
  EXPECT_ERR_UNCHANGED(only, kvc_cache_seq_length(only, 0, &v), KVC_ERROR_INVALID_ARGUMENT, "layer 0 is a dummy layer",
                       "no attention layer");
  TU_DESTROY(only, c);
}

/* Layer 0 dummy: "the cache" is the first layer with K/V, as transformers' get_seq_length(0) and get_mask_sizes. */
static void test_layer_zero_asks_the_first_attention_layer(void) {
  kvc_cache* c = tu_holding_tokens(TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DUMMY, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0)),
                                   1, B, H, 4, D, D);
  REQUIRE(c != NULL);
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  CHECK_MASK(c, 2, 0, 6, 0);
  int64_t q = -1;
  CHECK_OK(kvc_cache_query_offset(c, 0, &q));
  CHECK_EQ_I64(q, 4);
  kvc_cache_destroy(c);
}

static void test_update_is_refused(void) {
  kvc_cache* c = tu_holding_tokens(mixed(), 0, B, H, 2, D, D);
  REQUIRE(c != NULL);
  kvc_kv kv;
  memset(&kv, 0x5a, sizeof kv);
  EXPECT_ERR_UNCHANGED(c, tu_update_tokens(c, 1, B, H, 2, D, D, 0, NULL, &kv), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_update", "layer 1 is a dummy layer", "stores nothing", "2 tokens");
  /* update_all over the dummy: all or nothing, so layer 0 does not move either. */
  tu_tensor k[3], v[3];
  kvc_tensor ks[3], vs[3];
  for (int i = 0; i < 3; i++) {
    tu_tensor_tokens(&k[i], B, H, 1, D, 10, 0);
    tu_tensor_tokens(&v[i], B, H, 1, D, 10, 1);
    ks[i] = k[i].t;
    vs[i] = v[i].t;
  }
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_all(c, 3, ks, vs, NULL, NULL), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_update_all", "layer 1 is a dummy layer");
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  /* Building a cache from tensors that name the dummy creates nothing. */
  kvc_layer_options lo[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DUMMY, 0, 0)};
  kvc_cache_options o = tu_custom_options(2, lo);
  kvc_cache* made = NULL;
  EXPECT_ERR(kvc_cache_create_from_tensors(&o, 2, ks, vs, &made), KVC_ERROR_UNSUPPORTED,
             "kvc_cache_create_from_tensors", "layer 1 is a dummy layer");
  CHECK(made == NULL);
  REQUIRE_OK(kvc_cache_create_from_tensors(&o, 1, ks, vs, &made)); /* the attention layer alone: fine */
  CHECK_EQ_I64(tu_seq(made, 0), 1);
  kvc_cache_destroy(made);
  tu_tensors_free(k, v, 3);
  /* The recurrent-state calls are for LINEAR kinds only. */
  EXPECT_ERR_UNCHANGED(c, tl_conv(c, 1, B, 4, 0, 3, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update_conv_state", "layer 1 is a dummy layer", "non-LinearAttention");
  kvc_cache_destroy(c);
}

/* Crop, reset, reorder, select, repeat, split, stack, clone: the dummy passes through, the others act. */
static void test_operations_pass_over_it(void) {
  kvc_cache* c = tu_holding_tokens(TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DUMMY, 0, 0)),
                                   0, B, H, 4, D, D);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_crop(c, -1));
  CHECK_LAYER_SEQ(c, 0, 0, 1, 2);
  REQUIRE_OK(kvc_cache_reorder(c, (const int64_t[]){1, 0}, 2));
  REQUIRE_OK(kvc_cache_batch_repeat_interleave(c, 2));
  CHECK_EQ_I64(tu_info(c, 0).batch_size, 2 * B);
  REQUIRE_OK(kvc_cache_batch_select_indices(c, (const int64_t[]){0, 3}, 2));
  CHECK_EQ_I64(tu_info(c, 0).batch_size, 2);
  kvc_cache* parts[2] = {NULL, NULL};
  size_t n = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, 2, 1, parts, 2, &n));
  REQUIRE_EQ_I64(n, 2);
  CHECK_EQ_I64(tu_info(parts[0], 1).kind, KVC_LAYER_DUMMY);
  kvc_cache* stacked = NULL;
  CHECK_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &stacked));
  if (stacked) {
    CHECK_CACHES_EQUAL(stacked, c);
    kvc_cache_destroy(stacked);
  }
  TU_DESTROY(parts[0], parts[1]);
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_CACHES_EQUAL(d, c);
  CHECK_EQ_I64(tu_info(d, 1).kind, KVC_LAYER_DUMMY);
  kvc_cache_destroy(d);
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  CHECK_EQ_I64(tu_info(c, 1).kind, KVC_LAYER_DUMMY);
  /* Offloading moves only layers with K/V; offload and prefetch of the dummy do nothing. */
  REQUIRE_OK(kvc_cache_offload(c, 1));
  REQUIRE_OK(kvc_cache_prefetch(c, 1));
  CHECK_EQ_I64(tu_info(c, 1).is_offloaded, 0);
  kvc_cache_destroy(c);
}

/* transformers skips DummyLayer in early_initialization (supports_early_init False); its per-layer entries are unused. */
static void test_early_initialization_skips_it(void) {
  kvc_cache* c = mixed();
  REQUIRE(c != NULL);
  kvc_init_options io = tu_init_options(B, H, D, 0, KVC_DTYPE_FLOAT32);
  const int64_t heads[3] = {H, 0, H};
  io.num_kv_heads_per_layer = heads;
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 1);
  CHECK_EQ_I64(tu_info(c, 1).is_initialized, 0);
  CHECK_EQ_I64(tu_info(c, 2).is_initialized, 1);
  kvc_cache_destroy(c);
}

/* KVC_LAYER_TYPE_DUMMY becomes a DUMMY layer in the dynamic and static presets; QUANTIZED refuses it. */
static void test_presets(void) {
  const kvc_layer_type types[4] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_DUMMY,
                                   KVC_LAYER_TYPE_SLIDING_ATTENTION, KVC_LAYER_TYPE_DUMMY};
  kvc_model_config cfg = tu_config(4, types, 4, 0);
  const kvc_preset presets[4] = {KVC_PRESET_DYNAMIC, KVC_PRESET_STATIC, KVC_PRESET_OFFLOADED,
                                 KVC_PRESET_OFFLOADED_STATIC};
  const kvc_layer_kind want[4][4] = {
      {KVC_LAYER_DYNAMIC, KVC_LAYER_DUMMY, KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DUMMY},
      {KVC_LAYER_STATIC, KVC_LAYER_DUMMY, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_DUMMY},
      {KVC_LAYER_DYNAMIC, KVC_LAYER_DUMMY, KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DUMMY},
      {KVC_LAYER_STATIC, KVC_LAYER_DUMMY, KVC_LAYER_STATIC_SLIDING, KVC_LAYER_DUMMY}};
  for (int p = 0; p < 4; p++) {
    kvc_cache* c = tu_preset_cache(presets[p], &cfg, 8, KVC_OFFLOAD_DEFAULT);
    if (!c) continue;
    CHECK_EQ_I64(kvc_cache_num_layers(c), 4);
    for (uint32_t i = 0; i < 4; i++) CHECK_EQ_I64(tu_info(c, i).kind, want[p][i]);
    /* An offloading cache's update of layer 0 prefetches past the dummies, then offloads layer 0. */
    REQUIRE_OK(tu_update_tokens(c, 0, B, H, 2, D, D, 0, NULL, NULL));
    REQUIRE_OK(tu_update_tokens(c, 2, B, H, 2, D, D, 0, NULL, NULL));
    CHECK_EQ_I64(tu_seq(c, 0), 2);
    CHECK_EQ_I64(tu_info(c, 1).is_offloaded, 0);
    kvc_cache_destroy(c);
  }
  kvc_cache_options o = tu_preset_options(KVC_PRESET_QUANTIZED, &cfg, 0, KVC_OFFLOAD_DEFAULT);
  kvc_cache* q = NULL;
  EXPECT_ERR(kvc_cache_create(&o, &q), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "layer 1",
             "only full attention");
  CHECK(q == NULL);
}

/* has_previous_state(KVC_ALL_LAYERS) asks the last linear layer: a dummy after it is not one (difference 46 is gone). */
static void test_last_linear_layer_is_not_the_dummy(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_LINEAR, 0, 0), tu_layer(KVC_LAYER_DUMMY, 0, 0));
  REQUIRE(c != NULL);
  REQUIRE_OK(tl_conv(c, 0, B, 4, 0, 3, NULL, NULL));
  int prev = 0;
  CHECK_OK(kvc_cache_has_previous_state(c, KVC_ALL_LAYERS, -1, &prev));
  CHECK_EQ_I64(prev, 1);
  kvc_cache_destroy(c);
}

/*
 * A cross-attention cache with dummy layers: is_updated comes from each layer's kvc_cache_seq_length, as
 * EncoderDecoderCache takes it from get_seq_length: a dummy layer 0 answers for the first attention layer, another
 * dummy layer has no length (not updated; the refusal is not leaked). The dummy layer 0 then has no K/V to return.
 */
static void test_encoder_decoder_cross_with_dummy_layers(void) {
  kvc_cache* self = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                                    tu_layer(KVC_LAYER_DYNAMIC, 0, 0));
  kvc_cache* cross = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DUMMY, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0),
                                     tu_layer(KVC_LAYER_DUMMY, 0, 0));
  REQUIRE(self != NULL && cross != NULL);
  REQUIRE_OK(tu_update_tokens(cross, 1, B, H, 3, D, D, 0, NULL, NULL));
  kvc_encoder_decoder_cache* ed = NULL;
  REQUIRE_OK(kvc_encoder_decoder_cache_create(self, cross, &ed));
  int32_t u = -1;
  for (uint32_t i = 0; i < 3; i++) {
    REQUIRE_OK(kvc_encoder_decoder_cache_is_updated(ed, i, &u));
    CHECK_EQ_I64(u, i < 2); /* layer 0: the redirected length of layer 1 */
  }
  kvc_kv out;
  EXPECT_ERR(kvc_encoder_decoder_cache_update_cross(ed, 0, NULL, NULL, &out), KVC_ERROR_UNSUPPORTED, "dummy layer");
  kvc_encoder_decoder_cache_destroy(ed);
}

int main(void) {
  TU_RUN(test_info_and_queries);
  TU_RUN(test_layer_zero_asks_the_first_attention_layer);
  TU_RUN(test_update_is_refused);
  TU_RUN(test_operations_pass_over_it);
  TU_RUN(test_early_initialization_skips_it);
  TU_RUN(test_presets);
  TU_RUN(test_last_linear_layer_is_not_the_dummy);
  TU_RUN(test_encoder_decoder_cross_with_dummy_layers);
  return tu_finish();
}
