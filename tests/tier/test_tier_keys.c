/*
 * Blocks by key (kvcache/tier.h, 'Key-level access') on the disk tier, with
 * the public API only: put, get and exists round trips; a key-level reader
 * and a pool share values both ways (the fingerprint and the block size
 * come from the options, no pool needed); values of another size, layer
 * count, key or authentication key, and forged ones, are misses; bad input
 * is an error naming the argument that leaves found[] and the tier as they
 * were; a store of the 0.6 ops size is accepted and has no exists.
 */
#include "tier_test.h"

#define N 6
#define TB_N N
#define PAYLOAD 1000
#define TB_PAYLOAD PAYLOAD
#include "tier_blocks.h"

static const uint8_t AUTH[16] = "0123456789abcdef";

static kvc_tier* disk(const char* dir, const uint8_t* auth) {
  kvc_disk_tier_options o = KVC_DISK_TIER_OPTIONS_INIT;
  o.directory = dir;
  o.auth_key = auth;
  o.auth_key_len = auth ? sizeof AUTH : 0;
  kvc_tier* t = NULL;
  kvc_error_destroy(kvc_disk_tier_create(&o, &t));
  return t;
}

/* A disk tier (auth: its key, or none) in a fresh directory `name` (into dir), or NULL; and the blocks its tests
 * store. */
static kvc_tier* fresh_disk(char* dir, size_t cap, const char* name, const uint8_t* auth, tb_blocks* b) {
  tb_make(b, 0xF0);
  return CHECK(tt_tempdir(dir, cap, name)) ? disk(dir, auth) : NULL;
}

static void check_round_trip(const uint8_t* auth) {
  char dir[4096];
  static tb_blocks b;
  kvc_tier* t = fresh_disk(dir, sizeof dir, "keys", auth, &b);
  REQUIRE(t);
  size_t n = 99;
  /* Nothing yet: every key is a miss, for exists and get. */
  CHECK_OK(kvc_tier_exists(t, b.keys, N, b.found, &n));
  CHECK_EQ_U64(n, 0);
  for (int i = 0; i < N; i++) CHECK_EQ_U64(b.found[i], 0);
  /* Blocks 0, 2 and 3 stored: exists and get say exactly those, the bytes come back. */
  const kvc_tier_key some[3] = {b.keys[0], b.keys[2], b.keys[3]};
  const void* some_in[3] = {b.in[0], b.in[2], b.in[3]};
  CHECK_OK(kvc_tier_put_blocks(t, some, 3, PAYLOAD, 2, some_in, &n));
  CHECK_EQ_U64(n, 3);
  CHECK_OK(kvc_tier_exists(t, b.keys, N, b.found, &n));
  CHECK_EQ_U64(n, 3);
  CHECK_OK(kvc_tier_get_blocks(t, b.keys, N, PAYLOAD, 2, b.out, b.found, &n));
  CHECK_EQ_U64(n, 3);
  CHECK(tb_got_exactly(&b, (const int[]){0, 2, 3}, 3));
  kvc_tier_stats s = tt_stats(t);
  CHECK_EQ_U64(s.puts, 3);
  CHECK_EQ_U64(s.gets, N);
  CHECK_EQ_U64(s.hits, 3);
  CHECK_EQ_U64(s.corrupt, 0);
  /* Another payload size or layer count is a miss counted corrupt, never a short or foreign block. */
  CHECK_OK(kvc_tier_get_blocks(t, b.keys, 1, PAYLOAD - 1, 2, b.out, b.found, &n));
  CHECK_EQ_U64(n, 0);
  CHECK_EQ_U64(b.found[0], 0);
  CHECK_OK(kvc_tier_get_blocks(t, b.keys, 1, PAYLOAD, 3, b.out, b.found, &n));
  CHECK_EQ_U64(n, 0);
  /* Counted corrupt when read; a keyed value is larger than a smaller payload's buffer: not even read. */
  CHECK_EQ_U64(tt_stats(t).corrupt, auth ? 1 : 2);
  /* The other mode's tier on the same directory (a key added or removed) finds the files and refuses them. */
  kvc_tier* other = disk(dir, auth ? NULL : AUTH);
  REQUIRE(other);
  CHECK_OK(kvc_tier_exists(other, b.keys, 1, b.found, &n));
  CHECK_EQ_U64(n, 1); /* existence only */
  CHECK_OK(kvc_tier_get_blocks(other, b.keys, 1, PAYLOAD, 2, b.out, b.found, &n));
  CHECK_EQ_U64(n, 0);
  CHECK_EQ_U64(tt_stats(other).corrupt, 1);
  kvc_tier_destroy(other);
  /* A value copied under another block's name (CRC recomputed by a writer without the key) is a miss. */
  char (*files)[4096] = malloc(8 * sizeof *files);
  REQUIRE(files);
  size_t nf = tt_files(dir, files, 8);
  CHECK_EQ_U64(nf, 3);
  size_t vsize = 96 + PAYLOAD + (auth ? 32 : 4);
  uint8_t *victim = malloc(vsize), *donor = malloc(vsize);
  FILE* f = fopen(files[0], "rb");
  FILE* g = fopen(files[1], "rb");
  if (CHECK(f && g && victim && donor) && CHECK(fread(victim, 1, vsize, f) == vsize) &&
      CHECK(fread(donor, 1, vsize, g) == vsize)) {
    fclose(f), fclose(g);
    f = g = NULL;
    tt_forge(victim, donor, vsize);
    FILE* w = fopen(files[0], "wb");
    CHECK(w && fwrite(victim, 1, vsize, w) == vsize);
    if (w) fclose(w);
    CHECK_OK(kvc_tier_get_blocks(t, b.keys, N, PAYLOAD, 2, b.out, b.found, &n));
    /* Keyless: the forger wins (the documented trust); keyed: the forged block is a miss. */
    CHECK_EQ_U64(n, auth ? 2 : 3);
  }
  if (f) fclose(f);
  if (g) fclose(g);
  free(victim), free(donor), free(files);
  kvc_tier_destroy(t);
  tt_rmtree(dir);
}

static void test_round_trip_keyless(void) { check_round_trip(NULL); }
static void test_round_trip_authenticated(void) { check_round_trip(AUTH); }

static const pt_group GROUPS[2] = {{KVC_POOL_GROUP_FULL, TT_BLOCK, 16, 0}, {KVC_POOL_GROUP_RECURRENT, 8, 8, 0}};
static const uint32_t LAYERS[3] = {0, 1, 0}, LAYERS1[2] = {0, 0};

/* Options without a pool give the pool's fingerprint: an attention model and a hybrid one, both layouts. */
static void test_fingerprint_without_a_pool(void) {
  for (uint32_t ng = 1; ng <= 2; ng++)
    for (int layout = 0; layout < 2; layout++) {
      pt_options po;
      pt_options_fill(&po, GROUPS, ng, ng == 1 ? LAYERS1 : LAYERS, ng == 1 ? 2 : 3, (kvc_pool_layout)layout, 0, 1);
      uint8_t a[32], b[32];
      kvc_pool* p = NULL;
      REQUIRE_OK(kvc_pool_create(&po.o, &p));
      CHECK_OK(kvc_pool_fingerprint(p, a));
      kvc_pool_destroy(p);
      CHECK_OK(kvc_pool_options_fingerprint(&po.o, b));
      CHECK(memcmp(a, b, 32) == 0);
      /* Capacity and device are not part of it; the seed is. */
      po.g[0].num_blocks = 40;
      CHECK_OK(kvc_pool_options_fingerprint(&po.o, b));
      CHECK(memcmp(a, b, 32) == 0);
      po.o.hash_seed = "model-y";
      CHECK_OK(kvc_pool_options_fingerprint(&po.o, b));
      CHECK(memcmp(a, b, 32) != 0);
    }
  pt_options po;
  pt_options_fill(&po, GROUPS, 2, LAYERS, 3, KVC_POOL_LAYOUT_NHD, 0, 1);
  size_t payload = 0;
  uint32_t layers = 0;
  CHECK_OK(kvc_pool_options_block_payload(&po.o, 0, &payload, &layers));
  CHECK_EQ_U64(layers, 2);
  CHECK_EQ_U64(payload, 2 * (TT_BLOCK * 2 * 4 + TT_BLOCK * 2 * 3) * sizeof(float)); /* K [4,2,4], V [4,2,3] */
  CHECK_OK(kvc_pool_options_block_payload(&po.o, 1, &payload, &layers));
  CHECK_EQ_U64(layers, 1);
  CHECK_EQ_U64(payload, (3 * 2 + 2 * 4 * 2) * sizeof(float)); /* conv [3,2], SSM [2,4,2] */
  uint8_t fp[32];
  memset(fp, 0x5A, sizeof fp);
  CHECK(tt_err_says(kvc_pool_options_block_payload(&po.o, 2, &payload, &layers), KVC_ERROR_INVALID_ARGUMENT,
                    "group is 2"));
  po.o.dtype = KVC_DTYPE_UNSET;
  CHECK(tt_err_says(kvc_pool_options_fingerprint(&po.o, fp), KVC_ERROR_INVALID_ARGUMENT, "options.dtype"));
  CHECK_EQ_U64(fp[0], 0x5A);
  CHECK(tt_err_says(kvc_pool_options_fingerprint(NULL, fp), KVC_ERROR_INVALID_ARGUMENT, "options is NULL"));
}

/* A pool's committed blocks are read by key, and blocks put by key are matched by a fresh pool. */
static void test_a_pool_and_a_key_reader_share_values(void) {
  char dir[4096], dir2[4096];
  REQUIRE(tt_tempdir(dir, sizeof dir, "keys-pool"));
  REQUIRE(tt_tempdir(dir2, sizeof dir2, "keys-pool2"));
  pt_options po;
  pt_options_fill(&po, GROUPS, 1, LAYERS1, 2, KVC_POOL_LAYOUT_NHD, 64, 1);
  kvc_pool* p = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  kvc_tier* t = tt_disk(dir, 0);
  REQUIRE(t);
  REQUIRE_OK(kvc_pool_add_tier(p, t, KVC_TIER_WRITE_ON_COMMIT));
  kvc_pool_sequence* s = NULL;
  REQUIRE_OK(tt_commit_prompt(p, 12, &s)); /* three blocks */
  /* The keys a router computes: the fingerprint from the options, the chain from the tokens. */
  int32_t tok[12];
  tt_prompt(tok, 12, 1);
  uint8_t root[32], hashes[3][32];
  size_t nh = 0;
  REQUIRE_OK(kvc_block_hash_root("model-x", 7, NULL, 0, root));
  REQUIRE_OK(kvc_block_hash_chain(root, tok, 12, TT_BLOCK, hashes, 3, &nh));
  REQUIRE(nh == 3);
  kvc_tier_key keys[3];
  memset(keys, 0, sizeof keys);
  for (int i = 0; i < 3; i++) {
    REQUIRE_OK(kvc_pool_options_fingerprint(&po.o, keys[i].fingerprint));
    memcpy(keys[i].block_hash, hashes[i], 32);
  }
  size_t payload = 0;
  uint32_t layers = 0;
  REQUIRE_OK(kvc_pool_options_block_payload(&po.o, 0, &payload, &layers));
  uint8_t* buf = malloc(3 * payload);
  REQUIRE(buf);
  void* out[3] = {buf, buf + payload, buf + 2 * payload};
  uint8_t found[3];
  size_t n = 0;
  /* The pool owns the tier; its tier is still usable by key between the pool's calls. */
  kvc_tier* owned = kvc_pool_tier(p, 0);
  CHECK_OK(kvc_tier_exists(owned, keys, 3, found, &n));
  CHECK_EQ_U64(n, 3);
  CHECK_OK(kvc_tier_get_blocks(owned, keys, 3, payload, layers, out, found, &n));
  CHECK_EQ_U64(n, 3);
  /* Layer 0's K of token 0 head 0 is the value the pool tests write (pt_value). */
  float first;
  memcpy(&first, buf, sizeof first);
  CHECK_EQ_F64(first, pt_value(0, 0, 0, 0, 0));
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);

  /* Put by key into another directory: a fresh pool on it matches the prompt from there. */
  kvc_tier* t2 = tt_disk(dir2, 0);
  REQUIRE(t2);
  CHECK_OK(kvc_tier_put_blocks(t2, keys, 3, payload, layers, (const void* const*)out, &n));
  CHECK_EQ_U64(n, 3);
  p = NULL;
  REQUIRE_OK(kvc_pool_create(&po.o, &p));
  REQUIRE_OK(kvc_pool_add_tier(p, t2, KVC_TIER_WRITE_ON_COMMIT));
  uint64_t matched = 0;
  CHECK_OK(tt_match_prompt(p, 13, &s, &matched));
  CHECK_EQ_U64(matched, 12);
  CHECK_EQ_U64(tt_stats(t2).hits, 3);
  kvc_pool_sequence_destroy(s);
  kvc_pool_destroy(p);
  free(buf);
  tt_rmtree(dir);
  tt_rmtree(dir2);
}

/* A program's store of the 0.6 size (no exists_many): accepted; exists is UNSUPPORTED, get and put work. */
static uint8_t mem_value[2048];
static size_t mem_size;
static size_t mem_put(void* ctx, const kvc_tier_key* keys, const void* const* values, const size_t* sizes,
                      size_t count) {
  (void)ctx, (void)keys;
  if (count != 1 || sizes[0] > sizeof mem_value) return 0;
  memcpy(mem_value, values[0], sizes[0]);
  mem_size = sizes[0];
  return 1;
}
static size_t mem_get(void* ctx, const kvc_tier_key* keys, void* const* values, size_t capacity, size_t* sizes,
                      size_t count) {
  (void)ctx, (void)keys;
  if (count != 1 || !mem_size || mem_size > capacity) return 0;
  memcpy(values[0], mem_value, mem_size);
  sizes[0] = mem_size;
  return 1;
}

static void test_store_of_0_6(void) {
  kvc_tier_ops ops;
  memset(&ops, 0xAB, sizeof ops); /* bytes past a 0.6 caller's struct are never read */
  ops.struct_size = 32;
  ops.put_many = mem_put;
  ops.get_many = mem_get;
  ops.destroy = NULL;
  kvc_tier* t = NULL;
  REQUIRE_OK(kvc_tier_create(&ops, NULL, "mem", &t));
  static tb_blocks b;
  tb_make(&b, 0xF0);
  size_t n = 0;
  CHECK(tt_err_says(kvc_tier_exists(t, b.keys, 1, b.found, &n), KVC_ERROR_UNSUPPORTED, "exists_many"));
  CHECK_EQ_U64(b.found[0], 7);
  CHECK_OK(kvc_tier_put_blocks(t, b.keys, 1, PAYLOAD, 1, b.in, &n));
  CHECK_EQ_U64(n, 1);
  CHECK_OK(kvc_tier_get_blocks(t, b.keys, 1, PAYLOAD, 1, b.out, b.found, &n));
  CHECK_EQ_U64(n, 1);
  CHECK(memcmp(b.read[0], b.data[0], PAYLOAD) == 0);
  /* The value is another key's for key 1: the frame says so. */
  CHECK_OK(kvc_tier_get_blocks(t, &b.keys[1], 1, PAYLOAD, 1, b.out, b.found, &n));
  CHECK_EQ_U64(n, 0);
  CHECK_EQ_U64(tt_stats(t).corrupt, 1);
  kvc_tier_destroy(t);
  ops.struct_size = 36;
  CHECK(tt_err_says(kvc_tier_create(&ops, NULL, "mem", &t), KVC_ERROR_INVALID_ARGUMENT, "struct_size is 36"));
}

static void test_bad_input(void) {
  char dir[4096];
  static tb_blocks b;
  kvc_tier* t = fresh_disk(dir, sizeof dir, "keys-bad", NULL, &b);
  REQUIRE(t);
  size_t n = 42;
  const char* E = "payload_size is 0";
  CHECK(tt_err_says(kvc_tier_exists(NULL, b.keys, 1, b.found, &n), KVC_ERROR_INVALID_ARGUMENT, "tier is NULL"));
  CHECK(tt_err_says(kvc_tier_exists(t, NULL, 1, b.found, &n), KVC_ERROR_INVALID_ARGUMENT, "keys is NULL"));
  CHECK(tt_err_says(kvc_tier_exists(t, b.keys, 1, NULL, &n), KVC_ERROR_INVALID_ARGUMENT, "found is NULL"));
  CHECK(tt_err_says(kvc_tier_put_blocks(t, b.keys, 2, 0, 2, b.in, &n), KVC_ERROR_INVALID_ARGUMENT, E));
  CHECK(tt_err_says(kvc_tier_put_blocks(t, b.keys, 2, (size_t)KVC_TIER_PAYLOAD_MAX + 1, 2, b.in, &n),
                    KVC_ERROR_INVALID_ARGUMENT, "KVC_TIER_PAYLOAD_MAX"));
  CHECK(tt_err_says(kvc_tier_put_blocks(t, b.keys, 2, PAYLOAD, 0, b.in, &n), KVC_ERROR_INVALID_ARGUMENT,
                    "num_layers is 0"));
  b.in[1] = NULL;
  CHECK(tt_err_says(kvc_tier_put_blocks(t, b.keys, 2, PAYLOAD, 2, b.in, &n), KVC_ERROR_INVALID_ARGUMENT,
                    "payloads[1] is NULL"));
  b.in[1] = b.data[1];
  b.keys[1].reserved = 5;
  CHECK(tt_err_says(kvc_tier_put_blocks(t, b.keys, 2, PAYLOAD, 2, b.in, &n), KVC_ERROR_INVALID_ARGUMENT,
                    "keys[1].reserved is 5"));
  CHECK(tt_err_says(kvc_tier_get_blocks(t, b.keys, 2, PAYLOAD, 2, b.out, b.found, &n), KVC_ERROR_INVALID_ARGUMENT,
                    "keys[1].reserved is 5"));
  b.keys[1].reserved = 0;
  CHECK(tt_err_says(kvc_tier_get_blocks(t, b.keys, 2, PAYLOAD, 2, NULL, b.found, &n), KVC_ERROR_INVALID_ARGUMENT,
                    "payloads is NULL"));
  CHECK(tt_err_says(kvc_tier_get_blocks(t, b.keys, 2, 0, 2, b.out, b.found, &n), KVC_ERROR_INVALID_ARGUMENT, E));
  /* Nothing was stored, nothing answered, nothing counted. */
  CHECK_EQ_U64(n, 42);
  for (int i = 0; i < N; i++) CHECK_EQ_U64(b.found[i], 7);
  kvc_tier_stats s = tt_stats(t);
  CHECK_EQ_U64(s.puts + s.put_failures + s.gets, 0);
  char (*files)[4096] = malloc(4 * sizeof *files);
  if (CHECK(files)) CHECK_EQ_U64(tt_files(dir, files, 4), 0);
  free(files);
  /* count 0 is no call at all. */
  CHECK_OK(kvc_tier_exists(t, NULL, 0, NULL, &n));
  CHECK_EQ_U64(n, 0);
  kvc_tier_destroy(t);
  tt_rmtree(dir);
}

int main(void) {
  TU_RUN(test_round_trip_keyless);
  TU_RUN(test_round_trip_authenticated);
  TU_RUN(test_fingerprint_without_a_pool);
  TU_RUN(test_a_pool_and_a_key_reader_share_values);
  TU_RUN(test_store_of_0_6);
  TU_RUN(test_bad_input);
  return tu_finish();
}
