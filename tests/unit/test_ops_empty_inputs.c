/*
 * Inputs without elements may have data NULL (the checks ask for data only
 * when there are elements): an update of 0 tokens and a conv-state update
 * of 0 columns whose tensors have no data succeed, store nothing and return
 * the history. The library must not compute an address from the NULL data
 * either (NULL + offset is undefined behaviour in C, which clang's
 * UndefinedBehaviorSanitizer reports; found by tests/fuzz/fuzz_kinds.c, seed
 * tests/fuzz/corpus/kinds/regress_empty_input_null_data).
 */
#include "test_linear.h"

/* An update of 0 tokens whose key and value have data NULL. */
static kvc_error* update_empty(kvc_cache* c, uint32_t layer, int64_t b, int64_t h, int64_t dk, int64_t dv,
                               uint64_t byte_offset, kvc_kv* out) {
  tu_tensor k, v;
  tu_tensor_tokens(&k, b, h, 0, dk, 0, 0);
  tu_tensor_tokens(&v, b, h, 0, dv, 0, 1);
  k.t.data = v.t.data = NULL;
  k.t.byte_offset = v.t.byte_offset = byte_offset;
  kvc_error* e = kvc_cache_update(c, layer, &k.t, &v.t, NULL, out);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return e;
}

static void test_update_without_data(void) {
  kvc_cache* c = tu_lazy_cache();
  REQUIRE(c != NULL);
  kvc_kv out;
  REQUIRE_OK(tu_update_tokens(c, 0, 2, 1, 3, 4, 4, 0, NULL, NULL));
  REQUIRE_OK(update_empty(c, 0, 2, 1, 4, 4, 0, &out));
  CHECK_KV_SEQ(out, 0, 1, 2);
  REQUIRE_OK(update_empty(c, 0, 2, 1, 4, 4, 64, &out)); /* an offset from no data is still nothing */
  CHECK_KV_SEQ(out, 0, 1, 2);
  CHECK_EQ_I64(tu_seq(c, 0), 3);
  /* a lazily created layer takes its geometry from an empty first update too */
  REQUIRE_OK(update_empty(c, 1, 2, 3, 5, 6, 0, &out));
  CHECK_SHAPE(out.key, 2, 3, 0, 5);
  CHECK_SHAPE(out.value, 2, 3, 0, 6);

  /* update_all: every layer empty */
  tu_tensor k[2], v[2];
  kvc_tensor keys[2], values[2];
  for (int i = 0; i < 2; i++) {
    tu_tensor_tokens(&k[i], 2, i ? 3 : 1, 0, i ? 5 : 4, 0, 0);
    tu_tensor_tokens(&v[i], 2, i ? 3 : 1, 0, i ? 6 : 4, 0, 1);
    keys[i] = k[i].t;
    values[i] = v[i].t;
    keys[i].data = values[i].data = NULL;
  }
  kvc_kv outs[2];
  CHECK_OK(kvc_cache_update_all(c, 2, keys, values, NULL, outs));
  CHECK_KV_SEQ(outs[0], 0, 1, 2);
  CHECK_SHAPE(outs[1].key, 2, 3, 0, 5);
  tu_tensors_free(k, v, 2);
  kvc_cache_destroy(c);
}

static void test_conv_update_without_data(void) {
  kvc_cache* c = tl_linear(1, 3);
  REQUIRE(c != NULL);
  REQUIRE_OK(tl_conv(c, 0, 2, 2, 0, 3, NULL, NULL)); /* columns 0, 1, 2 */
  tl_tensor x;
  tl_conv_input(&x, 2, 2, 3, 0);
  x.t.data = NULL;
  kvc_tensor out;
  memset(&out, 0, sizeof out);
  CHECK_OK(kvc_cache_update_conv_state(c, 0, &x.t, NULL, &out));
  tl_free(&x);
  const int64_t cols[3] = {0, 1, 2};
  CHECK_CONV(&out, 2, 2, cols, 3, NULL);
  kvc_tensor st = tl_conv_view(c, 0, 0);
  CHECK_CONV(&st, 2, 2, cols, 3, NULL);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_update_without_data);
  TU_RUN(test_conv_update_without_data);
  return tu_finish();
}
