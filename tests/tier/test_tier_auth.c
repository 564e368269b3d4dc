/*
 * test_tier_auth.c: authenticated disk tiers (kvc_disk_tier_options.auth_key,
 * docs/tiers.md 'Authenticated tiers'), with the public API and the files a
 * writer of the directory can change: with the same key a restarted pool
 * finds its blocks and gathers the bytes written; another key, no key, or a
 * keyed reader of keyless frames misses (counted corrupt); a frame moved
 * under another block's file name with its header rewritten (and, in a
 * keyless tier, its CRC recomputed) serves the wrong K/V without a key -- the
 * trust the docs state -- and is refused with one; a writer with a new key
 * replaces the old key's frames; a program's own store keyed with
 * kvc_tier_set_auth_key behaves the same; bad keys are refused
 * naming the option, and a struct of 0.6's size is still accepted.
 */
#include "memory_store.h" /* first: it sets the feature macros */

#include <sys/stat.h>

enum { PROMPT = 17, FILES = 4 }; /* 4 full blocks and one token */

static const uint8_t KEY_A[32] = "0123456789abcdef0123456789abcdef";
static const uint8_t KEY_B[32] = "0123456789abcdef0123456789abcdeF"; /* one bit from KEY_A */

static kvc_tier* disk(const char* dir, const uint8_t* key, size_t len) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  o.auth_key = key;
  o.auth_key_len = len;
  kvc_tier* t = NULL;
  kvc_error* e = kvc_disk_tier_create(&o, &t);
  if (e) fprintf(stderr, "kvc_disk_tier_create: %s\n", kvc_error_message(e));
  kvc_error_destroy(e);
  return t;
}

/* A pool with a tier on `dir` (key, len) computes the prompt and commits it; everything is freed. */
static void fill(const char* dir, const uint8_t* key, size_t len) {
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD));
  kvc_tier* t = disk(dir, key, len);
  REQUIRE(t != NULL);
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(tt_commit_prompt(p, PROMPT, &s));
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).puts, FILES);
  kvc_pool_destroy(p);
}

/* A new pool and tier on `dir` (key, len) match the prompt: the tokens matched; the gather's wrong elements. */
static uint64_t match(const char* dir, const uint8_t* key, size_t len, long* wrong, kvc_tier_stats* st) {
  kvc_pool* p = NULL;
  uint64_t matched = 0;
  *wrong = -1;
  if (!CHECK_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD))) return 0;
  kvc_tier* t = disk(dir, key, len);
  if (!CHECK(t != NULL) || !CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT))) {
    kvc_tier_destroy(t);
    kvc_pool_destroy(p);
    return 0;
  }
  kvc_pool_sequence* s = NULL;
  CHECK_OK(tt_match_prompt(p, PROMPT, &s, &matched));
  *wrong = pt_gather_mismatches(s, 0) + pt_gather_mismatches(s, 1);
  *st = tt_stats(t);
  kvc_pool_destroy(p);
  return matched;
}

/* The whole file at `path` (to free) and its size. */
static uint8_t* slurp(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  struct stat sb;
  uint8_t* b = fstat(fileno(f), &sb) == 0 ? malloc((size_t)sb.st_size) : NULL;
  *n = b && fread(b, 1, (size_t)sb.st_size, f) == (size_t)sb.st_size ? (size_t)sb.st_size : 0;
  fclose(f);
  return b;
}

static int spill(const char* path, const uint8_t* b, size_t n) {
  FILE* f = fopen(path, "wb");
  int ok = f && fwrite(b, 1, n, f) == n;
  if (f && fclose(f)) ok = 0;
  return ok;
}

/* Every block file of `dir` gets the next one's K/V under its own header key (tt_forge); `plain`: a bare copy. */
static void move_frames(const char* dir, int plain) {
  char files[FILES + 1][4096];
  REQUIRE(tt_files(dir, files, FILES + 1) == FILES);
  uint8_t* v[FILES];
  size_t n[FILES];
  for (int i = 0; i < FILES; i++) REQUIRE((v[i] = slurp(files[i], &n[i])) != NULL && n[i] == n[0]);
  for (int i = 0; i < FILES; i++) {
    uint8_t* out = malloc(n[i]);
    memcpy(out, v[i], n[i]);
    if (plain) memcpy(out, v[(i + 1) % FILES], n[i]);
    else tt_forge(out, v[(i + 1) % FILES], n[i]);
    CHECK(spill(files[i], out, n[i]));
    free(out);
  }
  for (int i = 0; i < FILES; i++) free(v[i]);
}

static void test_same_key_round_trips_and_restarts(void) {
  static const uint8_t LONGEST[KVC_TIER_AUTH_KEY_MAX] = {1, 2, 3};
  const struct { const uint8_t* key; size_t len; } keys[] = {
      {KEY_A, sizeof KEY_A}, {KEY_A, KVC_TIER_AUTH_KEY_MIN}, {LONGEST, sizeof LONGEST}};
  for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
    char dir[4096], files[FILES + 1][4096];
    REQUIRE(tt_tempdir(dir, sizeof dir, "auth"));
    fill(dir, keys[k].key, keys[k].len);
    REQUIRE(tt_files(dir, files, FILES + 1) == FILES);
    size_t n = 0;
    uint8_t* v = slurp(files[0], &n);
    REQUIRE(v != NULL);
    CHECK_EQ_U64(v[4], 2); /* version 2: authenticated */
    /* Header 96, the K/V of 2 layers (4 tokens x 2 heads x (4 + 3) floats), the 32-byte MAC. */
    CHECK_EQ_U64(n, 96 + 2 * 4 * 2 * 7 * 4 + 32);
    free(v);
    long wrong;
    kvc_tier_stats st;
    CHECK_EQ_U64(match(dir, keys[k].key, keys[k].len, &wrong, &st), 16);
    CHECK_EQ_I64(wrong, 0);
    CHECK_EQ_U64(st.hits, 4);
    CHECK_EQ_U64(st.corrupt, 0);
    tt_rmtree(dir);
  }
}

static void test_another_key_or_none_misses(void) {
  char keyed[4096], keyless[4096];
  REQUIRE(tt_tempdir(keyed, sizeof keyed, "auth-keyed"));
  REQUIRE(tt_tempdir(keyless, sizeof keyless, "auth-keyless"));
  fill(keyed, KEY_A, sizeof KEY_A);
  fill(keyless, NULL, 0);
  long wrong;
  kvc_tier_stats st;
  const struct { const char* dir; const uint8_t* key; size_t len; uint64_t matched; } cases[] = {
      {keyed, KEY_B, sizeof KEY_B, 0},     /* another key */
      {keyed, KEY_A, 16, 0},               /* a prefix of the key is another key */
      {keyed, NULL, 0, 0},                 /* no key: a keyed frame is refused */
      {keyless, KEY_A, sizeof KEY_A, 0},   /* a key: a keyless frame is refused */
      {keyless, NULL, 0, 16},              /* keyless tiers work as before */
      {keyed, KEY_A, sizeof KEY_A, 16},    /* and the refusals above changed nothing */
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t m = match(cases[i].dir, cases[i].key, cases[i].len, &wrong, &st);
    if (!CHECK_EQ_U64(m, cases[i].matched)) fprintf(stderr, "  case %zu\n", i);
    CHECK_EQ_I64(wrong, 0);
    CHECK_EQ_U64(st.hits, m / TT_BLOCK);
    CHECK_EQ_U64(st.corrupt, m ? 0 : 1); /* the first block refused; the match stops there */
  }
  tt_rmtree(keyed);
  tt_rmtree(keyless);
}

static void test_frame_under_another_key(void) {
  long wrong;
  kvc_tier_stats st;
  char dir[4096];
  /* Without a key the forgery is served: the tier trusts whoever writes its directory (docs/tiers.md). */
  REQUIRE(tt_tempdir(dir, sizeof dir, "auth-forged"));
  fill(dir, NULL, 0);
  move_frames(dir, 0);
  CHECK_EQ_U64(match(dir, NULL, 0, &wrong, &st), 16);
  CHECK(wrong > 0);
  CHECK_EQ_U64(st.corrupt, 0);
  tt_rmtree(dir);
  /* With a key: refused, rewritten header or bare copy. */
  for (int plain = 0; plain < 2; plain++) {
    REQUIRE(tt_tempdir(dir, sizeof dir, "auth-moved"));
    fill(dir, KEY_A, sizeof KEY_A);
    move_frames(dir, plain);
    CHECK_EQ_U64(match(dir, KEY_A, sizeof KEY_A, &wrong, &st), 0);
    CHECK_EQ_I64(wrong, 0);
    CHECK_EQ_U64(st.hits, 0);
    CHECK_EQ_U64(st.corrupt, 1);
    tt_rmtree(dir);
  }
}

/* A new key on a directory of old frames: the new writer replaces them (same size, another MAC), not skips them. */
static void test_key_rotation_rewrites_frames(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "auth-rotate"));
  fill(dir, KEY_A, sizeof KEY_A);
  fill(dir, KEY_B, sizeof KEY_B);
  long wrong;
  kvc_tier_stats st;
  CHECK_EQ_U64(match(dir, KEY_B, sizeof KEY_B, &wrong, &st), 16);
  CHECK_EQ_I64(wrong, 0);
  CHECK_EQ_U64(match(dir, KEY_A, sizeof KEY_A, &wrong, &st), 0);
  CHECK_EQ_U64(st.corrupt, 1);
  char files[FILES + 1][4096];
  CHECK_EQ_U64(tt_files(dir, files, FILES + 1), FILES); /* replaced, not added */
  tt_rmtree(dir);
}

static void test_bad_keys_refused(void) {
  char dir[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "auth-bad"));
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  kvc_tier* out = (kvc_tier*)&o; /* untouched on error */
  o.auth_key = KEY_A;
  o.auth_key_len = 15;
  CHECK(tt_err_says(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options->auth_key_len is 15; an "
                    "authentication key is 16 to 256 bytes"));
  o.auth_key_len = KVC_TIER_AUTH_KEY_MAX + 1;
  CHECK(tt_err_says(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options->auth_key_len is 257"));
  o.auth_key_len = 0;
  CHECK(tt_err_says(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options->auth_key_len is 0"));
  o.auth_key = NULL;
  o.auth_key_len = 32;
  CHECK(tt_err_says(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options->auth_key is NULL but "
                    "options->auth_key_len is 32"));
  o.struct_size = 40; /* no published size */
  CHECK(tt_err_says(kvc_disk_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options.struct_size is 40"));
  CHECK_EQ_PTR(out, (kvc_tier*)&o);
  char files[4][4096];
  CHECK_EQ_U64(tt_files(dir, files, 4), 0); /* nothing created */
  /* 0.6's struct (32 bytes): the fields after it are not read, whatever the caller's memory holds there. */
  o.struct_size = 32;
  o.auth_key = (const uint8_t*)"x";
  o.auth_key_len = 3;
  CHECK_OK(kvc_disk_tier_create(&o, &out));
  CHECK(out != (kvc_tier*)&o);
  kvc_tier_destroy(out);
  tt_rmtree(dir);
}

/* ---- a program's own store (kvc_tier_create + kvc_tier_set_auth_key) ---- */

static ms_store* store; /* outlives the tiers on it (MS_OPS_KEPT): a restart finds it */

/* A pool with a tier on `store` keyed with (key, len); commits the prompt (fill) or matches it. */
static uint64_t on_store(const uint8_t* key, size_t len, int fill, kvc_tier_stats* st) {
  kvc_pool* p = NULL;
  kvc_tier* t = NULL;
  uint64_t matched = 0;
  kvc_pool_sequence* s = NULL;
  if (!CHECK_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD)) || !CHECK_OK(kvc_tier_create(&MS_OPS_KEPT, store, "mem", &t)) ||
      !CHECK_OK(kvc_tier_set_auth_key(t, key, len)) || !CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT))) {
    kvc_tier_destroy(t);
    kvc_pool_destroy(p);
    return 0;
  }
  CHECK_OK(fill ? tt_commit_prompt(p, PROMPT, &s) : tt_match_prompt(p, PROMPT, &s, &matched));
  if (!fill) CHECK_EQ_I64(pt_gather_mismatches(s, 0) + pt_gather_mismatches(s, 1), 0);
  *st = tt_stats(t);
  kvc_pool_destroy(p);
  return matched;
}

static void test_custom_store_with_a_key(void) {
  store = ms_new();
  kvc_tier_stats st;
  on_store(KEY_A, sizeof KEY_A, 1, &st);
  REQUIRE(store->count == FILES);
  CHECK_EQ_U64(store->values[0][4], 2);
  CHECK_EQ_U64(store->sizes[0], 96 + 2 * 4 * 2 * 7 * 4 + 32);
  CHECK_EQ_U64(on_store(KEY_A, sizeof KEY_A, 0, &st), 16);
  CHECK_EQ_U64(on_store(KEY_B, sizeof KEY_B, 0, &st), 0);
  CHECK_EQ_U64(st.corrupt, 1);
  CHECK_EQ_U64(on_store(NULL, 0, 0, &st), 0); /* the key taken away: a keyless tier */
  CHECK_EQ_U64(st.corrupt, 1);
  uint8_t first[1024]; /* every value moved under the next block's key */
  REQUIRE(store->sizes[0] <= sizeof first);
  memcpy(first, store->values[0], store->sizes[0]);
  for (size_t i = 0; i < FILES; i++)
    tt_forge(store->values[i], i + 1 < FILES ? store->values[i + 1] : first, store->sizes[i]);
  CHECK_EQ_U64(on_store(KEY_A, sizeof KEY_A, 0, &st), 0);
  CHECK_EQ_U64(st.corrupt, 1);
  ms_free(store);
}

static void test_set_auth_key_refusals(void) {
  store = ms_new();
  kvc_tier* t = NULL;
  REQUIRE_OK(kvc_tier_create(&MS_OPS_KEPT, store, "mem", &t));
  CHECK(tt_err_says(kvc_tier_set_auth_key(NULL, KEY_A, 16), KVC_ERROR_INVALID_ARGUMENT, "tier is NULL"));
  CHECK(tt_err_says(kvc_tier_set_auth_key(t, KEY_A, 8), KVC_ERROR_INVALID_ARGUMENT, "key_len is 8; an "
                    "authentication key is 16 to 256 bytes"));
  CHECK(tt_err_says(kvc_tier_set_auth_key(t, NULL, 16), KVC_ERROR_INVALID_ARGUMENT, "key is NULL but key_len is 16"));
  CHECK_OK(kvc_tier_set_auth_key(t, KEY_A, sizeof KEY_A));
  CHECK(tt_err_says(kvc_tier_set_auth_key(t, KEY_B, 300), KVC_ERROR_INVALID_ARGUMENT, "key_len is 300"));
  kvc_pool* p = NULL;
  REQUIRE_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD));
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT));
  CHECK(tt_err_says(kvc_tier_set_auth_key(t, KEY_B, sizeof KEY_B), KVC_ERROR_INVALID_ARGUMENT,
                    "tier 'mem' was given to a pool already"));
  kvc_pool_sequence* s = NULL;
  CHECK_OK(tt_commit_prompt(p, PROMPT, &s));
  kvc_pool_destroy(p);
  /* The refusals changed nothing: the values carry KEY_A's MAC. */
  kvc_tier_stats st;
  CHECK_EQ_U64(on_store(KEY_A, sizeof KEY_A, 0, &st), 16);
  ms_free(store);
}

int main(void) {
  TU_RUN(test_same_key_round_trips_and_restarts);
  TU_RUN(test_another_key_or_none_misses);
  TU_RUN(test_frame_under_another_key);
  TU_RUN(test_key_rotation_rewrites_frames);
  TU_RUN(test_bad_keys_refused);
  TU_RUN(test_custom_store_with_a_key);
  TU_RUN(test_set_auth_key_refusals);
  return tu_finish();
}
