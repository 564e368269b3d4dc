/*
 * test_errors_misc.c: the error object itself, the NULL-tolerant functions
 * (destroy, init, accessors) and the dtype helpers with values they do not
 * know. Every error made here is destroyed, so LeakSanitizer also checks
 * that error objects own (and free) their messages.
 */
#include "test_util.h"

static void test_error_functions_accept_null(void) {
  CHECK_EQ_I64(kvc_error_code(NULL), KVC_OK);
  const char* msg = kvc_error_message(NULL);
  REQUIRE(msg != NULL);
  CHECK(strcmp(msg, "ok") == 0);
  kvc_error_destroy(NULL);
  CHECK(1); /* reaching this line is the check: destroy(NULL) did not crash */
}

static void test_code_names(void) {
  static const struct {
    kvc_code code;
    const char* name;
  } known[] = {
      {KVC_OK, "KVC_OK"},
      {KVC_ERROR_INVALID_ARGUMENT, "KVC_ERROR_INVALID_ARGUMENT"},
      {KVC_ERROR_OUT_OF_RANGE, "KVC_ERROR_OUT_OF_RANGE"},
      {KVC_ERROR_DTYPE_MISMATCH, "KVC_ERROR_DTYPE_MISMATCH"},
      {KVC_ERROR_SHAPE_MISMATCH, "KVC_ERROR_SHAPE_MISMATCH"},
      {KVC_ERROR_DEVICE_MISMATCH, "KVC_ERROR_DEVICE_MISMATCH"},
      {KVC_ERROR_UNSUPPORTED, "KVC_ERROR_UNSUPPORTED"},
      {KVC_ERROR_INVALID_STATE, "KVC_ERROR_INVALID_STATE"},
      {KVC_ERROR_OUT_OF_MEMORY, "KVC_ERROR_OUT_OF_MEMORY"},
      {KVC_ERROR_NO_DEVICE, "KVC_ERROR_NO_DEVICE"},
      {KVC_ERROR_VERSION_MISMATCH, "KVC_ERROR_VERSION_MISMATCH"},
      {KVC_ERROR_INTERNAL, "KVC_ERROR_INTERNAL"},
      {KVC_ERROR_IO, "KVC_ERROR_IO"},
      {KVC_ERROR_BUSY, "KVC_ERROR_BUSY"},
  };
  /* The codes are ABI: their numbers must never move. */
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    CHECK_EQ_I64(known[i].code, (kvc_code)i);
    const char* name = kvc_code_name(known[i].code);
    if (!CHECK(name != NULL)) continue;
    if (!CHECK(strcmp(name, known[i].name) == 0))
      fprintf(stderr, "    kvc_code_name(%d) is \"%s\", expected \"%s\"\n", (int)known[i].code, name,
              known[i].name);
  }
  static const kvc_code unknown[] = {14, 15, 100, -1, INT32_MIN, INT32_MAX};
  for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; i++) {
    const char* name = kvc_code_name(unknown[i]);
    if (!CHECK(name != NULL)) continue;
    if (!CHECK(strcmp(name, "KVC_ERROR_UNKNOWN") == 0))
      fprintf(stderr, "    kvc_code_name(%d) is \"%s\"\n", (int)unknown[i], name);
  }
}

static void test_destroy_and_accessors_accept_null(void) {
  kvc_cache_destroy(NULL);
  kvc_encoder_decoder_cache_destroy(NULL);
  CHECK_EQ_PTR(kvc_encoder_decoder_cache_self_attention(NULL), NULL);
  CHECK_EQ_PTR(kvc_encoder_decoder_cache_cross_attention(NULL), NULL);
  CHECK_EQ_U64(kvc_cache_num_layers(NULL), 0);
}

/* Declares `var` of `type`, fills it with garbage and runs type_init on it: then its struct_size must be this
 * build's (checked here) and every other field its _INIT value (the caller's checks). A macro: it declares. */
#define INIT_OVER_GARBAGE(type, var) \
  type var;                          \
  memset(&var, 0x5a, sizeof var);    \
  type##_init(&var);                 \
  CHECK_EQ_U64(var.struct_size, sizeof var)

static void test_init_functions_accept_null(void) {
  kvc_layer_options_init(NULL);
  kvc_model_config_init(NULL);
  kvc_cache_options_init(NULL);
  kvc_init_options_init(NULL);
  kvc_update_options_init(NULL);
  CHECK(1); /* none of them crashed */

  /* And with a struct, each one writes exactly its _INIT value. */
  INIT_OVER_GARBAGE(kvc_layer_options, lo);
  const kvc_layer_options lo_want = KVC_LAYER_OPTIONS_INIT;
  CHECK_EQ_I64(lo.kind, lo_want.kind);
  CHECK_EQ_I64(lo.window, lo_want.window);
  CHECK_EQ_I64(lo.max_cache_len, lo_want.max_cache_len);

  INIT_OVER_GARBAGE(kvc_cache_options, co);
  CHECK_EQ_I64(co.preset, KVC_PRESET_DYNAMIC);
  CHECK_EQ_PTR(co.config, NULL);
  CHECK_EQ_PTR(co.layers, NULL);
  CHECK_EQ_I64(co.device.device_type, KVC_DEVICE_CPU);
  CHECK_EQ_I64(co.device.device_id, 0);

  INIT_OVER_GARBAGE(kvc_model_config, mc);
  CHECK_EQ_U64(mc.num_hidden_layers, 0);
  CHECK_EQ_PTR(mc.layer_types, NULL);
  CHECK_EQ_I64(mc.sliding_window, 0);
  CHECK_EQ_I64(mc.attention_chunk_size, 0);

  INIT_OVER_GARBAGE(kvc_init_options, io);
  CHECK_EQ_I64(io.dtype, KVC_DTYPE_UNSET);
  CHECK_EQ_PTR(io.num_kv_heads_per_layer, NULL);
  CHECK_EQ_PTR(io.head_dim_per_layer, NULL);

  INIT_OVER_GARBAGE(kvc_update_options, uo);
  CHECK_EQ_PTR(uo.cache_position, NULL);
  CHECK_EQ_U64(uo.cache_position_length, 0);
}

static void test_dtype_helpers_reject_unknown_values(void) {
  static const kvc_dtype bad[] = {KVC_DTYPE_UNSET, 4, 99, -1};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    kvc_data_type t = kvc_dtype_to_data_type(bad[i]);
    CHECK_EQ_I64(t.code, 0);
    CHECK_EQ_I64(t.bits, 0);
    CHECK_EQ_I64(t.lanes, 0);
    CHECK_EQ_U64(kvc_dtype_size(bad[i]), 0);
  }
  static const kvc_data_type unstorable[] = {
      {KVC_TYPE_CODE_INT, 32, 1},   {KVC_TYPE_CODE_UINT, 8, 1},   {KVC_TYPE_CODE_FLOAT, 64, 1},
      {KVC_TYPE_CODE_FLOAT, 32, 2}, {KVC_TYPE_CODE_FLOAT, 16, 0}, {KVC_TYPE_CODE_BFLOAT, 32, 1},
      {KVC_TYPE_CODE_FLOAT, 8, 1},  {0, 0, 0},                    {7, 16, 1},
  };
  for (size_t i = 0; i < sizeof unstorable / sizeof unstorable[0]; i++)
    CHECK_EQ_I64(kvc_dtype_from_data_type(unstorable[i]), KVC_DTYPE_UNSET);
}

/* Error objects are independent values: one outlives another, messages stay intact. */
static void test_errors_are_independent(void) {
  kvc_cache* out1 = NULL;
  kvc_cache* out2 = NULL;
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.struct_size = 3;
  kvc_error* a = kvc_cache_create(&o, &out1);
  o.struct_size = 5;
  kvc_error* b = kvc_cache_create(&o, &out2);
  REQUIRE(a != NULL && b != NULL);
  CHECK(a != b);
  CHECK_EQ_PTR(out1, NULL);
  CHECK_EQ_PTR(out2, NULL);
  size_t len = strlen(kvc_error_message(b));
  char* copy = (char*)malloc(len + 1);
  REQUIRE(copy != NULL);
  memcpy(copy, kvc_error_message(b), len + 1);
  kvc_error_destroy(a);
  CHECK(strcmp(copy, kvc_error_message(b)) == 0);
  CHECK_EQ_I64(kvc_error_code(b), KVC_ERROR_INVALID_ARGUMENT);
  CHECK(strstr(kvc_error_message(b), "5") != NULL);
  free(copy);
  kvc_error_destroy(b);
}

int main(void) {
  TU_RUN(test_error_functions_accept_null);
  TU_RUN(test_code_names);
  TU_RUN(test_destroy_and_accessors_accept_null);
  TU_RUN(test_init_functions_accept_null);
  TU_RUN(test_dtype_helpers_reject_unknown_values);
  TU_RUN(test_errors_are_independent);
  return tu_finish();
}
