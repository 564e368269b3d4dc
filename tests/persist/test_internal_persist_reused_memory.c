/*
 * Caches, loads and restores on memory a freed cache left behind (kvc_host_memory_* in kvcache/allocator.h):
 * the library keeps large freed stores and hands them out again, dirty. A new cache's store must still read as
 * zeros, and a loaded or restored store, which is allocated unzeroed and written once, must hold the file's
 * tokens and zeros around them, never the previous owner's bytes. Internal: a dynamic layer's slots past its
 * tokens are in no view, so the test reads the store itself.
 */
#include "internal.h"
#include "persist_test.h"

/* Static layers show every slot: 4 heads x 1024 slots x 64 dims of float32 = 1 MiB per store, a large block. */
enum { B = 1, H = 4, D = 64, CAP = 1024, LAYERS = 2 };

static kvc_cache* static_cache(void) {
  kvc_layer_options l[LAYERS] = {tu_layer(KVC_LAYER_STATIC, 0, CAP), tu_layer(KVC_LAYER_STATIC, 0, CAP)};
  return tu_custom_cache(LAYERS, l);
}

/* A cache filled to every slot with tokens from `first`, destroyed: its stores are kept, dirty. */
static void leave_dirty_stores(int64_t first) {
  kvc_cache* c = static_cache();
  REQUIRE(c != NULL);
  for (uint32_t l = 0; l < LAYERS; l++) CHECK_OK(tu_update_tokens(c, l, B, H, CAP, D, D, first, NULL, NULL));
  kvc_cache_destroy(c);
  CHECK(kvc_host_memory_retained() >= (uint64_t)LAYERS * 2 * B * H * CAP * D * sizeof(float));
}

static void check_tokens_then_zeros(const kvc_cache* c, int64_t n, const char* what) {
  for (uint32_t l = 0; l < LAYERS; l++) {
    kvc_kv kv;
    if (!CHECK_OK(kvc_cache_layer_view(c, l, &kv))) return;
    if (!CHECK(tu_zero_from(&kv.key, n) && tu_zero_from(&kv.value, n)))
      fprintf(TU_LOG, "  %s: layer %u holds nonzero bytes past its %lld tokens\n", what, l, (long long)n);
  }
}

/* `path` loaded after a cache left its dirty stores behind (tokens from `dirt`): the load must take them. */
static kvc_cache* load_on_dirty_memory(const char* path, int64_t dirt) {
  leave_dirty_stores(dirt);
  uint64_t kept = kvc_host_memory_retained();
  kvc_cache* loaded = NULL;
  if (!CHECK_OK(kvc_cache_load(path, NULL, &loaded))) return NULL;
  CHECK(kvc_host_memory_retained() < kept);
  return loaded;
}

static void test_a_new_cache_on_dirty_memory_reads_zeros(void) {
  kvc_host_memory_set_retention((uint64_t)1 << 30);
  leave_dirty_stores(1000);
  uint64_t kept = kvc_host_memory_retained();
  kvc_cache* c = static_cache();
  REQUIRE(c != NULL);
  for (uint32_t l = 0; l < LAYERS; l++) CHECK_OK(tu_update_tokens(c, l, B, H, 100, D, D, 0, NULL, NULL));
  CHECK(kvc_host_memory_retained() < kept); /* the stores came from the kept ones */
  check_tokens_then_zeros(c, 100, "a new cache");
  kvc_cache_destroy(c);
}

static void test_loads_and_restores_on_dirty_memory(void) {
  kvc_host_memory_set_retention((uint64_t)1 << 30);
  kvc_cache* source = static_cache();
  REQUIRE(source != NULL);
  for (uint32_t l = 0; l < LAYERS; l++) CHECK_OK(tu_update_tokens(source, l, B, H, 100, D, D, 0, NULL, NULL));
  char path[256];
  ps_path(path, sizeof path, "reused");
  REQUIRE(CHECK_OK(kvc_cache_save(source, path, NULL)));

  kvc_cache* loaded = load_on_dirty_memory(path, 2000);
  REQUIRE(loaded != NULL);
  check_tokens_then_zeros(loaded, 100, "a load");
  ps_same(source, loaded, "load on dirty memory");

  kvc_cache* target = static_cache();
  REQUIRE(target != NULL);
  CHECK_OK(tu_update_tokens(target, 0, B, H, 7, D, D, 0, NULL, NULL));
  leave_dirty_stores(3000);
  uint64_t kept = kvc_host_memory_retained();
  REQUIRE(CHECK_OK(kvc_cache_restore(target, path)));
  CHECK(kvc_host_memory_retained() < kept);
  check_tokens_then_zeros(target, 100, "a restore");
  ps_same(source, target, "restore on dirty memory");

  kvc_cache_destroy(target);
  kvc_cache_destroy(loaded);
  kvc_cache_destroy(source);
  unlink(path);
}

/* Bytes [from, to) of every (b, h) row of a store of `cap` slots of d floats are zero. */
static int raw_zero(const void* store, int64_t cap, int64_t from, int64_t to) {
  const float* x = (const float*)store;
  for (int64_t bh = 0; bh < B * H; bh++)
    for (int64_t s = from; s < to; s++)
      for (int64_t d = 0; d < D; d++)
        if (x[(bh * cap + s) * D + d] != 0.0f) return 0;
  return 1;
}

/* A dynamic layer reserved past its tokens: the file holds the tokens and the capacity; the slots after the
   tokens must come back zero, not as the dirty block's bytes. */
static void test_a_loaded_dynamic_store_is_zero_past_its_tokens(void) {
  kvc_host_memory_set_retention((uint64_t)1 << 30);
  kvc_cache* source = tu_one_layer_cache(KVC_LAYER_DYNAMIC, 0, 0);
  REQUIRE(source != NULL);
  CHECK_OK(tu_update_tokens(source, 0, B, H, 100, D, D, 0, NULL, NULL));
  CHECK_OK(kvc_cache_reserve(source, CAP));
  char path[256];
  ps_path(path, sizeof path, "reused-dynamic");
  REQUIRE(CHECK_OK(kvc_cache_save(source, path, NULL)));
  kvc_cache* loaded = load_on_dirty_memory(path, 4000);
  REQUIRE(loaded != NULL);
  const kvc_layer* l = loaded->layers[0];
  CHECK_EQ_I64(l->cap, source->layers[0]->cap);
  CHECK(l->cap >= CAP);
  CHECK(raw_zero(l->k, l->cap, 0, l->start) && raw_zero(l->k, l->cap, l->end, l->cap));
  CHECK(raw_zero(l->v, l->cap, 0, l->start) && raw_zero(l->v, l->cap, l->end, l->cap));
  ps_same(source, loaded, "a dynamic load on dirty memory");
  kvc_cache_destroy(loaded);
  kvc_cache_destroy(source);
  unlink(path);
}

int main(void) {
  TU_RUN(test_a_new_cache_on_dirty_memory_reads_zeros);
  TU_RUN(test_loads_and_restores_on_dirty_memory);
  TU_RUN(test_a_loaded_dynamic_store_is_zero_past_its_tokens);
  kvc_host_memory_release();
  return tu_finish();
}
