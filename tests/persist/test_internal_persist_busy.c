/*
 * test_internal_persist_busy.c: every entry point of kvcache/persist.h on a
 * handle another call is inside (the handle's guard held by the test, as a
 * call on another thread would hold it). A save, which only reads, is
 * refused while a mutating call is inside; a restore or a load into a pool,
 * which mutate, while any call is. Each refusal is KVC_ERROR_BUSY naming the
 * refused function and the one inside; no file is written, no callback
 * called, no handle changed (the pool's fingerprint, read under the pool's
 * guard, too); with the guard released the same call works.
 */
#include <sys/stat.h>
#include <unistd.h>

#include "guard.h"
#include "internal.h"
#include "../pool/pool_test.h"
#include "persist_test.h"

static const char* const HOLDER = "kvc_test_holder";

/* BUSY, naming the refused call and the holder (for an exclusive holder, which records its name). */
static int busy(kvc_error* e, const char* fn, int named_holder) {
  const char* m = e ? kvc_error_message(e) : "";
  int ok = e && kvc_error_code(e) == KVC_ERROR_BUSY && strstr(m, fn) && (!named_holder || strstr(m, HOLDER));
  if (!ok) fprintf(TU_LOG, "    %s: got %s\n", fn, e ? m : "success");
  kvc_error_destroy(e);
  return ok;
}

static int exists(const char* path) {
  struct stat st;
  return stat(path, &st) == 0;
}

/* Whether two saved files are byte for byte the same (the handle did not change between the saves). */
static int same_bytes(const ps_buffer* a, const ps_buffer* b) {
  return a->len == b->len && a->len > 0 && memcmp(a->data, b->data, a->len) == 0;
}

static int calls;
static int count_write(void* user, const void* data, size_t bytes) {
  (void)user, (void)data, (void)bytes;
  calls++;
  return 0;
}

static kvc_cache* small_cache(uint64_t seed) {
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(NULL, &c))) return NULL;
  ps_step(c, 2, 6, 0, seed);
  return c;
}

static void test_cache_calls(void) {
  kvc_cache* c = small_cache(1);
  kvc_cache* other = small_cache(9);
  REQUIRE(c && other);
  char path[256];
  ps_path(path, sizeof path, "busy-cache");
  unlink(path);
  ps_buffer file = {0}, before = {0}, after = {0};
  REQUIRE_OK(kvc_cache_save_to(other, ps_buffer_write, &file, NULL));
  /* A mutating call inside: saves are refused, nothing written. */
  kvci_guard_entry held = kvci_guard_enter_exclusive(kvci_guard_of(c), HOLDER);
  REQUIRE(held.guard != NULL);
  CHECK(busy(kvc_cache_save(c, path, NULL), "kvc_cache_save", 1));
  CHECK(!exists(path));
  calls = 0;
  CHECK(busy(kvc_cache_save_to(c, count_write, NULL, NULL), "kvc_cache_save_to", 1));
  CHECK_EQ_I64(calls, 0);
  kvci_guard_leave(&held);
  /* A reading call inside: restores are refused, the cache is unchanged. */
  REQUIRE_OK(kvc_cache_save_to(c, ps_buffer_write, &before, NULL));
  REQUIRE_OK(kvc_cache_save(other, path, NULL));
  held = kvci_guard_enter_shared(kvci_guard_of(c));
  CHECK(busy(kvc_cache_restore(c, path), "kvc_cache_restore", 0));
  CHECK(busy(kvc_cache_restore_buffer(c, file.data, file.len), "kvc_cache_restore_buffer", 0));
  kvci_guard_leave(&held);
  REQUIRE_OK(kvc_cache_save_to(c, ps_buffer_write, &after, NULL));
  CHECK(same_bytes(&before, &after));
  /* Released: the same calls work. */
  CHECK_OK(kvc_cache_restore_buffer(c, file.data, file.len));
  ps_same(other, c, "restored once the guard was released");
  free(file.data), free(before.data), free(after.data);
  unlink(path);
  kvc_cache_destroy(c);
  kvc_cache_destroy(other);
}

static kvc_encoder_decoder_cache* encdec(uint64_t seed) {
  kvc_cache *self = small_cache(seed), *cross = small_cache(seed + 1);
  kvc_encoder_decoder_cache* ed = NULL;
  if (!self || !cross || !CHECK_OK(kvc_encoder_decoder_cache_create(self, cross, &ed))) return NULL;
  return ed;
}

static void test_encoder_decoder_calls(void) {
  kvc_encoder_decoder_cache* ed = encdec(1);
  kvc_encoder_decoder_cache* other = encdec(20);
  REQUIRE(ed && other);
  char path[256];
  ps_path(path, sizeof path, "busy-encdec");
  ps_buffer file = {0}, before = {0}, after = {0};
  REQUIRE_OK(kvc_encoder_decoder_cache_save_to(other, ps_buffer_write, &file, NULL));
  REQUIRE_OK(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &before, NULL));
  REQUIRE_OK(kvc_encoder_decoder_cache_save(other, path, NULL));
  /* Each of its three guards (the pair, then each half) refuses on its own. */
  for (int part = 0; part < 3; part++) {
    kvci_guard_entry held = kvci_guard_enter_exclusive(kvci_encdec_guard(ed, part), HOLDER);
    REQUIRE(held.guard != NULL);
    char out[256];
    ps_path(out, sizeof out, "busy-encdec-out");
    unlink(out);
    CHECK(busy(kvc_encoder_decoder_cache_save(ed, out, NULL), "kvc_encoder_decoder_cache_save", 1));
    CHECK(!exists(out));
    calls = 0;
    CHECK(busy(kvc_encoder_decoder_cache_save_to(ed, count_write, NULL, NULL), "kvc_encoder_decoder_cache_save_to", 1));
    CHECK_EQ_I64(calls, 0);
    kvci_guard_leave(&held);
    held = kvci_guard_enter_shared(kvci_encdec_guard(ed, part));
    CHECK(busy(kvc_encoder_decoder_cache_restore(ed, path), "kvc_encoder_decoder_cache_restore", 0));
    CHECK(busy(kvc_encoder_decoder_cache_restore_buffer(ed, file.data, file.len),
               "kvc_encoder_decoder_cache_restore_buffer", 0));
    kvci_guard_leave(&held);
  }
  /* Unchanged by the refusals, and restorable now. */
  REQUIRE_OK(kvc_encoder_decoder_cache_save_to(ed, ps_buffer_write, &after, NULL));
  CHECK(same_bytes(&before, &after));
  CHECK_OK(kvc_encoder_decoder_cache_restore_buffer(ed, file.data, file.len));
  ps_same(kvc_encoder_decoder_cache_self_attention(other), kvc_encoder_decoder_cache_self_attention(ed), "restored");
  free(file.data), free(before.data), free(after.data);
  unlink(path);
  kvc_encoder_decoder_cache_destroy(ed);
  kvc_encoder_decoder_cache_destroy(other);
}

static const pt_group GROUPS[1] = {{KVC_POOL_GROUP_FULL, 4, 32, 0}};
static const uint32_t LAYER_GROUP[2] = {0, 0};

static void test_pool_sequence_calls(void) {
  kvc_pool *pool = NULL, *into = NULL;
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(pt_pool(&pool, GROUPS, 1, LAYER_GROUP, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(pt_pool(&into, GROUPS, 1, LAYER_GROUP, 2, KVC_POOL_LAYOUT_NHD, 0, 1));
  REQUIRE_OK(kvc_pool_sequence_create(pool, NULL, &s));
  int32_t ids[6] = {11, 12, 13, 14, 15, 16};
  CHECK_OK(pt_step(pool, 1, 2, s, ids, 6));
  char path[256], out[256];
  ps_path(path, sizeof path, "busy-seq");
  ps_path(out, sizeof out, "busy-seq-out");
  unlink(out);
  ps_buffer file = {0};
  REQUIRE_OK(kvc_pool_sequence_save_to(s, ps_buffer_write, &file, NULL));
  REQUIRE_OK(kvc_pool_sequence_save(s, path, NULL));
  kvci_guard_entry held = kvci_guard_enter_exclusive(kvci_sequence_guard(s), HOLDER);
  REQUIRE(held.guard != NULL);
  CHECK(busy(kvc_pool_sequence_save(s, out, NULL), "kvc_pool_sequence_save", 1));
  CHECK(!exists(out));
  calls = 0;
  CHECK(busy(kvc_pool_sequence_save_to(s, count_write, NULL, NULL), "kvc_pool_sequence_save_to", 1));
  CHECK_EQ_I64(calls, 0);
  kvci_guard_leave(&held);
  /* A load into a pool another call reads: refused, no sequence made, no block taken. */
  held = kvci_guard_enter_shared(kvci_pool_guard(into));
  kvc_pool_sequence* loaded = (kvc_pool_sequence*)0x1;
  CHECK(busy(kvc_pool_sequence_load(into, path, &loaded), "kvc_pool_sequence_load", 0));
  CHECK(busy(kvc_pool_sequence_load_buffer(into, file.data, file.len, &loaded), "kvc_pool_sequence_load_buffer", 0));
  CHECK(loaded == (kvc_pool_sequence*)0x1);
  kvci_guard_leave(&held);
  loaded = NULL;
  if (CHECK_OK(kvc_pool_sequence_load_buffer(into, file.data, file.len, &loaded)))
    CHECK_EQ_U64(kvc_pool_sequence_length(loaded), 6);
  kvc_pool_sequence_destroy(loaded);
  /* The pool's fingerprint, which a tier's frames carry, is read under the same guard. */
  uint8_t fp[KVC_BLOCK_HASH_SIZE], zero[KVC_BLOCK_HASH_SIZE] = {0};
  memset(fp, 0, sizeof fp);
  held = kvci_guard_enter_exclusive(kvci_pool_guard(into), HOLDER);
  CHECK(busy(kvc_pool_fingerprint(into, fp), "kvc_pool_fingerprint", 1));
  CHECK(memcmp(fp, zero, sizeof fp) == 0);
  kvci_guard_leave(&held);
  free(file.data);
  unlink(path);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(pool);
  kvc_pool_destroy(into);
}

int main(void) {
  TU_RUN(test_cache_calls);
  TU_RUN(test_encoder_decoder_calls);
  TU_RUN(test_pool_sequence_calls);
  return tu_finish();
}
