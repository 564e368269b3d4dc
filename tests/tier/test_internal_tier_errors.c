/*
 * test_internal_tier_errors.c: what goes wrong below a tier, through the
 * tier calls the pool makes (core/tier/tier.c, disk_tier.c, disk_index.c):
 * the disk tier's directory made impossible (a file where a folder must be,
 * the tier's directory removed, a folder where a block file goes, a file
 * system that refuses to grow a file), values found empty, too large or
 * unreadable, files another process wrote or removed, leftovers and
 * foreign names in the directory, more files than one scan batch, keys
 * that share a bucket of the index and are evicted from its middle and
 * across its end; and a custom store whose counts lie. Every failure is a
 * stored count or a miss, never a value that is not the one stored, and
 * no temporary file stays behind.
 */
#include "tier_test.h" /* first: it sets the feature macros */

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/time.h>

#include "tier/tier_internal.h"

enum { PAYLOAD = 200 };
#define FRAME (KVCI_TIER_HEADER_SIZE + PAYLOAD + KVCI_TIER_TRAILER_SIZE)

/* Key i; keys of one `bucket` share the index's home slot (the block hash's first 4 bytes), and its byte 32. */
static kvc_tier_key key_in(int bucket, int i) {
  kvc_tier_key k;
  memset(&k, 0, sizeof k);
  memset(k.fingerprint, 0xCD, sizeof k.fingerprint);
  for (int j = 0; j < KVC_BLOCK_HASH_SIZE; j++) k.block_hash[j] = (uint8_t)(i * 13 + j);
  k.block_hash[30] = (uint8_t)(i >> 8), k.block_hash[31] = (uint8_t)i; /* distinct for every i below 2^16 */
  if (bucket >= 0) {
    const uint32_t home = (uint32_t)bucket;
    memcpy(k.block_hash, &home, sizeof home);
  }
  return k;
}
static kvc_tier_key key(int i) { return key_in(-1, i); }

static size_t put_key(kvc_tier* t, kvc_tier_key k, int fill) {
  static uint8_t v[FRAME];
  memset(v + KVCI_TIER_HEADER_SIZE, fill, PAYLOAD);
  kvci_tier_frame_seal(v, &k, PAYLOAD, 1);
  const void* values[1] = {v};
  size_t sizes[1] = {FRAME};
  return kvci_tier_put_many(t, &k, values, sizes, 1);
}

/* The value's size found under k (0: a miss); 1 in *valid when it is k's frame holding `fill`. */
static size_t get_key(kvc_tier* t, kvc_tier_key k, size_t capacity, int fill, int* valid) {
  static uint8_t v[2 * FRAME];
  void* values[1] = {v};
  size_t sizes[1] = {0};
  size_t n = kvci_tier_get_many(t, &k, values, capacity, sizes, 1);
  const uint8_t* p = n ? kvci_tier_frame_open(v, sizes[0], &k, PAYLOAD, 1) : NULL;
  if (valid) *valid = p && p[0] == (uint8_t)fill && p[PAYLOAD - 1] == (uint8_t)fill;
  return n ? sizes[0] : 0;
}

static int found(kvc_tier* t, kvc_tier_key k, int fill) {
  int valid = 0;
  return get_key(t, k, FRAME, fill, &valid) == FRAME && valid;
}

/* DIR/XX/<hex key>.kvtb of k, as the tier names it. */
static void block_file(const char* dir, kvc_tier_key k, char* out, size_t n) {
  uint8_t raw[KVCI_TIER_KEY_SIZE];
  kvci_tier_key_encode(&k, raw);
  int at = snprintf(out, n, "%s/%02x/", dir, raw[32]);
  for (size_t i = 0; i < KVCI_TIER_KEY_SIZE; i++) at += snprintf(out + at, n - (size_t)at, "%02x", raw[i]);
  snprintf(out + at, n - (size_t)at, ".kvtb");
}

static void touch(const char* path, const char* text, long age_seconds) {
  FILE* f = fopen(path, "w");
  if (!CHECK(f != NULL)) return;
  fputs(text, f);
  fclose(f);
  if (age_seconds) {
    struct timeval tv[2];
    gettimeofday(&tv[0], NULL);
    tv[0].tv_sec -= age_seconds;
    tv[1] = tv[0];
    CHECK(utimes(path, tv) == 0);
  }
}

/* The number of files under dir whose name contains `part`. */
static size_t files_named(const char* dir, const char* part) {
  static char paths[1024][4096];
  size_t n = tt_files(dir, paths, 1024), count = 0;
  for (size_t i = 0; i < n; i++) count += strstr(paths[i], part) != NULL;
  return count;
}

static kvc_error* disk_create(const char* dir, kvc_tier** out) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  return kvc_disk_tier_create(&o, out);
}

static void test_directories_that_cannot_be_used(void) {
  char dir[4096], path[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "tier-err"));
  snprintf(path, sizeof path, "%s/file", dir);
  touch(path, "x", 0);
  kvc_tier* t = (kvc_tier*)dir; /* untouched on error */
  /* A file where the tier's directory goes, and one where a folder above it goes. */
  kvc_error* e = disk_create(path, &t);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), path) &&
        strstr(kvc_error_message(e), "Not a directory"));
  kvc_error_destroy(e);
  snprintf(path, sizeof path, "%s/file/below/tier", dir);
  e = disk_create(path, &t);
  CHECK(e && kvc_error_code(e) == KVC_ERROR_IO && strstr(kvc_error_message(e), "cannot be created"));
  kvc_error_destroy(e);
  CHECK_EQ_PTR(t, (kvc_tier*)dir);
  /* Folders created on the way down, and trailing slashes ignored. */
  snprintf(path, sizeof path, "%s/a/b/c///", dir);
  t = NULL;
  REQUIRE_OK(disk_create(path, &t));
  CHECK_EQ_U64(put_key(t, key(1), 1), 1);
  snprintf(path, sizeof path, "%s/a/b/c", dir);
  CHECK_EQ_U64(files_named(path, ".kvtb"), 1);
  kvc_tier_destroy(t);
  tt_rmtree(dir);
}

/* Stores that fail leave nothing behind: no value, no temporary file, and a later get is a miss. */
static void test_failed_stores(void) {
  char dir[4096], path[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "tier-err"));
  kvc_tier* t = NULL;
  REQUIRE_OK(disk_create(dir, &t));

  /* A folder where the block file goes: the rename over it fails. */
  block_file(dir, key(2), path, sizeof path);
  char sub[4200];
  snprintf(sub, sizeof sub, "%.*s", (int)(strrchr(path, '/') - path), path);
  CHECK(mkdir(sub, 0755) == 0 && mkdir(path, 0755) == 0);
  CHECK_EQ_U64(put_key(t, key(2), 2), 0);
  CHECK(!found(t, key(2), 2));
  CHECK_EQ_U64(files_named(dir, ".tmp."), 0);
  CHECK(rmdir(path) == 0);

  /* A file where the subdirectory goes: the temporary file cannot be created. */
  block_file(dir, key(3), path, sizeof path);
  snprintf(sub, sizeof sub, "%.*s", (int)(strrchr(path, '/') - path), path);
  touch(sub, "not a folder", 0);
  CHECK_EQ_U64(put_key(t, key(3), 3), 0);
  CHECK(!found(t, key(3), 3));
  CHECK(unlink(sub) == 0);

  /* The file system refuses to grow the file past 100 bytes. */
  struct rlimit old, small;
  REQUIRE(getrlimit(RLIMIT_FSIZE, &old) == 0);
  void (*was)(int) = signal(SIGXFSZ, SIG_IGN);
  small = old;
  small.rlim_cur = 100;
  REQUIRE(setrlimit(RLIMIT_FSIZE, &small) == 0);
  size_t stored = put_key(t, key(4), 4);
  setrlimit(RLIMIT_FSIZE, &old);
  signal(SIGXFSZ, was);
  CHECK_EQ_U64(stored, 0);
  CHECK(!found(t, key(4), 4));
  CHECK_EQ_U64(files_named(dir, ".tmp."), 0);

  /* The tier's whole directory removed under it: stores fail, gets miss, nothing is created. */
  CHECK_EQ_U64(put_key(t, key(5), 5), 1);
  tt_rmtree(dir);
  CHECK_EQ_U64(put_key(t, key(6), 6), 0);
  CHECK(!found(t, key(5), 5));
  CHECK(access(dir, F_OK) != 0);
  kvc_tier_stats st = tt_stats(t);
  CHECK_EQ_U64(st.put_failures, 4);
  CHECK_EQ_U64(st.puts, 1);
  kvc_tier_destroy(t);
}

/* Values that cannot be read whole are misses; files of another process are found, its removals noticed. */
static void test_reads(void) {
  char dir[4096], path[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "tier-err"));
  kvc_tier *t = NULL, *u = NULL;
  REQUIRE_OK(disk_create(dir, &t));
  REQUIRE_OK(disk_create(dir, &u)); /* a second process on the same directory, started before any write */
  CHECK_EQ_U64(put_key(t, key(1), 1), 1);
  CHECK(found(u, key(1), 1)); /* written by the other since u's scan: found, and now in u's index */
  CHECK_EQ_U64(get_key(t, key(1), FRAME - 1, 1, NULL), 0); /* larger than the caller's buffer */
  block_file(dir, key(1), path, sizeof path);
  CHECK(unlink(path) == 0); /* removed by another process */
  CHECK(!found(u, key(1), 1));
  CHECK(!found(t, key(1), 1));
  CHECK_EQ_U64(put_key(t, key(1), 7), 1); /* stored again: the index forgot it */
  CHECK(found(t, key(1), 7));
  /* The same key stored again when its file was replaced by one of another size: rewritten. */
  touch(path, "short", 0);
  CHECK_EQ_U64(put_key(t, key(1), 8), 1);
  CHECK(found(t, key(1), 8));
  /* An empty file and a folder under a key's name: misses. */
  touch(path, "", 0);
  CHECK_EQ_U64(get_key(t, key(1), FRAME, 8, NULL), 0);
  CHECK(unlink(path) == 0 && mkdir(path, 0755) == 0);
  CHECK_EQ_U64(get_key(u, key(1), FRAME, 8, NULL), 0);
  CHECK(rmdir(path) == 0);
  kvc_tier_destroy(t);
  kvc_tier_destroy(u);
  tt_rmtree(dir);
}

/* A restarted tier's scan: block files only, in their own subdirectory; stale temporary files removed. */
static void test_scan(void) {
  char dir[4096], path[4200], name[4400];
  REQUIRE(tt_tempdir(dir, sizeof dir, "tier-err"));
  kvc_tier* t = NULL;
  REQUIRE_OK(disk_create(dir, &t));
  enum { MANY = 300 }; /* more files than the scan's first batch (256) */
  for (int i = 0; i < MANY; i++) CHECK_EQ_U64(put_key(t, key(i), i & 0xff), 1);
  kvc_tier_destroy(t);

  block_file(dir, key(0), path, sizeof path);
  char* slash = strrchr(path, '/');
  const char* base = slash + 1;
  /* Leftovers and foreign names beside key 0's file. */
  snprintf(name, sizeof name, "%.*s/%s.tmp.1.1", (int)(slash - path), path, base);
  touch(name, "an old crash", 7200);
  snprintf(name, sizeof name, "%.*s/%s.tmp.1.2", (int)(slash - path), path, base);
  touch(name, "a writer now", 0);
  snprintf(name, sizeof name, "%.*s/notes.txt", (int)(slash - path), path);
  touch(name, "not a block", 0);
  snprintf(name, sizeof name, "%.*s/%.*s", (int)(slash - path), path, (int)strlen(base) - 5, base);
  touch(name, "no suffix", 0);
  snprintf(name, sizeof name, "%.*s/%.*sX.kvtb", (int)(slash - path), path, (int)strlen(base) - 6, base);
  touch(name, "not hex", 0);
  snprintf(name, sizeof name, "%.*s/A%s", (int)(slash - path), path, base + 1);
  touch(name, "upper case", 0);
  snprintf(name, sizeof name, "%.*s/.hidden", (int)(slash - path), path);
  touch(name, "dot", 0);
  snprintf(name, sizeof name, "%.*s/folder.kvtb", (int)(slash - path), path);
  CHECK(mkdir(name, 0755) == 0);
  snprintf(name, sizeof name, "%.*s/dangling", (int)(slash - path), path);
  CHECK(symlink("/nonexistent/kvc", name) == 0);
  /* A block file in another key's subdirectory is never that key's. */
  block_file(dir, key(1), name, sizeof name);
  char moved[4400];
  snprintf(moved, sizeof moved, "%.*s/%s", (int)(slash - path), path, strrchr(name, '/') + 1);
  if (strcmp(moved, name)) CHECK(rename(name, moved) == 0);

  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  o.max_bytes = (uint64_t)(MANY - 10) * FRAME; /* the scan finds MANY - 1 block files: the oldest go */
  REQUIRE_OK(kvc_disk_tier_create(&o, &t));
  CHECK_EQ_U64(files_named(dir, ".tmp.1.1"), 0); /* stale: removed */
  CHECK_EQ_U64(files_named(dir, ".tmp.1.2"), 1); /* recent: another writer's, kept */
  CHECK_EQ_U64(files_named(dir, "notes.txt"), 1);
  CHECK(!found(t, key(1), 1)); /* in the wrong folder */
  CHECK(found(t, key(MANY - 1), (MANY - 1) & 0xff));
  size_t kept = 0;
  for (int i = 0; i < MANY; i++) kept += found(t, key(i), i & 0xff);
  if (!CHECK(kept <= MANY - 10 && kept >= MANY - 20)) fprintf(TU_LOG, "    kept %zu\n", kept);
  kvc_tier_destroy(t);
  tt_rmtree(dir);
}

/* Keys sharing the index's home slot (a chain), evicted from its middle and across the table's end: every other
 * key of the chain is still found. */
static void test_index_chains(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "tier-err"));
  const int homes[2] = {5, 1023}; /* 1023: the chain wraps to slot 0 */
  for (int h = 0; h < 2; h++) {
    kvc_tier* t = tt_disk(dir, 4 * FRAME);
    REQUIRE(t != NULL);
    for (int i = 0; i < 4; i++) CHECK_EQ_U64(put_key(t, key_in(homes[h], i), 10 + i), 1);
    CHECK(found(t, key_in(homes[h], 0), 10)); /* 1 is now the least recently used: the chain's second */
    CHECK_EQ_U64(put_key(t, key_in(homes[h] + 1, 9), 19), 1); /* evicts 1 */
    CHECK(!found(t, key_in(homes[h], 1), 11));
    for (int i = 0; i < 4; i++)
      if (i != 1) CHECK(found(t, key_in(homes[h], i), 10 + i));
    CHECK(found(t, key_in(homes[h] + 1, 9), 19));
    CHECK_EQ_U64(put_key(t, key_in(homes[h], 1), 11), 1); /* back in, evicting the least recent */
    CHECK(found(t, key_in(homes[h], 1), 11));
    kvc_tier_destroy(t);
    tt_rmtree(dir);
    REQUIRE(mkdir(dir, 0700) == 0);
  }
  tt_rmtree(dir);
}

/* A custom store whose counts lie: more stored or found than asked, sizes past the capacity. */
typedef struct liar {
  size_t extra, size;
} liar;

static size_t liar_put(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                       size_t count) {
  (void)keys, (void)values, (void)sizes;
  return count + ((liar*)ctx)->extra;
}

static size_t liar_get(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* out,
                       size_t count) {
  (void)keys, (void)values, (void)capacity;
  for (size_t i = 0; i < count; i++) out[i] = ((liar*)ctx)->size;
  return count + ((liar*)ctx)->extra;
}

static void test_lying_store(void) {
  static const kvc_tier_ops OPS = {sizeof(kvc_tier_ops), liar_put, liar_get, NULL, NULL};
  liar l = {5, 64};
  kvc_tier* t = NULL;
  REQUIRE_OK(kvc_tier_create(&OPS, &l, "liar", &t));
  kvc_tier_key k[2] = {key(1), key(2)};
  uint8_t a[64], b[64];
  const void* values[2] = {a, b};
  void* out[2] = {a, b};
  size_t sizes[2] = {64, 64};
  CHECK_EQ_U64(kvci_tier_put_many(t, k, values, sizes, 2), 2); /* clamped to what was asked */
  CHECK_EQ_U64(kvci_tier_put_many(t, k, values, sizes, 0), 0);
  CHECK_EQ_U64(kvci_tier_get_many(t, k, out, 64, sizes, 2), 2);
  CHECK_EQ_U64(kvci_tier_get_many(t, k, out, 64, sizes, 0), 0);
  l.size = 65; /* past the capacity: a lie, so a miss */
  CHECK_EQ_U64(kvci_tier_get_many(t, k, out, 64, sizes, 2), 0);
  kvc_tier_stats st = tt_stats(t);
  CHECK_EQ_U64(st.puts, 2);
  CHECK_EQ_U64(st.put_failures, 0);
  CHECK_EQ_U64(st.bytes_written, 128);
  CHECK_EQ_U64(st.gets, 4);
  CHECK_EQ_U64(st.bytes_read, 128);
  kvc_tier_destroy(t); /* no destroy op: nothing to call */
  /* Refused without a destroy op: nothing to free ctx with, and nothing crashes. */
  kvc_tier_ops bad = OPS;
  bad.get_many = NULL;
  t = (kvc_tier*)&l;
  CHECK_ERR(kvc_tier_create(&bad, &l, "liar", &t), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_PTR(t, (kvc_tier*)&l);
}

int main(void) {
  TU_RUN(test_directories_that_cannot_be_used);
  TU_RUN(test_failed_stores);
  TU_RUN(test_reads);
  TU_RUN(test_scan);
  TU_RUN(test_index_chains);
  TU_RUN(test_lying_store);
  return tu_finish();
}
