/*
 * test_errors_stream.c: binding a cache to a stream, on the CPU (where the
 * only stream is the default one). A refused binding leaves the cache and its
 * binding as they were. The device side of streams is tested in tests/gpu.
 */
#include "test_errors.h"

static void test_cpu_cache_has_only_the_default_stream(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_STATIC, 0, 6));
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 2; i++) CHECK_OK(tu_update_tokens(c, i, 2, 2, 2, 4, 3, 0, NULL, NULL));
  CHECK_EQ_PTR(kvc_cache_stream(c), NULL);
  CHECK_OK(kvc_cache_set_stream(c, NULL));
  EXPECT_ERR_UNCHANGED(c, kvc_cache_set_stream(c, (void*)0x1234), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_set_stream",
                       "stream", "0x1234", "CPU", "NULL");
  CHECK_EQ_PTR(kvc_cache_stream(c), NULL);
  /* Clones inherit the binding. */
  kvc_cache* d = NULL;
  CHECK_OK(kvc_cache_clone(c, &d));
  CHECK_EQ_PTR(kvc_cache_stream(d), NULL);
  TU_DESTROY(d, c);
}

static void test_null_cache(void) {
  EXPECT_ERR(kvc_cache_set_stream(NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_set_stream", "cache", "NULL");
  CHECK_EQ_PTR(kvc_cache_stream(NULL), NULL);
}

int main(void) {
  TU_RUN(test_cpu_cache_has_only_the_default_stream);
  TU_RUN(test_null_cache);
  return tu_finish();
}
