/*
 * Bytes per tier (kvc_memory_info.bytes_device / bytes_host), exact, from
 * the shapes: an offloaded layer's store counts in the host tier; the device
 * store it had while an update wrote it stays alive (and counts in the
 * device tier) until the next update, because the views that update
 * returned point there.
 *
 * Geometry of every case: batch 2, 2 heads, key head_dim 3, value head_dim
 * 4, float16 (2 bytes). Stores: a dynamic layer starts with 64 slots, a
 * dynamic sliding layer of window 3 with max(2 * 3, 16) = 16 slots, a static
 * layer with max_cache_len (10) slots, a static sliding layer of window 4
 * with 2 * min(4, 10) = 8 slots.
 */
#include "test_offload_util.h"

#define B 2
#define H 2
#define DK 3
#define DV 4
#define ELEM 2

static uint64_t bytes_of(kvc_layer_kind kind) {
  int64_t cap = kind == KVC_LAYER_DYNAMIC ? 64 : kind == KVC_LAYER_DYNAMIC_SLIDING ? 16 : kind == KVC_LAYER_STATIC ? 10 : 8;
  return ot_store_bytes(B, H, cap, DK, DV, ELEM);
}

/* Checks the tiers' bytes: host = offloaded layers, device = the others plus `retired`. */
static int check_bytes_impl(const char* file, int line, const kvc_cache* c, uint64_t retired) {
  uint64_t host = 0, device = retired;
  for (uint32_t i = 0; i < kvc_cache_num_layers(c); i++) {
    kvc_layer_info li = tu_info(c, i);
    if (!li.is_initialized) continue;
    if (li.is_offloaded)
      host += bytes_of(li.kind);
    else
      device += bytes_of(li.kind);
  }
  kvc_memory_info m = tu_memory(c);
  int ok = tu_check_u64(m.bytes_host, host, file, line, "bytes_host", "expected");
  ok &= tu_check_u64(m.bytes_device, device, file, line, "bytes_device", "expected");
  ok &= tu_check_u64(m.bytes_reserved, host + device, file, line, "bytes_reserved", "host + device");
  return ok;
}
#define CHECK_BYTES(c, retired) check_bytes_impl(__FILE__, __LINE__, (c), (retired))

static kvc_error* update(kvc_cache* c, uint32_t layer, int64_t n, uint64_t seed, kvc_kv* out) {
  return ot_update(c, layer, KVC_DTYPE_FLOAT16, B, H, n, DK, DV, seed, out);
}

/* Layers f s f, only non-sliding layers offloaded (tiers: test_offload_tiers.c). */
static void test_bytes_per_update(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_DYNAMIC, "fsf", 3, 0, 0, KVC_OFFLOAD_NON_SLIDING);
  REQUIRE(c);
  const uint64_t full = bytes_of(KVC_LAYER_DYNAMIC);
  CHECK_EQ_U64(full, 3584);
  CHECK_EQ_U64(bytes_of(KVC_LAYER_DYNAMIC_SLIDING), 896);
  CHECK_BYTES(c, 0);
  REQUIRE_OK(update(c, 0, 2, 1, NULL));
  CHECK_TIERS(c, "100", "u0");
  CHECK_BYTES(c, full); /* layer 0's device store, for the views just returned */
  kvc_memory_info m = tu_memory(c);
  CHECK_EQ_U64(m.bytes_host, 3584);
  CHECK_EQ_U64(m.bytes_device, 3584);
  REQUIRE_OK(update(c, 1, 2, 2, NULL)); /* sliding: stays on the device; layer 0's device copy is freed */
  CHECK_TIERS(c, "100", "u1");
  CHECK_BYTES(c, 0);
  m = tu_memory(c);
  CHECK_EQ_U64(m.bytes_device, 896);
  REQUIRE_OK(update(c, 2, 2, 3, NULL)); /* wraps to 0 (fetched), offloads 2 */
  CHECK_TIERS(c, "001", "u2");
  CHECK_BYTES(c, full);
  for (int step = 0; step < 3; step++)
    for (uint32_t i = 0; i < 3; i++) {
      REQUIRE_OK(update(c, i, 1, 10 + (uint64_t)(3 * step + i), NULL));
      CHECK_BYTES(c, i == 1 ? 0 : full);
    }
  /* kvc_cache_offload/prefetch are mutating calls: the retired store goes, and nothing new is retired */
  REQUIRE_OK(kvc_cache_offload(c, 0));
  CHECK_TIERS(c, "101", "offload 0");
  CHECK_BYTES(c, 0);
  REQUIRE_OK(kvc_cache_prefetch(c, 2));
  CHECK_TIERS(c, "100", "prefetch 2");
  CHECK_BYTES(c, 0);
  kvc_cache_destroy(c);
}

/* update_all keeps the device store of every layer it offloaded, until the next update. */
static void test_bytes_update_all(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_DYNAMIC, "fsf", 3, 0, 0, KVC_OFFLOAD_ALL);
  REQUIRE(c);
  for (int step = 0; step < 2; step++) {
    ot_layers x;
    ot_layers_make(&x, 3, KVC_DTYPE_FLOAT16, B, H, 2, DK, DV, (uint64_t)(step * 3), 50);
    kvc_kv out[3];
    REQUIRE_OK(kvc_cache_update_all(c, 3, x.kt, x.vt, NULL, out));
    /* all three were offloaded after their update; layer 0 came back when layer 2 wrapped around */
    CHECK_TIERS(c, "011", "update_all");
    CHECK_BYTES(c, 2 * bytes_of(KVC_LAYER_DYNAMIC) + bytes_of(KVC_LAYER_DYNAMIC_SLIDING));
    /* every returned view is still readable and holds the new tokens */
    for (int i = 0; i < 3; i++) CHECK_EQ_I64(out[i].key.shape[2], i == 1 ? (step ? 4 : 2) : 2 * (step + 1));
    ot_layers_free(&x);
  }
  kvc_cache_destroy(c);
}

/* Static presets: OffloadedStaticCache layers f s f; and bytes_used is the same as without offloading. */
static void test_bytes_static(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_OFFLOADED_STATIC, "fsf", 4, 0, 10, KVC_OFFLOAD_DEFAULT);
  kvc_cache* plain = ot_cache(KVC_PRESET_STATIC, "fsf", 4, 0, 10, KVC_OFFLOAD_DEFAULT);
  REQUIRE(c && plain);
  CHECK_EQ_U64(bytes_of(KVC_LAYER_STATIC), 560);
  CHECK_EQ_U64(bytes_of(KVC_LAYER_STATIC_SLIDING), 448);
  for (int step = 0; step < 4; step++)
    for (uint32_t i = 0; i < 3; i++) {
      REQUIRE_OK(update(c, i, step ? 1 : 3, (uint64_t)(step * 3 + i), NULL));
      REQUIRE_OK(update(plain, i, step ? 1 : 3, (uint64_t)(step * 3 + i), NULL));
      CHECK_BYTES(c, i == 1 ? 0 : bytes_of(KVC_LAYER_STATIC));
      kvc_memory_info a = tu_memory(c), b = tu_memory(plain);
      CHECK_EQ_U64(a.bytes_used, b.bytes_used);
      CHECK_EQ_U64(b.bytes_host, 0);
      CHECK_EQ_U64(a.bytes_reserved - (i == 1 ? 0 : bytes_of(KVC_LAYER_STATIC)), b.bytes_reserved);
    }
  TU_DESTROY(c, plain);
}

/* A clone keeps the tiers (no retired store of its own); kvc_cache_reserve grows an offloaded layer in the host tier. */
static void test_bytes_clone_and_reserve(void) {
  kvc_cache* c = ot_cache(KVC_PRESET_DYNAMIC, "ff", 0, 0, 0, KVC_OFFLOAD_ALL);
  REQUIRE(c);
  REQUIRE_OK(update(c, 0, 2, 1, NULL));
  REQUIRE_OK(update(c, 1, 2, 2, NULL));
  CHECK_TIERS(c, "01", "step 1");
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  CHECK_TIERS(d, "01", "clone");
  CHECK_BYTES(d, 0);
  kvc_memory_info m = tu_memory(d);
  CHECK_EQ_U64(m.bytes_host, 3584);
  REQUIRE_OK(kvc_cache_reserve(d, 100));
  CHECK_TIERS(d, "01", "reserve");
  m = tu_memory(d);
  CHECK_EQ_U64(m.bytes_host, ot_store_bytes(B, H, 100, DK, DV, ELEM));
  CHECK_EQ_U64(m.bytes_device, ot_store_bytes(B, H, 100, DK, DV, ELEM));
  TU_DESTROY(d, c);
}

int main(void) {
  TU_RUN(test_bytes_per_update);
  TU_RUN(test_bytes_update_all);
  TU_RUN(test_bytes_static);
  TU_RUN(test_bytes_clone_and_reserve);
  return tu_finish();
}
