/*
 * Out of memory anywhere in an operation on an offloading cache leaves the
 * cache exactly as it was: every layer's tier, contents, counters and bytes,
 * with nothing leaked (oom_sweep.h refuses the n-th allocation, device or
 * host tier, n = 0, 1, 2, ...).
 */
#include "oom_sweep.h"
#include "test_offload_util.h"

/* Besides the snapshot, a refused operation leaves every layer's tier and the device and host bytes. */
static char tiers_before[16];
static kvc_memory_info mem_before;

static void same_tiers_and_bytes(const kvc_cache* c, int after, const char* name) {
  if (!after) {
    ot_tiers(c, tiers_before);
    mem_before = tu_memory(c);
    return;
  }
  CHECK_TIERS(c, tiers_before, name);
  kvc_memory_info m = tu_memory(c);
  CHECK_EQ_U64(m.bytes_device, mem_before.bytes_device);
  CHECK_EQ_U64(m.bytes_host, mem_before.bytes_host);
}

/* Layers f s f of `preset` (max_cache_len max_len, offloading `offload`) allocating through the wrapper, after one
 * step of n tokens of dtype dt on every layer; NULL if creation fails (counted). */
static kvc_cache* stepped_ex(kvc_preset preset, int64_t max_len, kvc_offload offload, kvc_dtype dt, int64_t n) {
  kvc_cache* c = ot_cache(preset, "fsf", 3, 0, max_len, offload);
  if (!c) return NULL;
  oom_install(c);
  for (uint32_t i = 0; i < 3; i++) CHECK_OK(ot_update(c, i, dt, 2, 2, n, 3, 2, i, NULL));
  return c;
}

/* Every layer offloaded, one step done (tiers 011). */
static kvc_cache* stepped(void) { return stepped_ex(KVC_PRESET_DYNAMIC, 0, KVC_OFFLOAD_ALL, KVC_DTYPE_FLOAT16, 3); }

/* OffloadedStaticCache after one step (tiers 001). */
static kvc_cache* stepped_static(void) {
  return stepped_ex(KVC_PRESET_OFFLOADED_STATIC, 8, KVC_OFFLOAD_DEFAULT, KVC_DTYPE_FLOAT32, 2);
}

static kvc_error* decode_layer0(kvc_cache* c) { return ot_update(c, 0, KVC_DTYPE_FLOAT16, 2, 2, 1, 3, 2, 40, NULL); }
static kvc_error* decode_layer2(kvc_cache* c) { return ot_update(c, 2, KVC_DTYPE_FLOAT16, 2, 2, 1, 3, 2, 41, NULL); }
/* out of order: layer 1 is in the host tier and was not prefetched; 70 tokens also grow its store */
static kvc_error* long_update_layer1(kvc_cache* c) {
  return ot_update(c, 1, KVC_DTYPE_FLOAT16, 2, 2, 70, 3, 2, 42, NULL);
}
static kvc_error* grow_layer0(kvc_cache* c) { return ot_update(c, 0, KVC_DTYPE_FLOAT16, 2, 2, 70, 3, 2, 43, NULL); }
static kvc_error* update_all(kvc_cache* c) {
  ot_layers x;
  ot_layers_make(&x, 3, KVC_DTYPE_FLOAT16, 2, 2, 2, 3, 2, 0, 3);
  kvc_error* e = kvc_cache_update_all(c, 3, x.kt, x.vt, NULL, NULL);
  ot_layers_free(&x);
  return e;
}
static kvc_error* offload_layer0(kvc_cache* c) { return kvc_cache_offload(c, 0); }
static kvc_error* prefetch_layer2(kvc_cache* c) { return kvc_cache_prefetch(c, 2); }
static kvc_error* repeat_rows(kvc_cache* c) { return kvc_cache_batch_repeat_interleave(c, 3); }
static kvc_error* reserve_100(kvc_cache* c) { return kvc_cache_reserve(c, 100); }
static kvc_error* static_decode_layer2(kvc_cache* c) {
  return ot_update(c, 2, KVC_DTYPE_FLOAT32, 2, 2, 1, 3, 2, 44, NULL);
}

static void test_oom_leaves_cache_unchanged(void) {
  static const oom_case cases[] = {
      /* prefetch of layer 1 (k, v) and the host store for layer 0's offload (k, v) */
      {"decode update of layer 0", stepped, decode_layer0, 4},
      {"decode update of layer 2 (wraps to 0)", stepped, decode_layer2, 4},
      {"out-of-order update of an offloaded layer that grows", stepped, long_update_layer1, 6},
      {"update of layer 0 that grows its store", stepped, grow_layer0, 6},
      {"update_all", stepped, update_all, 8},
      {"kvc_cache_offload", stepped, offload_layer0, 2},
      {"kvc_cache_prefetch", stepped, prefetch_layer2, 2},
      {"select (new stores in the host tier)", stepped, oom_select_rows, 6},
      {"repeat_interleave", stepped, repeat_rows, 6},
      {"reorder", stepped, oom_reorder_swap, 1},
      {"reserve (offloaded layers grow in the host tier)", stepped, reserve_100, 4},
      {"OffloadedStaticCache decode update", stepped_static, static_decode_layer2, 4},
  };
  oom_sweep_all(cases, sizeof cases / sizeof cases[0], same_tiers_and_bytes);
}

/* Which layers an update offloads, kind by kind (transformers' is_linear layers and QUANTIZED/SINK never). */
static void test_layers_taking_part(void) {
  static const struct {
    kvc_layer_kind kind;
    int all, non_sliding;
  } rows[] = {
      {KVC_LAYER_DYNAMIC, 1, 1},
      {KVC_LAYER_DYNAMIC_SLIDING, 1, 0},
      {KVC_LAYER_DYNAMIC_CHUNKED, 1, 0},
      {KVC_LAYER_STATIC, 1, 1},
      {KVC_LAYER_STATIC_SLIDING, 1, 0},
      {KVC_LAYER_STATIC_CHUNKED, 1, 0},
      {KVC_LAYER_QUANTIZED, 0, 0},
      {KVC_LAYER_SINK, 0, 0},
      {KVC_LAYER_LINEAR, 0, 0},
      {KVC_LAYER_LINEAR_DYNAMIC, 1, 1}, /* transformers' is_linear is False for it: prefetched and offloaded */
      {KVC_LAYER_LINEAR_DYNAMIC_SLIDING, 0, 0},
      {KVC_LAYER_LINEAR_STATIC, 0, 0},
      {KVC_LAYER_LINEAR_STATIC_SLIDING, 0, 0},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
    kvc_layer l;
    memset(&l, 0, sizeof l);
    l.kind = rows[i].kind;
    l.desc = kvci_kind_find(rows[i].kind);
    CHECK_EQ_I64(kvci_offload_layer_takes_part(KVC_OFFLOAD_ALL, &l), rows[i].all);
    CHECK_EQ_I64(kvci_offload_layer_takes_part(KVC_OFFLOAD_NON_SLIDING, &l), rows[i].non_sliding);
    CHECK_EQ_I64(kvci_offload_layer_takes_part(KVC_OFFLOAD_NONE, &l), 0);
  }
}

int main(void) {
  TU_RUN(test_oom_leaves_cache_unchanged);
  TU_RUN(test_layers_taking_part);
  return tu_finish();
}
