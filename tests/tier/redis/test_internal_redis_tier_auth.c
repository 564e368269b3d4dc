/*
 * test_internal_redis_tier_auth.c: authenticated Redis tiers
 * (kvc_redis_tier_options.auth_key) against a redis-server of the test's
 * own. Pools write a prompt's blocks through kvc_redis_tier_create; a second
 * client of the same server (the tier's ops without the pool, as any writer
 * of the keys could be) then moves every value under another block's key
 * with the header rewritten and, for keyless frames, the CRC recomputed.
 * Without a key the pool serves the wrong K/V (the trust docs/redis-tier.md
 * states); with one it misses, counted corrupt. Another key or no key
 * misses; the same key finds the blocks; bad keys are refused naming the
 * option; structs of the sizes before the key are still accepted.
 */
#define _GNU_SOURCE
#include "../tier_test.h"
#include "redis_tier_test.h"

enum { PROMPT = 17, BLOCKS = 4 };

static rs_server server;
static char seeds[64];
static const uint8_t KEY_A[24] = "a key of 24 bytes, A....";
static const uint8_t KEY_B[24] = "a key of 24 bytes, B....";

static kvc_redis_tier_options options(const char* prefix, const uint8_t* key, size_t len) {
  kvc_redis_tier_options o = KVC_REDIS_TIER_OPTIONS_INIT;
  o.seeds = seeds;
  o.key_prefix = prefix;
  o.command_timeout_ms = 2000;
  o.auth_key = key;
  o.auth_key_len = len;
  return o;
}

/* A pool with a Redis tier (prefix, key) written on commit, or NULL. */
static kvc_pool* pool_with(const char* prefix, const uint8_t* key, size_t len) {
  kvc_pool* p = NULL;
  kvc_tier* t = NULL;
  kvc_redis_tier_options o = options(prefix, key, len);
  if (!CHECK_OK(tt_pool(&p, 16, KVC_POOL_LAYOUT_NHD)) || !CHECK_OK(kvc_redis_tier_create(&o, &t)) ||
      !CHECK_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT))) {
    kvc_tier_destroy(t);
    kvc_pool_destroy(p);
    return NULL;
  }
  return p;
}

static void fill(const char* prefix, const uint8_t* key, size_t len) {
  kvc_pool* p = pool_with(prefix, key, len);
  REQUIRE(p != NULL);
  kvc_pool_sequence* s = NULL;
  CHECK_OK(tt_commit_prompt(p, PROMPT, &s));
  CHECK_EQ_U64(tt_stats(kvc_pool_tier(p, 0)).puts, BLOCKS);
  kvc_pool_destroy(p);
}

/* A new pool matches the prompt: tokens matched; *wrong: gathered elements that differ from the written ones. */
static uint64_t match(const char* prefix, const uint8_t* key, size_t len, long* wrong, kvc_tier_stats* st) {
  kvc_pool* p = pool_with(prefix, key, len);
  uint64_t matched = 0;
  *wrong = -1;
  if (!p) return 0;
  kvc_pool_sequence* s = NULL;
  CHECK_OK(tt_match_prompt(p, PROMPT, &s, &matched));
  *wrong = pt_gather_mismatches(s, 0) + pt_gather_mismatches(s, 1);
  *st = tt_stats(kvc_pool_tier(p, 0));
  kvc_pool_destroy(p);
  return matched;
}

static int hex_byte(const char* h) {
  unsigned v;
  return sscanf(h, "%2x", &v) == 1 ? (int)v : -1;
}

/* The tier keys of the values under `prefix` (KEYS; the layout of docs/redis-tier.md); how many (up to cap). */
static size_t stored_keys(const char* prefix, kvc_tier_key* keys, size_t cap) {
  static char out[1 << 14];
  rs_cli(server.port, out, sizeof out, "--scan --pattern '%s*'", prefix);
  size_t n = 0, plen = strlen(prefix);
  for (char* line = strtok(out, "\n"); line && n < cap; line = strtok(NULL, "\n")) {
    kvc_tier_key* k = &keys[n];
    memset(k, 0, sizeof *k);
    if (strncmp(line, prefix, plen) || strlen(line) < plen + 64 + 3 + 64) continue;
    const char* fp = line + plen;
    const char* hash = strrchr(line, ':') + 1;
    k->group = (uint32_t)strtoul(fp + 65, NULL, 10);
    for (int i = 0; i < KVC_BLOCK_HASH_SIZE; i++) {
      k->fingerprint[i] = (uint8_t)hex_byte(fp + 2 * i);
      k->block_hash[i] = (uint8_t)hex_byte(hash + 2 * i);
    }
    n++;
  }
  return n;
}

/* As a writer of the keys without the tier's key: value i becomes value i+1's K/V under key i (tt_forge). */
static void move_values(const char* prefix) {
  kvc_tier_key keys[BLOCKS + 1];
  REQUIRE(stored_keys(prefix, keys, BLOCKS + 1) == BLOCKS);
  kvc_redis_tier_options o = options(prefix, NULL, 0);
  rt_tier raw = {{0}, NULL};
  REQUIRE_OK(rt_open(&o, &raw));
  enum { CAP = 4096 };
  static uint8_t got[BLOCKS][CAP], forged[BLOCKS][CAP];
  void* dst[BLOCKS];
  const void* src[BLOCKS];
  size_t sizes[BLOCKS];
  for (int i = 0; i < BLOCKS; i++) dst[i] = got[i], src[i] = forged[i];
  if (CHECK_EQ_U64(raw.ops.get_many(raw.ctx, keys, dst, CAP, sizes, BLOCKS), BLOCKS)) {
    for (int i = 0; i < BLOCKS; i++) {
      memcpy(forged[i], got[i], sizes[i]);
      tt_forge(forged[i], got[(i + 1) % BLOCKS], sizes[i]);
    }
    CHECK_EQ_U64(raw.ops.put_many(raw.ctx, keys, src, sizes, BLOCKS), BLOCKS);
  }
  rt_close(&raw);
}

static void test_same_key_and_others(void) {
  fill("auth:", KEY_A, sizeof KEY_A);
  fill("open:", NULL, 0);
  long wrong;
  kvc_tier_stats st;
  const struct { const char* prefix; const uint8_t* key; size_t len; uint64_t matched; } cases[] = {
      {"auth:", KEY_A, sizeof KEY_A, 16}, {"auth:", KEY_B, sizeof KEY_B, 0}, {"auth:", NULL, 0, 0},
      {"open:", KEY_A, sizeof KEY_A, 0},  {"open:", NULL, 0, 16},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint64_t m = match(cases[i].prefix, cases[i].key, cases[i].len, &wrong, &st);
    if (!CHECK_EQ_U64(m, cases[i].matched)) fprintf(stderr, "  case %zu\n", i);
    CHECK_EQ_I64(wrong, 0);
    CHECK_EQ_U64(st.hits, m / TT_BLOCK);
    CHECK_EQ_U64(st.corrupt, m ? 0 : 1);
  }
}

static void test_value_moved_under_another_key(void) {
  long wrong;
  kvc_tier_stats st;
  fill("forged-open:", NULL, 0);
  move_values("forged-open:");
  CHECK_EQ_U64(match("forged-open:", NULL, 0, &wrong, &st), 16); /* served: keyless tiers trust their writers */
  CHECK(wrong > 0);
  fill("forged-auth:", KEY_A, sizeof KEY_A);
  move_values("forged-auth:");
  CHECK_EQ_U64(match("forged-auth:", KEY_A, sizeof KEY_A, &wrong, &st), 0);
  CHECK_EQ_I64(wrong, 0);
  CHECK_EQ_U64(st.corrupt, 1);
}

static void test_bad_keys_refused(void) {
  kvc_tier* out = (kvc_tier*)&server; /* untouched on error */
  kvc_redis_tier_options o = options("bad:", KEY_A, 15);
  CHECK(tt_err_says(kvc_redis_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT,
                    "options.auth_key_len is 15; an authentication key is 16 to 256 bytes"));
  o.auth_key = NULL, o.auth_key_len = 16;
  CHECK(tt_err_says(kvc_redis_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options.auth_key is NULL"));
  o.struct_size = 80; /* no published size */
  CHECK(tt_err_says(kvc_redis_tier_create(&o, &out), KVC_ERROR_INVALID_ARGUMENT, "options.struct_size is 80"));
  CHECK_EQ_PTR(out, (kvc_tier*)&server);
  /* 0.6's struct, and 0.7's before the key (with call_timeout_ms): auth_key and auth_key_len are not read. */
  for (uint32_t size = 64; size <= 72; size += 8) {
    o.struct_size = size;
    if (!CHECK_OK(kvc_redis_tier_create(&o, &out))) continue;
    CHECK(out != (kvc_tier*)&server);
    kvc_tier_destroy(out);
    out = (kvc_tier*)&server;
  }
}

int main(void) {
  rs_require();
  if (rs_start(&server, 0) != 0) {
    fprintf(stderr, "cannot start redis-server\n");
    return 1;
  }
  snprintf(seeds, sizeof seeds, "127.0.0.1:%d", server.port);
  TU_RUN(test_same_key_and_others);
  TU_RUN(test_value_moved_under_another_key);
  TU_RUN(test_bad_keys_refused);
  rs_stop(&server);
  return tu_finish();
}
