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

/* The prompt shared by the tests: `n` token ids. */
static TU_UNUSED void tt_prompt(int32_t* tokens, size_t n, int32_t base) {
  for (size_t i = 0; i < n; i++) tokens[i] = base + (int32_t)(i * 7 % 101);
}

#endif /* KVC_TESTS_TIER_TEST_H */
