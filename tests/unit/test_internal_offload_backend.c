/*
 * What an update of an offloading cache asks of the backend, in order: the
 * contract a GPU backend relies on to overlap the prefetch with the write
 * (core/backend.h). Every buffer is allocated before anything moves; then
 * the write waits for the tier copies (tier_wait), the next layer's prefetch
 * is issued, the layer is written, and only then offloaded; the device store
 * the update's views point at is freed at the next update.
 *
 * Log letters: A/F device alloc/free, h/f host alloc/free, W tier_wait,
 * D prefetch copy (to the device), H offload copy (to the host), C copy_4d
 * (the write of the new tokens).
 */
#include "internal.h"
#include "test_offload_util.h"

static const kvc_backend* real;
static kvc_backend logging;
static char log_buf[256];
static size_t log_len;

static void note(char c) {
  if (log_len + 1 < sizeof log_buf) log_buf[log_len++] = c;
  log_buf[log_len] = '\0';
}
static void* log_alloc(void* ctx, const kvc_exec* dev, size_t bytes) {
  note('A');
  return real->alloc_zeroed(ctx, dev, bytes);
}
static void* log_host_alloc(void* ctx, const kvc_exec* dev, size_t bytes) {
  note('h');
  return real->host_alloc_zeroed(ctx, dev, bytes);
}
static void* log_host_alloc_unzeroed(void* ctx, const kvc_exec* dev, size_t bytes) {
  note('h');
  return real->host_alloc(ctx, dev, bytes);
}
static void log_free(void* ctx, const kvc_exec* dev, void* p) {
  note('F');
  real->free(ctx, dev, p);
}
static void log_host_free(void* ctx, const kvc_exec* dev, void* p) {
  note('f');
  real->host_free(ctx, dev, p);
}
static int log_copy(void* ctx, const kvc_exec* dev, void* dst, const int64_t ds[4], const void* src, const int64_t ss[4],
                    const int64_t shape[4], size_t elem) {
  note('C');
  return real->copy_4d(ctx, dev, dst, ds, src, ss, shape, elem);
}
static int log_tier_copy(void* ctx, const kvc_exec* dev, int to_host, void* dst, const int64_t ds[4], const void* src,
                         const int64_t ss[4], const int64_t shape[4], size_t elem) {
  note(to_host ? 'H' : 'D');
  return real->copy_tier_4d(ctx, dev, to_host, dst, ds, src, ss, shape, elem);
}
static int log_wait(void* ctx, const kvc_exec* dev) {
  note('W');
  return real->tier_wait(ctx, dev);
}

static void install(kvc_cache* c) {
  real = kvci_cpu_backend();
  logging = *real;
  logging.alloc_zeroed = log_alloc;
  logging.host_alloc_zeroed = log_host_alloc;
  logging.host_alloc = log_host_alloc_unzeroed;
  logging.free = log_free;
  logging.host_free = log_host_free;
  logging.copy_4d = log_copy;
  logging.copy_tier_4d = log_tier_copy;
  logging.tier_wait = log_wait;
  c->backend = &logging;
}

static void expect_log(kvc_cache* c, uint32_t layer, const char* want, const char* what) {
  log_len = 0;
  log_buf[0] = '\0';
  CHECK_OK(ot_update(c, layer, KVC_DTYPE_FLOAT32, 1, 2, 1, 3, 3, 100 + layer, NULL));
  tu_checks_total++;
  if (strcmp(log_buf, want) != 0) {
    tu_failures_total++;
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s asked the backend for %s, expected %s\n", __FILE__, __LINE__,
            tu_current_test, what, log_buf, want);
  }
}

static void test_update_backend_order(void) {
  kvc_cache* c = ot_stepped_cache(KVC_PRESET_DYNAMIC, "fff", 0, 0, KVC_OFFLOAD_ALL, 2, 2, 3, "011");
  REQUIRE(c);
  install(c);
  /* u0: store for prefetching 1 (AA) and for offloading 0 (hh); layer 2's retired device store goes (FF);
   * wait, prefetch 1 (DD) and free its host store (ff), write 0 (CC), offload 0 (HH) */
  expect_log(c, 0, "AAhhFFWDDffCCHH", "decode update of layer 0");
  CHECK_TIERS(c, "101", "update of layer 0");
  expect_log(c, 1, "AAhhFFWDDffCCHH", "decode update of layer 1");
  /* u2 wraps around to layer 0 */
  expect_log(c, 2, "AAhhFFWDDffCCHH", "decode update of layer 2");
  CHECK_TIERS(c, "011", "step 2");
  /* out of order: layer 2 is in the host tier; it comes back before the wait (AA DD ff), its next layer 0 is there */
  expect_log(c, 2, "AAhhFFDDffWCCHH", "update of offloaded layer 2");
  /* explicit calls: the retired store goes first, the move frees the old store at once */
  log_len = 0;
  CHECK_OK(kvc_cache_offload(c, 0));
  CHECK(strcmp(log_buf, "hhFFHHFF") == 0);
  log_len = 0;
  log_buf[0] = '\0';
  CHECK_OK(kvc_cache_prefetch(c, 1));
  CHECK(strcmp(log_buf, "AADDffW") == 0);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_update_backend_order);
  return tu_finish();
}
