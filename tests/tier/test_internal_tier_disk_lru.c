/*
 * test_internal_tier_disk_lru.c: the disk tier's size limit (core/tier/
 * disk_tier.c) through the tier calls the pool makes: the least recently
 * used value goes first (a get counts as a use), a value larger than the
 * limit is refused, and a restarted tier rebuilds its order from the files'
 * modification times and enforces a smaller limit at once.
 */
#include "tier_test.h" /* first: it sets the feature macros */

#include <sys/time.h>

#include "tier/tier_internal.h"

enum { PAYLOAD = 1000 };
#define FRAME (KVCI_TIER_HEADER_SIZE + PAYLOAD + KVCI_TIER_TRAILER_SIZE)

static kvc_tier_key key(int i) {
  kvc_tier_key k;
  memset(&k, 0, sizeof k);
  memset(k.fingerprint, 0xAB, sizeof k.fingerprint);
  for (int j = 0; j < KVC_BLOCK_HASH_SIZE; j++) k.block_hash[j] = (uint8_t)(i * 31 + j);
  return k;
}

static size_t put(kvc_tier* t, int i) {
  static uint8_t v[FRAME];
  kvc_tier_key k = key(i);
  memset(v + KVCI_TIER_HEADER_SIZE, i, PAYLOAD);
  kvci_tier_frame_seal(v, &k, PAYLOAD, 1);
  const void* values[1] = {v};
  size_t sizes[1] = {FRAME};
  return kvci_tier_put_many(t, &k, values, sizes, 1);
}

/* Whether key i is found and verifies. */
static int has(kvc_tier* t, int i) {
  static uint8_t v[FRAME + 8];
  void* values[1] = {v};
  size_t sizes[1];
  kvc_tier_key k = key(i);
  if (kvci_tier_get_many(t, &k, values, sizeof v, sizes, 1) != 1) return 0;
  const uint8_t* p = kvci_tier_frame_open(v, sizes[0], &k, PAYLOAD, 1);
  return p && p[0] == (uint8_t)i;
}

static void test_lru_under_limit_and_restart(void) {
  char dir[4096], files[16][4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "lru"));
  kvc_tier* t = tt_disk(dir, 3 * FRAME);
  REQUIRE(t != NULL);
  for (int i = 0; i < 3; i++) CHECK_EQ_U64(put(t, i), 1);
  CHECK(has(t, 0)); /* 0 is now the most recent: 1 is the least */
  CHECK_EQ_U64(put(t, 3), 1);
  CHECK(!has(t, 1));
  CHECK(has(t, 0) && has(t, 2) && has(t, 3));
  CHECK_EQ_U64(tt_files(dir, files, 16), 3);
  CHECK_EQ_U64(put(t, 2), 1); /* stored already: no new file, no eviction */
  CHECK_EQ_U64(tt_files(dir, files, 16), 3);
  uint8_t big[4 * FRAME];
  kvc_tier_key k = key(9);
  const void* values[1] = {big};
  size_t sizes[1] = {sizeof big};
  CHECK_EQ_U64(kvci_tier_put_many(t, &k, values, sizes, 1), 0); /* larger than the limit: refused */
  CHECK_EQ_U64(tt_stats(t).put_failures, 1);
  kvc_tier_destroy(t);

  /* A restart orders by modification time: make key 3's file the oldest, then allow two values. */
  size_t n = tt_files(dir, files, 16);
  REQUIRE(n == 3);
  for (size_t i = 0; i < n; i++) {
    struct timeval tv[2] = {{1000000000, 0}, {1000000000 + (long)i + 10, 0}};
    uint8_t v[FRAME];
    FILE* f = fopen(files[i], "rb");
    REQUIRE(f != NULL);
    size_t got = fread(v, 1, FRAME, f);
    fclose(f);
    REQUIRE(got == FRAME);
    if (v[KVCI_TIER_HEADER_SIZE] == 3) tv[1].tv_sec = 1000000000; /* key 3: the oldest */
    REQUIRE(utimes(files[i], tv) == 0);
  }
  t = tt_disk(dir, 2 * FRAME);
  REQUIRE(t != NULL);
  CHECK_EQ_U64(tt_files(dir, files, 16), 2);
  CHECK(!has(t, 3));
  CHECK(has(t, 0) && has(t, 2));
  kvc_tier_destroy(t);
  tt_rmtree(dir);
}

int main(void) {
  TU_RUN(test_lru_under_limit_and_restart);
  return tu_finish();
}
