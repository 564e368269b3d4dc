/*
 * test_tier_disk.c: the disk tier under a pool (kvc_disk_tier_create,
 * kvc_pool_add_tier): a restart (pool and tier destroyed, new ones on the
 * same directory) matches from disk and gathers the original bytes; eviction
 * to disk (WRITE_ON_EVICT) and back; a crash in the middle of a write (a
 * leftover temporary file, a truncated block file) is never read as data;
 * pools of different fingerprints never share; processes writing and
 * evicting the same blocks in one directory never give a reader a torn
 * block; a FIFO or a directory under a block's name is a miss, never a
 * stall; a value read straight into a block that fails its check leaves
 * no block behind; bad input is refused with the target unchanged.
 */
#include "tier_test.h" /* first: it sets the feature macros */

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

enum { PROMPT = 17 }; /* 4 full blocks and one token */

/* Process 1: a pool with a disk tier on `dir` computes the prompt and commits it, then everything is freed. */
static void fill(const char* dir, kvc_tier_write_policy policy, kvc_pool_layout layout) {
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 16, layout));
  kvc_tier* t = tt_disk(dir, 0);
  REQUIRE(t != NULL);
  REQUIRE_OK(kvc_pool_add_tier(p, t, policy));
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, 1);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(pt_step(p, 1, 2, s, tok, PROMPT));
  kvc_tier_stats st = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(st.puts, policy == KVC_TIER_WRITE_ON_COMMIT ? 4 : 0);
  kvc_pool_destroy(p); /* frees the sequence and the tier */
}

/* Process 2: a new pool and tier on `dir` match the prompt; returns the tokens matched (and checks the bytes). */
static uint64_t restart_match(const char* dir, kvc_pool_layout layout, kvc_tier_stats* stats) {
  kvc_pool* p = NULL;
  uint64_t matched = 0;
  if (!CHECK_OK(tt_pool(&p, 16, layout))) return 0;
  kvc_tier* t = tt_disk(dir, 0);
  if (!CHECK(t != NULL) || !CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT))) {
    kvc_pool_destroy(p);
    return 0;
  }
  int32_t tok[PROMPT];
  tt_prompt(tok, PROMPT, 1);
  kvc_pool_sequence* s = NULL;
  CHECK_OK(kvc_pool_sequence_create(p, NULL, &s));
  CHECK_OK(kvc_pool_match_prefix(s, tok, PROMPT, &matched));
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  kvc_pool_event ev[64];
  size_t n = 0, stored = 0;
  CHECK_OK(kvc_pool_events_pull(p, ev, 64, &n));
  for (size_t i = 0; i < n; i++) stored += ev[i].kind == KVC_POOL_EVENT_BLOCK_STORED;
  CHECK_EQ_U64(stored, matched / TT_BLOCK); /* a block from disk is in memory now: STORED */
  CHECK_EQ_U64(pt_stats(p, 0).prefix_hits, matched / TT_BLOCK);
  *stats = tt_stats(t);
  kvc_pool_destroy(p);
  return matched;
}

static void test_restart_hits_from_disk(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "restart"));
  fill(dir, KVC_TIER_WRITE_ON_COMMIT, KVC_POOL_LAYOUT_NHD);
  char files[8][4096];
  CHECK_EQ_U64(tt_files(dir, files, 8), 4);
  kvc_tier_stats st;
  CHECK_EQ_U64(restart_match(dir, KVC_POOL_LAYOUT_NHD, &st), 16);
  CHECK_EQ_U64(st.hits, 4);
  CHECK_EQ_U64(st.corrupt, 0);
  CHECK(st.bytes_read > 0);
  /* Another fingerprint (the same model in the other layout: the same block hashes) never shares. */
  CHECK_EQ_U64(restart_match(dir, KVC_POOL_LAYOUT_HND, &st), 0);
  CHECK_EQ_U64(st.hits, 0);
  tt_rmtree(dir);
}

static void test_crash_leftovers_are_never_data(void) {
  char dir[4096], files[8][4096], moved[4096 + 32];
  REQUIRE(tt_tempdir(dir, sizeof dir, "crash"));
  fill(dir, KVC_TIER_WRITE_ON_COMMIT, KVC_POOL_LAYOUT_NHD);
  size_t n = tt_files(dir, files, 8);
  REQUIRE(n == 4);
  /* A crash before the rename: the whole value under the temporary name only. */
  for (size_t i = 0; i < n; i++) {
    snprintf(moved, sizeof moved, "%.4000s.tmp.999.1", files[i]);
    REQUIRE(rename(files[i], moved) == 0);
  }
  kvc_tier_stats st;
  CHECK_EQ_U64(restart_match(dir, KVC_POOL_LAYOUT_NHD, &st), 0);
  CHECK_EQ_U64(st.hits + st.corrupt, 0);
  /* A block file cut short (a crash of a writer without rename, a power loss): a miss counted corrupt. */
  for (size_t i = 0; i < n; i++) {
    snprintf(moved, sizeof moved, "%.4000s.tmp.999.1", files[i]);
    REQUIRE(rename(moved, files[i]) == 0);
    struct stat sb;
    REQUIRE(stat(files[i], &sb) == 0);
    REQUIRE(truncate(files[i], sb.st_size - 1) == 0);
  }
  CHECK_EQ_U64(restart_match(dir, KVC_POOL_LAYOUT_NHD, &st), 0);
  CHECK_EQ_U64(st.hits, 0);
  CHECK_EQ_U64(st.corrupt, 1); /* the first block; the match stops there */
  tt_rmtree(dir);
}

static void on_alarm(int sig) {
  (void)sig;
  static const char msg[] = "FAILED: a disk-tier lookup blocked for 20 seconds\n";
  ssize_t ignored = write(2, msg, sizeof msg - 1);
  (void)ignored;
  _exit(1);
}

/* Something other than a regular file under a block's name (a plain open of a FIFO waits for a writer). */
static void test_fifo_or_directory_block_is_a_miss(void) {
  char dir[4096], files[8][4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "fifo"));
  fill(dir, KVC_TIER_WRITE_ON_COMMIT, KVC_POOL_LAYOUT_NHD);
  REQUIRE(tt_files(dir, files, 8) == 4);
  signal(SIGALRM, on_alarm);
  for (int what = 0; what < 2; what++) {
    /* The first block of the prompt: the file whose name sorts first is not necessarily it, so replace all. */
    for (size_t i = 0; i < 4; i++) {
      REQUIRE(unlink(files[i]) == 0 || rmdir(files[i]) == 0);
      REQUIRE((what == 0 ? mkfifo(files[i], 0644) : mkdir(files[i], 0755)) == 0);
    }
    kvc_tier_stats st;
    alarm(20);
    CHECK_EQ_U64(restart_match(dir, KVC_POOL_LAYOUT_NHD, &st), 0);
    alarm(0);
    /* A CPU pool reads disk values straight into blocks, one key at a time: the first miss ends the lookup. */
    CHECK_EQ_U64(st.gets, 1);
    CHECK_EQ_U64(st.hits + st.corrupt, 0);
  }
  /* A writer replaces the FIFOs again (rename over them), and the blocks come back. */
  for (size_t i = 0; i < 4; i++) REQUIRE(rmdir(files[i]) == 0 && mkfifo(files[i], 0644) == 0);
  fill(dir, KVC_TIER_WRITE_ON_COMMIT, KVC_POOL_LAYOUT_NHD);
  kvc_tier_stats st;
  alarm(20);
  CHECK_EQ_U64(restart_match(dir, KVC_POOL_LAYOUT_NHD, &st), 16);
  alarm(0);
  CHECK_EQ_U64(st.hits, 4);
  tt_rmtree(dir);
}

static void test_evicted_blocks_come_back(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "evict"));
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 5, KVC_POOL_LAYOUT_HND)); /* 4 usable blocks */
  kvc_tier* t = tt_disk(dir, 0);
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_EVICT));
  int32_t a[PROMPT], b[PROMPT];
  tt_prompt(a, PROMPT, 1);
  tt_prompt(b, PROMPT, 5000);
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(pt_step(p, 1, 2, s, a, 16));
  kvc_pool_sequence_destroy(s); /* a's 4 blocks: cached, unreferenced */
  CHECK_EQ_U64(tt_stats(t).puts, 0);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(pt_step(p, 1, 2, s, b, 16)); /* evicts a's blocks: to disk */
  CHECK_EQ_U64(tt_stats(t).puts, 4);
  kvc_pool_sequence_destroy(s);
  uint64_t matched = 0;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &s));
  REQUIRE_OK(kvc_pool_match_prefix(s, a, PROMPT, &matched));
  CHECK_EQ_U64(matched, 16);
  for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
  CHECK_EQ_U64(tt_stats(t).hits, 4);
  CHECK_EQ_U64(tt_stats(t).puts, 8); /* b's blocks made room for them */
  kvc_pool_sequence_destroy(s);
  /* No block to take (every one held): the match stops there, never an error. */
  kvc_pool_sequence *hold = NULL, *again = NULL;
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &hold));
  REQUIRE_OK(kvc_pool_match_prefix(hold, b, PROMPT, &matched));
  CHECK_EQ_U64(matched, 16);
  REQUIRE_OK(kvc_pool_sequence_create(p, NULL, &again));
  REQUIRE_OK(kvc_pool_match_prefix(again, a, PROMPT, &matched));
  CHECK_EQ_U64(matched, 0);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

/* Removes every block file under `dir` (another process's eviction, as the others see it; temporary files are
   a live writer's and stay). */
static void remove_blocks(const char* dir) {
  char files[64][4096];
  size_t n = tt_files(dir, files, 64);
  for (size_t i = 0; i < n; i++) {
    size_t len = strlen(files[i]);
    if (len > 5 && !strcmp(files[i] + len - 5, ".kvtb")) unlink(files[i]);
  }
}

static void test_processes_sharing_a_directory_never_read_a_torn_block(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "shared"));
  enum { WRITERS = 3, ROUNDS = 40 };
  pid_t kids[WRITERS];
  for (int w = 0; w < WRITERS; w++) {
    kids[w] = fork();
    REQUIRE(kids[w] >= 0);
    if (kids[w] == 0) { /* a writer: evicts everything and writes the same blocks again, over and over */
      for (int r = 0; r < ROUNDS; r++) {
        remove_blocks(dir);
        fill(dir, KVC_TIER_WRITE_ON_COMMIT, KVC_POOL_LAYOUT_NHD);
      }
      _exit(tu_failures_total ? 1 : 0);
    }
  }
  /* The reader: whatever it finds verifies and gathers right; it reads until every writer is done, then once
     more (the last writer left the blocks in place, so the reader has found some at least then). */
  uint64_t corrupt = 0, hits = 0;
  for (int running = WRITERS;;) {
    kvc_tier_stats st;
    int last = !running; /* every writer had exited before this round */
    restart_match(dir, KVC_POOL_LAYOUT_NHD, &st);
    corrupt += st.corrupt;
    hits += st.hits;
    for (int w = 0; w < WRITERS; w++) {
      int status = 0;
      if (kids[w] > 0 && waitpid(kids[w], &status, WNOHANG) == kids[w]) {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        kids[w] = 0;
        running--;
      }
    }
    if (last) break;
  }
  CHECK(hits > 0);
  CHECK_EQ_U64(corrupt, 0);
  printf("  shared directory: the reader found %llu blocks while %d writers rewrote them, %llu corrupt\n",
         (unsigned long long)hits, WRITERS, (unsigned long long)corrupt);
  tt_rmtree(dir);
}

static const uint8_t AUTH_KEY[32] = "test_tier_disk's tier key 32 by";

/* A pool of 16 blocks with a disk tier on `dir`, keyless or under AUTH_KEY, into *out. */
static void disk_pool(const char* dir, int keyed, kvc_pool** out) {
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD));
  kvc_tier* t = tt_disk(dir, 0);
  REQUIRE(t != NULL);
  if (keyed) REQUIRE_OK(kvc_tier_set_auth_key(t, AUTH_KEY, sizeof AUTH_KEY));
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT));
  *out = p; /* only when complete: a failed REQUIRE above leaves *out NULL */
}

/* Replaces the file at `path` with `n` bytes of `data`. */
static void rewrite(const char* path, const uint8_t* data, size_t n) {
  FILE* f = fopen(path, "wb");
  REQUIRE(f != NULL);
  REQUIRE(fwrite(data, 1, n, f) == n);
  REQUIRE(fclose(f) == 0);
}

/* A match of the prompt by `p` that must find nothing on disk: no hit, one more corrupt value, no block taken
   (the free count as before), no STORED event. */
static void match_refused(kvc_pool* p, uint64_t corrupt_before) {
  kvc_pool_stats before = pt_stats(p, 0);
  kvc_pool_sequence* s = NULL;
  uint64_t matched = 1;
  CHECK_OK(tt_match_prompt(p, PROMPT, &s, &matched));
  CHECK_EQ_U64(matched, 0);
  kvc_pool_sequence_destroy(s);
  kvc_tier_stats st = tt_stats(kvc_pool_tier(p, 0));
  CHECK_EQ_U64(st.hits, 0);
  CHECK_EQ_U64(st.corrupt, corrupt_before + 1); /* the first block; the match stops there */
  kvc_pool_stats after = pt_stats(p, 0);
  CHECK_EQ_U64(after.free_blocks, before.free_blocks);
  CHECK_EQ_U64(after.cached_blocks, 0);
  kvc_pool_event ev[64];
  size_t n = 0;
  CHECK_OK(kvc_pool_events_pull(p, ev, 64, &n));
  for (size_t i = 0; i < n; i++) CHECK(ev[i].kind != KVC_POOL_EVENT_BLOCK_STORED);
}

/*
 * A CPU pool's disk tier reads a value straight into a block and checks it as it lands: a value that fails the
 * check (a payload byte flipped, keyless or keyed) or has another size leaves the block it took free and
 * unpublished; the intact values then land in the same pool and gather exactly.
 */
static void test_value_failing_its_check_leaves_no_block(void) {
  for (int keyed = 0; keyed < 2; keyed++) {
    char dir[4096], files[8][4096];
    REQUIRE(tt_tempdir(dir, sizeof dir, "landing"));
    kvc_pool *p = NULL, *q = NULL;
    disk_pool(dir, keyed, &p);
    REQUIRE(p != NULL);
    kvc_pool_sequence* s = NULL;
    REQUIRE_OK(tt_commit_prompt(p, PROMPT, &s));
    kvc_pool_destroy(p);
    size_t n = tt_files(dir, files, 8);
    REQUIRE(n == 4);
    uint8_t* good[4];
    size_t size[4];
    for (size_t i = 0; i < n; i++) {
      FILE* f = fopen(files[i], "rb");
      REQUIRE(f != NULL);
      REQUIRE(fseek(f, 0, SEEK_END) == 0);
      size[i] = (size_t)ftell(f);
      rewind(f);
      good[i] = malloc(size[i] + 1);
      REQUIRE(good[i] && fread(good[i], 1, size[i], f) == size[i]);
      fclose(f);
      good[i][size[i]] = 0;
      good[i][size[i] / 2] ^= 0x10; /* in the payload */
      rewrite(files[i], good[i], size[i]);
      good[i][size[i] / 2] ^= 0x10;
    }
    disk_pool(dir, keyed, &q);
    REQUIRE(q != NULL);
    match_refused(q, 0);
    for (size_t i = 0; i < n; i++) rewrite(files[i], good[i], size[i] + 1); /* one byte too many */
    match_refused(q, 1);
    for (size_t i = 0; i < n; i++) rewrite(files[i], good[i], size[i]);
    uint64_t matched = 0;
    CHECK_OK(tt_match_prompt(q, PROMPT, &s, &matched));
    CHECK_EQ_U64(matched, 16);
    for (uint32_t l = 0; l < 2; l++) CHECK_EQ_I64(pt_gather_mismatches(s, l), 0);
    kvc_tier_stats st = tt_stats(kvc_pool_tier(q, 0));
    CHECK_EQ_U64(st.hits, 4);
    CHECK_EQ_U64(st.corrupt, 2);
    kvc_pool_destroy(q);
    for (size_t i = 0; i < n; i++) free(good[i]);
    tt_rmtree(dir);
  }
}

static void test_bad_input(void) {
  char dir[4096], file[4200];
  REQUIRE(tt_tempdir(dir, sizeof dir, "bad"));
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 8, KVC_POOL_LAYOUT_NHD));
  kvc_tier* t = tt_disk(dir, 0);
  REQUIRE(t != NULL);
  CHECK_ERR(kvc_pool_add_tier(NULL, t, KVC_TIER_WRITE_ON_COMMIT), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_pool_add_tier(p, NULL, KVC_TIER_WRITE_ON_COMMIT), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_pool_add_tier(p, t, 7), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_PTR(kvc_pool_tier(p, 0), NULL); /* unchanged: no tier */
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_EVICT));
  CHECK_ERR(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_EQ_PTR(kvc_pool_tier(p, 0), t);
  CHECK_EQ_PTR(kvc_pool_tier(p, 1), NULL);
  CHECK_EQ_PTR(kvc_pool_tier(NULL, 0), NULL);
  uint8_t fp[KVC_BLOCK_HASH_SIZE], fp2[KVC_BLOCK_HASH_SIZE];
  CHECK_ERR(kvc_pool_fingerprint(NULL, fp), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_pool_fingerprint(p, NULL), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_OK(kvc_pool_fingerprint(p, fp));
  kvc_pool* q = NULL;
  REQUIRE_OK(tt_pool(&q, 3, KVC_POOL_LAYOUT_NHD)); /* capacity is not part of the fingerprint */
  CHECK_OK(kvc_pool_fingerprint(q, fp2));
  CHECK(!memcmp(fp, fp2, sizeof fp));
  kvc_pool_destroy(q);
  REQUIRE_OK(tt_pool(&q, 8, KVC_POOL_LAYOUT_HND));
  CHECK_OK(kvc_pool_fingerprint(q, fp2));
  CHECK(memcmp(fp, fp2, sizeof fp) != 0);
  kvc_pool_destroy(q);

  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  kvc_tier* out = (kvc_tier*)p; /* untouched on error */
  CHECK_ERR(kvc_disk_tier_create(NULL, &out), KVC_ERROR_INVALID_ARGUMENT);
  CHECK_ERR(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT); /* directory NULL */
  o.directory = "";
  CHECK_ERR(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT);
  o.directory = dir;
  CHECK_ERR(kvc_disk_tier_create(&o, NULL), KVC_ERROR_INVALID_ARGUMENT);
  o.reserved = 1;
  CHECK_ERR(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT);
  o.reserved = 0;
  o.struct_size = 8;
  CHECK_ERR(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT);
  o.struct_size = sizeof o;
  snprintf(file, sizeof file, "%s/plain-file", dir);
  FILE* f = fopen(file, "w");
  REQUIRE(f != NULL);
  fclose(f);
  o.directory = file; /* a file, not a directory */
  CHECK_ERR(kvc_disk_tier_create(&o, &out), KVC_ERROR_IO);
  CHECK_EQ_PTR(out, (kvc_tier*)p);
  kvc_tier_stats st;
  st.struct_size = 4;
  CHECK_ERR(kvc_tier_stats_get(t, &st), KVC_ERROR_INVALID_ARGUMENT);
  kvc_pool_destroy(p);
  tt_rmtree(dir);
}

int main(void) {
  TU_RUN(test_restart_hits_from_disk);
  TU_RUN(test_crash_leftovers_are_never_data);
  TU_RUN(test_fifo_or_directory_block_is_a_miss);
  TU_RUN(test_evicted_blocks_come_back);
  TU_RUN(test_processes_sharing_a_directory_never_read_a_torn_block);
  TU_RUN(test_value_failing_its_check_leaves_no_block);
  TU_RUN(test_bad_input);
  return tu_finish();
}
