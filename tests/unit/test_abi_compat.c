/*
 * test_abi_compat.c: a program compiled against kvcache 0.1's header keeps
 * working with this library. Option structs grew at their end in 0.2; the
 * library must accept the 0.1 sizes, give the new fields their defaults,
 * stride a 0.1 layer array by its own element size, and write no more of an
 * output struct than the caller's struct_size.
 */
#include <string.h>

#include "test_errors.h"

/* The 0.1 layouts, as an old header declared them. */
typedef struct {
  uint32_t struct_size;
  kvc_layer_kind kind;
  int64_t window;
  int64_t max_cache_len;
} layer_options_01;

typedef struct {
  uint32_t struct_size;
  uint32_t num_hidden_layers;
  const kvc_layer_type* layer_types;
  int64_t sliding_window;
  int64_t attention_chunk_size;
  uint32_t num_kv_shared_layers;
  uint32_t sliding_window_pattern;
} model_config_01;

typedef struct {
  uint32_t struct_size;
  kvc_preset preset;
  const void* config;
  int64_t max_cache_len;
  uint32_t num_layers;
  const void* layers;
  kvc_device device;
} cache_options_01;

typedef struct {
  uint32_t struct_size;
  const int64_t* cache_position;
  uint32_t cache_position_length;
} update_options_01;


static void test_sizes_are_the_published_ones(void) {
  CHECK_EQ_I64(sizeof(layer_options_01), 24);
  CHECK_EQ_I64(sizeof(model_config_01), 40);
  CHECK_EQ_I64(sizeof(cache_options_01), 48);
  CHECK_EQ_I64(sizeof(update_options_01), 24);
}

/* A 0.1 custom layer array: element i lives at i * 24 bytes, not i * sizeof(kvc_layer_options). */
static void test_old_layer_array(void) {
  layer_options_01 layers[3] = {{24, KVC_LAYER_DYNAMIC, 0, 0},
                                {24, KVC_LAYER_STATIC, 0, 6},
                                {24, KVC_LAYER_DYNAMIC_SLIDING, 3, 0}};
  cache_options_01 o = {48, KVC_PRESET_CUSTOM, NULL, 0, 3, layers, {KVC_DEVICE_CPU, 0}};
  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_create((const kvc_cache_options*)&o, &c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 3);
  static const kvc_layer_kind want[3] = {KVC_LAYER_DYNAMIC, KVC_LAYER_STATIC, KVC_LAYER_DYNAMIC_SLIDING};
  static const int64_t max_len[3] = {-1, 6, 3};
  for (uint32_t i = 0; i < 3; i++) {
    kvc_layer_info info = {.struct_size = sizeof info};
    CHECK_OK(kvc_cache_layer_info(c, i, &info));
    CHECK_EQ_I64(info.kind, want[i]);
    int64_t m = 0;
    CHECK_OK(kvc_cache_max_length(c, (int32_t)i, &m));
    CHECK_EQ_I64(m, max_len[i]);
  }
  kvc_cache_destroy(c);
}

/* A 0.1 preset with a 0.1 config: the new fields (offload, quant, conv) take their defaults. */
static void test_old_preset_and_update(void) {
  model_config_01 cfg = {40, 2, NULL, 0, 0, 0, 0};
  cache_options_01 o = {48, KVC_PRESET_STATIC, &cfg, 5, 0, NULL, {KVC_DEVICE_CPU, 0}};
  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_create((const kvc_cache_options*)&o, &c));
  CHECK_EQ_I64(kvc_cache_num_layers(c), 2);
  float k[4] = {1, 2, 3, 4};
  int64_t shape[4] = {1, 1, 2, 2};
  kvc_tensor t = tu_f32_view(k, shape);
  int64_t pos[2] = {1, 2};
  update_options_01 u = {24, pos, 2};
  kvc_kv out;
  REQUIRE_OK(kvc_cache_update(c, 0, &t, &t, (const kvc_update_options*)&u, &out));
  CHECK_EQ_I64(out.key.shape[2], 5);
  CHECK_EQ_F64(tu_get(&out.key, 0, 0, 1, 0), 1.0); /* written at cache_position 1 */
  kvc_layer_info info = {.struct_size = sizeof info};
  CHECK_OK(kvc_cache_layer_info(c, 0, &info));
  CHECK_EQ_I64(info.is_offloaded, 0);
  kvc_cache_destroy(c);
}

/* A DynamicCache holding one token of head_dim 2 in layer 0, or NULL (counted). */
static kvc_cache* one_token_cache(void) {
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(NULL, &c))) return NULL;
  float k[2] = {1, 2};
  int64_t shape[4] = {1, 1, 1, 2};
  kvc_tensor t = tu_f32_view(k, shape);
  return tu_kept(c, CHECK_OK(kvc_cache_update(c, 0, &t, &t, NULL, NULL)));
}

/* Output structs: a 0.1 caller's struct_size bounds what the library writes. */
static void test_old_output_structs(void) {
  kvc_cache* c = one_token_cache();
  REQUIRE(c != NULL);

  unsigned char buf[sizeof(kvc_layer_info)];
  memset(buf, 0xA5, sizeof buf);
  uint32_t old = 96;
  memcpy(buf, &old, sizeof old);
  CHECK_OK(kvc_cache_layer_info(c, 0, (kvc_layer_info*)buf));
  int untouched = 1;
  for (size_t i = 96; i < sizeof buf; i++) untouched &= buf[i] == 0xA5;
  CHECK(untouched);
  kvc_layer_info* info = (kvc_layer_info*)buf;
  CHECK_EQ_I64(info->struct_size, 96);
  CHECK_EQ_I64(info->seq_length, 1);

  unsigned char mbuf[sizeof(kvc_memory_info)];
  memset(mbuf, 0xA5, sizeof mbuf);
  old = 24;
  memcpy(mbuf, &old, sizeof old);
  CHECK_OK(kvc_cache_memory(c, (kvc_memory_info*)mbuf));
  untouched = 1;
  for (size_t i = 24; i < sizeof mbuf; i++) untouched &= mbuf[i] == 0xA5;
  CHECK(untouched);
  CHECK(((kvc_memory_info*)mbuf)->bytes_used > 0);

  /* An unpublished size is still refused, naming the sizes that are known. */
  kvc_memory_info m = {.struct_size = 40};
  EXPECT_ERR(kvc_cache_memory(c, &m), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_memory", "out", "struct_size", "40",
             "24, 56");
  kvc_cache_destroy(c);
}

/* The current sizes fill the new fields. */
static void test_new_output_fields(void) {
  kvc_cache* c = one_token_cache();
  REQUIRE(c != NULL);
  kvc_memory_info m = {.struct_size = sizeof m};
  CHECK_OK(kvc_cache_memory(c, &m));
  CHECK_EQ_U64(m.bytes_device, m.bytes_reserved); /* nothing offloaded */
  CHECK_EQ_U64(m.bytes_host, 0);
  CHECK_EQ_U64(m.bytes_quantized, 0);
  CHECK_EQ_U64(m.bytes_state, 0);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_sizes_are_the_published_ones);
  TU_RUN(test_old_layer_array);
  TU_RUN(test_old_preset_and_update);
  TU_RUN(test_old_output_structs);
  TU_RUN(test_new_output_fields);
  return tu_finish();
}
