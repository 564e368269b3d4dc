/*
 * tests/gpu/test_gpu_pool.c: the block pool on a device (public ABI): a
 * step write through the slot mapping, copy-on-write after a fork, a prefix
 * match, gathers, block tables (padded and CSR) and a recurrent checkpoint,
 * the per-layer write of every layer through one mapping,
 * with every result downloaded and compared with the values written. Under
 * the emulated device this also proves the core never touches device memory
 * from the host (its pointers are poisoned) and issues every copy on the
 * pool's stream. Last, a disk tier under a device pool: blocks staged
 * through host memory on commit and copied back in by a match after a
 * restart, and shared with a CPU pool of the same model (the fingerprint
 * leaves the device out).
 */
#include "../tier/tier_test.h" /* first: it sets the feature macros (mkdtemp, nftw) */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_runtime.h"
#include "gpu_pool_util.h"
#include "gpu_test_util.h"
#include "kvcache.h"
#include "test_util.h"

static int download_ints(const kvc_tensor* t, int32_t* out, size_t n) {
  return drt_download(0, out, t->data, n * sizeof(int32_t)) == 0;
}

static void run(kvc_pool_layout layout, void* stream) {
  kvc_pool* p = NULL;
  REQUIRE_OK(gp_create(layout, &p));
  if (stream) CHECK_OK(kvc_pool_set_stream(p, stream));
  kvc_pool_sequence *a = NULL, *b = NULL, *c = NULL, *d = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &a));
  int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  int64_t slots[32];
  REQUIRE_OK(kvc_pool_reserve(a, t, 6, slots));
  REQUIRE_OK(write_tokens(p, 3, slots, 0, 6));
  REQUIRE_OK(kvc_pool_commit(a));
  REQUIRE_OK(kvc_pool_fork(a, &c));
  REQUIRE_OK(kvc_pool_reserve(c, t + 6, 1, slots));
  CHECK_EQ_I64(slots[0], 3 * 4 + 2); /* copy-on-write into block 3 */
  REQUIRE_OK(write_tokens(p, 3, slots, 6, 1));
  REQUIRE_OK(kvc_pool_reserve(a, t + 6, 1, slots));
  CHECK_EQ_I64(slots[0], 2 * 4 + 2);
  REQUIRE_OK(write_tokens(p, 3, slots, 6, 1));
  for (uint32_t layer = 0; layer < 2; layer++) {
    CHECK_EQ_I64(gather_mismatches(a, layer), 0);
    CHECK_EQ_I64(gather_mismatches(c, layer), 0);
  }
  const kvc_pool_sequence* both[2] = {a, c};
  kvc_pool_table tb;
  int32_t got[8];
  REQUIRE_OK(kvc_pool_block_table(p, both, 2, 0, KVC_POOL_TABLE_PADDED, &tb));
  CHECK(tb.table.device.device_type == drt_device_type());
  int32_t padded[4] = {1, 2, 1, 3};
  if (CHECK(download_ints(&tb.table, got, 4)))
    for (int i = 0; i < 4; i++) CHECK_EQ_I64(got[i], padded[i]);
  REQUIRE_OK(kvc_pool_block_table(p, both, 2, 0, KVC_POOL_TABLE_CSR, &tb));
  int32_t indptr[3] = {0, 2, 4}, last[2] = {3, 3};
  if (CHECK(download_ints(&tb.indptr, got, 3)))
    for (int i = 0; i < 3; i++) CHECK_EQ_I64(got[i], indptr[i]);
  if (CHECK(download_ints(&tb.last_page_len, got, 2)))
    for (int i = 0; i < 2; i++) CHECK_EQ_I64(got[i], last[i]);
  /* A recurrent state written in place on the device, checkpointed at 8 tokens and restored by a match. */
  kvc_tensor conv, ssm;
  REQUIRE_OK(kvc_pool_recurrent_state(a, 2, &conv, &ssm));
  float pattern[6] = {1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, back[6] = {0};
  REQUIRE(drt_upload(0, conv.data, pattern, sizeof pattern, stream) == 0);
  REQUIRE_OK(kvc_pool_reserve(a, t + 7, 1, slots));
  REQUIRE_OK(write_tokens(p, 3, slots, 7, 1));
  REQUIRE_OK(kvc_pool_commit(a));
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &d));
  REQUIRE_OK(kvc_pool_match_prefix(d, t, 9, &matched));
  CHECK_EQ_U64(matched, 8);
  REQUIRE_OK(kvc_pool_recurrent_state(d, 2, &conv, &ssm));
  CHECK(conv.data != NULL);
  if (CHECK(drt_download(0, back, conv.data, sizeof back) == 0)) CHECK(memcmp(back, pattern, sizeof back) == 0);
  CHECK_EQ_I64(gather_mismatches(d, 0), 0);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &b));
  REQUIRE_OK(kvc_pool_match_prefix(b, t, 6, &matched));
  CHECK_EQ_U64(matched, 0); /* the full group holds [0, 4) but the recurrent group has no checkpoint at 4 */
  kvc_pool_destroy(p);
}

static void test_pool_nhd_on_stream(void) {
  void* s = drt_stream_create(0);
  REQUIRE(s != NULL);
  run(KVC_POOL_LAYOUT_NHD, s);
  drt_stream_synchronize(0, s);
  drt_stream_destroy(0, s);
}

static void test_pool_hnd_default_stream(void) { run(KVC_POOL_LAYOUT_HND, NULL); }

/* The per-layer write on the device: layers written one by one through one mapping gather back as written. */
static void test_pool_write_layer_on_device(void) {
  for (int layout = KVC_POOL_LAYOUT_NHD; layout <= KVC_POOL_LAYOUT_HND; layout++) {
    kvc_pool* p = NULL;
    REQUIRE_OK(gp_create(layout, &p));
    kvc_pool_sequence* s = NULL;
    REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
    int32_t t[6] = {1, 2, 3, 4, 5, 6};
    int64_t slots[12];
    REQUIRE_OK(kvc_pool_reserve(s, t, 6, slots));
    int64_t ks[3] = {6, 2, 4}, vs[3] = {6, 2, 3};
    float hk[6 * 8], hv[6 * 6];
    for (uint32_t l = 0; l < 2; l++) {
      for (int64_t i = 0; i < 6; i++)
        for (int64_t h = 0; h < 2; h++) {
          for (int64_t d = 0; d < 4; d++) hk[i * 8 + h * 4 + d] = value(l, 0, i, h, d);
          for (int64_t d = 0; d < 3; d++) hv[i * 6 + h * 3 + d] = value(l, 1, i, h, d);
        }
      kvc_tensor k = dtensor(ks, 3, hk, 6 * 8), v = dtensor(vs, 3, hv, 6 * 6);
      CHECK_OK(kvc_pool_write_layer(p, l, &k, &v, slots, 6));
      drt_free(0, k.data);
      drt_free(0, v.data);
    }
    for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(gather_mismatches(s, l), 0);
    kvc_pool_destroy(p);
  }
}

/* An attention-only pool of 2 layers on `device` with a disk tier on `dir`. */
static kvc_pool* tier_pool(kvc_device device, const char* dir) {
  kvc_pool_group_options g = KVC_POOL_GROUP_OPTIONS_INIT;
  g.block_size = 4;
  g.num_blocks = 8;
  kvc_pool_layer_options l[2] = {KVC_POOL_LAYER_OPTIONS_INIT, KVC_POOL_LAYER_OPTIONS_INIT};
  for (int i = 0; i < 2; i++) {
    l[i].num_kv_heads = 2;
    l[i].key_head_dim = 4;
    l[i].value_head_dim = 3;
  }
  kvc_pool_options o = KVC_POOL_OPTIONS_INIT;
  o.dtype = KVC_DTYPE_FLOAT32;
  o.device = device;
  o.num_groups = 1;
  o.groups = &g;
  o.num_layers = 2;
  o.layers = l;
  kvc_pool* p = NULL;
  if (!CHECK_OK(kvc_pool_create(&o, &p))) return NULL;
  kvc_tier* t = tt_disk(dir, 0);
  if (!CHECK(t != NULL) || !CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT))) {
    kvc_tier_destroy(t);
    kvc_pool_destroy(p);
    return NULL;
  }
  return p;
}

/* A device pool on `dir` computes and commits the first 12 of `t` (3 blocks), through its tier worker when `worker`
   is set, and is destroyed once the tier stored the 3 blocks. */
static void fill_tier(const char* dir, const int32_t* t, int worker) {
  int64_t slots[16];
  kvc_pool* p = tier_pool(dev(), dir);
  REQUIRE(p != NULL);
  if (worker) REQUIRE_OK(kvc_pool_start_tier_worker(p, NULL));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_reserve(s, t, 12, slots));
  REQUIRE_OK(write_tokens(p, 2, slots, 0, 12));
  REQUIRE_OK(kvc_pool_commit(s));
  if (worker) REQUIRE_OK(kvc_pool_stop_tier_worker(p, 10000));
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).puts, 3);
  kvc_pool_destroy(p);
}

static void test_disk_tier_through_host_memory(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "gpu-tier"));
  int32_t t[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  fill_tier(dir, t, 0);
  /* A restarted device pool, then a CPU pool of the same model: both match from disk with the same bytes. */
  uint64_t matched = 0;
  kvc_pool_sequence* s = NULL;
  kvc_pool* p = tier_pool(dev(), dir);
  REQUIRE(p != NULL);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, t, 13, &matched));
  CHECK_EQ_U64(matched, 12);
  for (uint32_t layer = 0; layer < 2; layer++) CHECK_EQ_I64(gather_mismatches(s, layer), 0);
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).hits, 3);
  kvc_pool_destroy(p);
  kvc_device cpu = {KVC_DEVICE_CPU, 0};
  p = tier_pool(cpu, dir);
  REQUIRE(p != NULL);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, t, 13, &matched));
  CHECK_EQ_U64(matched, 12);
  for (uint32_t layer = 0; layer < 2; layer++) CHECK_EQ_I64(gather_mismatches_on(s, layer, 1), 0);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

/* The same through the pool's tier worker: a device pool's blocks are staged on the step and stored by the worker,
   and a prefetch's verified payloads go back through host memory into a restarted device pool. */
static void test_tier_worker_through_host_memory(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "gpu-tier-worker"));
  int32_t t[13] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};
  fill_tier(dir, t, 1);
  kvc_pool_sequence* s;
  kvc_pool* p = tier_pool(dev(), dir);
  REQUIRE(p != NULL);
  REQUIRE_OK(kvc_pool_start_tier_worker(p, NULL));
  CHECK_EQ_U64(tt_prefetch_collect(p, t, 13, 10000, &s, NULL), 12);
  for (uint32_t layer = 0; layer < 2; layer++) CHECK_EQ_I64(gather_mismatches(s, layer), 0);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

/* Since 0.7: a latent group (one row per token, no V) on the device: a per-layer write and a gather of its rows.
   fp8 storage has no device kernels yet: create refuses it naming the backend, out untouched. */
static void test_latent_and_fp8_on_device(void) {
  pt_single po;
  pt_single_fill(&po, KVC_POOL_GROUP_LATENT, 4, 6, 1, 5);
  po.o.device = dev();
  kvc_pool* p = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  int32_t t[6] = {1, 2, 3, 4, 5, 6};
  int64_t slots[6], ks[3] = {6, 1, 5}, gs[4] = {1, 1, 6, 5};
  float rows[30], back[30];
  for (int i = 0; i < 30; i++) rows[i] = value(0, 0, i / 5, 0, i % 5);
  REQUIRE_OK(kvc_pool_reserve(s, t, 6, slots));
  kvc_tensor k = dtensor(ks, 3, rows, 30), out = dtensor(gs, 4, NULL, 30);
  CHECK_OK(kvc_pool_write_layer(p, 0, &k, NULL, slots, 6));
  CHECK_OK(kvc_pool_gather(s, 0, &out, NULL));
  CHECK(drt_download(0, back, out.data, sizeof back) == 0);
  CHECK(!memcmp(back, rows, sizeof rows));
  drt_free(0, k.data);
  drt_free(0, out.data);
  kvc_pool_destroy(p);
  po.l.storage = KVC_POOL_STORAGE_FP8_E4M3;
  kvc_pool* untouched = (kvc_pool*)&po.o;
  p = untouched;
  kvc_error* e = kvc_pool_create(&po.o, &p);
  CHECK_EQ_I64(kvc_error_code(e), KVC_ERROR_UNSUPPORTED);
  CHECK(e && strstr(kvc_error_message(e), "layers[0].storage is KVC_POOL_STORAGE_FP8_E4M3 but the") &&
        strstr(kvc_error_message(e), "backend has no fp8 pool kernels"));
  kvc_error_destroy(e);
  CHECK(p == untouched);
}

int main(void) {
  gt_open_or_skip("test_gpu_pool");
  TU_RUN(test_latent_and_fp8_on_device);
  TU_RUN(test_pool_nhd_on_stream);
  TU_RUN(test_pool_hnd_default_stream);
  TU_RUN(test_pool_write_layer_on_device);
  TU_RUN(test_disk_tier_through_host_memory);
  TU_RUN(test_tier_worker_through_host_memory);
  return tu_finish();
}
