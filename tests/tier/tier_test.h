/*
 * tests/tier/tier_test.h: helpers of the tier tests: a pool of the pool
 * tests' shape (tests/pool/pool_test.h) with one full-attention group of
 * 4-token blocks, temporary directories, and the files under one.
 */
#ifndef KVC_TESTS_TIER_TEST_H
#define KVC_TESTS_TIER_TEST_H

/* Included first by the tier tests, before any system header: mkdtemp, truncate, utimes, nftw. */
#define _DEFAULT_SOURCE 1
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../pool/pool_test.h"

#define TT_BLOCK 4

/* A one-group pool (`blocks` blocks of 4 tokens, 2 layers) in `layout`, events on. */
static TU_UNUSED kvc_error* tt_pool(kvc_pool** out, uint32_t blocks, kvc_pool_layout layout) {
  const pt_group g = {KVC_POOL_GROUP_FULL, TT_BLOCK, blocks, 0};
  const uint32_t layers[2] = {0, 0};
  return pt_pool(out, &g, 1, layers, 2, layout, 64, 1);
}

static TU_UNUSED kvc_tier* tt_disk(const char* dir, uint64_t max_bytes) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  o.max_bytes = max_bytes;
  kvc_tier* t = NULL;
  kvc_error* e = kvc_disk_tier_create(&o, &t);
  if (e) {
    fprintf(stderr, "kvc_disk_tier_create: %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
  }
  return t;
}

static TU_UNUSED kvc_tier_stats tt_stats(const kvc_tier* t) {
  kvc_tier_stats s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  kvc_error_destroy(kvc_tier_stats_get(t, &s));
  return s;
}

/* A fresh directory under TMPDIR (or /tmp), into `dir` (PATH_MAX bytes). */
static TU_UNUSED const char* tt_tempdir(char* dir, size_t size, const char* tag) {
  const char* base = getenv("TMPDIR");
  snprintf(dir, size, "%s/kvc-%s-XXXXXX", base && *base ? base : "/tmp", tag);
  return mkdtemp(dir);
}

static int tt_rm_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)flag, (void)ftw;
  return remove(path);
}

static TU_UNUSED void tt_rmtree(const char* dir) { nftw(dir, tt_rm_one, 16, FTW_DEPTH | FTW_PHYS); }

/* The regular files under `dir` (recursively), up to `cap` paths into `paths` (each 4096 bytes). */
static char (*tt_found)[4096];
static size_t tt_found_n, tt_found_cap;
static int tt_list_one(const char* path, const struct stat* st, int flag, struct FTW* ftw) {
  (void)st, (void)ftw;
  if (flag == FTW_F && tt_found_n < tt_found_cap) snprintf(tt_found[tt_found_n++], 4096, "%s", path);
  return 0;
}
static TU_UNUSED size_t tt_files(const char* dir, char (*paths)[4096], size_t cap) {
  tt_found = paths;
  tt_found_n = 0;
  tt_found_cap = cap;
  nftw(dir, tt_list_one, 16, FTW_PHYS);
  return tt_found_n;
}

/* Whether `e` is an error of `code` whose message contains `needle` (it is destroyed). */
static TU_UNUSED int tt_err_says(kvc_error* e, kvc_code code, const char* needle) {
  int ok = e && kvc_error_code(e) == code && strstr(kvc_error_message(e), needle) != NULL;
  if (!ok) fprintf(stderr, "  expected code %d with '%s', got %s\n", code, needle, e ? kvc_error_message(e) : "success");
  kvc_error_destroy(e);
  return ok;
}

/* CRC-32C (Castagnoli, reflected), bit by bit: what a writer without the library computes to forge a frame. */
static TU_UNUSED uint32_t tt_crc32c(const uint8_t* p, size_t n) {
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < n; i++) {
    c ^= p[i];
    for (int b = 0; b < 8; b++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
  }
  return ~c;
}

/*
 * What a writer of the store can do without any key: turns `victim` (a value of `n` bytes as docs/tiers.md frames
 * it) into `donor`'s payload under victim's own key (header bytes 8..80), with the CRC-32C of a version-1 frame
 * recomputed (a version-2 frame's MAC is left as it was: the forger cannot compute it).
 */
static TU_UNUSED void tt_forge(uint8_t* victim, const uint8_t* donor, size_t n) {
  uint8_t key[72];
  memcpy(key, victim + 8, sizeof key);
  memcpy(victim, donor, n);
  memcpy(victim + 8, key, sizeof key);
  if (victim[4] == 1) {
    uint32_t crc = tt_crc32c(victim, n - 4);
    for (int i = 0; i < 4; i++) victim[n - 4 + i] = (uint8_t)(crc >> (8 * i));
  }
}

/* The prompt shared by the tests: `n` token ids. */
static TU_UNUSED void tt_prompt(int32_t* tokens, size_t n, int32_t base) {
  for (size_t i = 0; i < n; i++) tokens[i] = base + (int32_t)(i * 7 % 101);
}

/* A new sequence of `p` computes and commits the first `n` (<= 64) tokens of tt_prompt (base 1). */
static TU_UNUSED kvc_error* tt_commit_prompt(kvc_pool* p, size_t n, kvc_pool_sequence** out) {
  int32_t tok[64];
  tt_prompt(tok, n, 1);
  kvc_error* e = kvc_pool_sequence_create(p, NULL, out);
  return e ? e : pt_step(p, 1, 2, *out, tok, (int64_t)n);
}

static TU_UNUSED double tt_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A fresh sequence of `p` computes and commits the first `n` (<= 64) of `tokens`: how long the commit alone took
   (ms), which a pool's tier worker must keep short whatever its store does. */
static TU_UNUSED double tt_commit_ms(kvc_pool* p, const int32_t* tokens, size_t n) {
  kvc_pool_sequence* s = NULL;
  int64_t slots[64];
  kvc_error_destroy(kvc_pool_sequence_create(p, NULL, &s));
  kvc_error_destroy(kvc_pool_reserve(s, tokens, n, slots));
  kvc_error_destroy(pt_write(p, 2, slots, 0, (int64_t)n));
  double t0 = tt_now_ms();
  kvc_error_destroy(kvc_pool_commit(s));
  double took = tt_now_ms() - t0;
  kvc_pool_sequence_destroy(s);
  return took;
}

/* A new sequence of `p` (into *s, to destroy) prefetches the first `n` of `tokens` and collects them within
   `timeout_ms`: the tokens matched (UINT64_MAX when a call failed), and the collect's own time (ms) in *ms when set. */
static TU_UNUSED uint64_t tt_prefetch_collect(kvc_pool* p, const int32_t* tokens, size_t n, uint32_t timeout_ms,
                                              kvc_pool_sequence** s, double* ms) {
  kvc_pool_prefetch* f = NULL;
  uint64_t matched = UINT64_MAX;
  *s = NULL;
  if (!CHECK_OK(kvc_pool_sequence_create(p, NULL, s)) || !CHECK_OK(kvc_pool_prefetch_start(*s, tokens, n, &f)))
    return UINT64_MAX;
  double t0 = tt_now_ms();
  if (!CHECK_OK(kvc_pool_prefetch_collect(f, *s, timeout_ms, &matched))) matched = UINT64_MAX;
  if (ms) *ms = tt_now_ms() - t0;
  kvc_pool_prefetch_destroy(f);
  return matched;
}

/* A new sequence of `p` matches the first `n` (<= 64) tokens of tt_prompt (base 1). */
static TU_UNUSED kvc_error* tt_match_prompt(kvc_pool* p, size_t n, kvc_pool_sequence** out, uint64_t* matched) {
  int32_t tok[64];
  tt_prompt(tok, n, 1);
  kvc_error* e = kvc_pool_sequence_create(p, NULL, out);
  return e ? e : kvc_pool_match_prefix(*out, tok, n, matched);
}

#endif /* KVC_TESTS_TIER_TEST_H */
