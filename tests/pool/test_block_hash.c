/*
 * test_block_hash.c: kvcache/block_hash.h against the vectors that
 * make_block_hash_vectors.py computed with Python's hashlib
 * (block_hash_vectors.txt), the chain's dependence on exactly the tokens
 * before a block, and bad input on every entry point (an error naming the
 * function, argument and value; every out-parameter untouched).
 */
#include "hash_vectors.h"
#include "test_errors.h"


static void check_root_vector(char** f) {
  size_t seed_len = 0, salt_len = 0;
  uint8_t* seed = hv_hex(f[2], &seed_len);
  uint8_t* salt = hv_hex(f[3], &salt_len);
  uint8_t want[32], got[32];
  if (CHECK(seed && salt && hv_hash(f[4], want))) {
    /* Empty fields as NULL, as a C caller without bytes passes them... */
    CHECK_OK(kvc_block_hash_root(seed_len ? seed : NULL, seed_len, salt_len ? salt : NULL, salt_len, got));
    CHECK_HASH(got, want, "root", f[1]);
    /* ...and as a pointer with length 0, as a binding passes an empty buffer: the same root. */
    memset(got, 0, sizeof got);
    CHECK_OK(kvc_block_hash_root(seed, seed_len, salt, salt_len, got));
    CHECK_HASH(got, want, "root (non-NULL empty fields)", f[1]);
  }
  free(seed);
  free(salt);
}

static void check_block_vector(char** f) {
  size_t n = 0, extra_len = 0;
  uint8_t parent[32], want[32], got[32];
  int32_t* tokens = hv_tokens(f[3], &n);
  uint8_t* extra = hv_hex(f[4], &extra_len);
  if (CHECK(tokens && extra && n >= 1 && hv_hash(f[2], parent) && hv_hash(f[5], want))) {
    CHECK_OK(kvc_block_hash(parent, tokens, n, extra_len ? extra : NULL, extra_len, got));
    CHECK_HASH(got, want, "block", f[1]);
    /* In place: out is the parent's array. */
    memcpy(got, parent, 32);
    CHECK_OK(kvc_block_hash(got, tokens, n, extra, extra_len, got));
    CHECK_HASH(got, want, "block in place", f[1]);
  }
  free(tokens);
  free(extra);
}

static void check_chain_vector(char** f) {
  size_t n = 0, count = 0;
  uint8_t root[32];
  int32_t* tokens = hv_tokens(f[4], &n);
  unsigned long block_size = strtoul(f[3], NULL, 10);
  /* The expected hashes: 65 characters each with its comma. */
  size_t want_count = strcmp(f[5], "-") == 0 ? 0 : (strlen(f[5]) + 1) / 65;
  uint8_t(*want)[32] = (uint8_t(*)[32])calloc(want_count + 1, 32);
  uint8_t(*got)[32] = (uint8_t(*)[32])malloc((want_count + 2) * 32);
  int ok = tokens && want && got && block_size >= 1 && hv_hash(f[2], root);
  for (size_t i = 0; ok && i < want_count; i++) {
    char one[65];
    memcpy(one, f[5] + 65 * i, 64);
    one[64] = '\0';
    ok = hv_hash(one, want[i]);
  }
  if (CHECK(ok) && CHECK_EQ_I64(want_count, n / block_size)) {
    /* One slot more than needed, which must stay as it was. */
    memset(got, 0xA5, (want_count + 2) * 32);
    count = 12345;
    CHECK_OK(kvc_block_hash_chain(root, n ? tokens : NULL, n, (uint32_t)block_size, got, want_count + 1, &count));
    CHECK_EQ_I64(count, want_count);
    for (size_t i = 0; i < want_count && i < count; i++) CHECK_HASH(got[i], want[i], "chain", f[1]);
    int untouched = 1;
    for (size_t b = 0; b < 32; b++) untouched &= got[want_count][b] == 0xA5;
    CHECK(untouched);
    /* The chain is kvc_block_hash block after block, the previous hash as parent. */
    uint8_t h[32];
    memcpy(h, root, 32);
    for (size_t i = 0; i < want_count; i++) {
      CHECK_OK(kvc_block_hash(h, tokens + i * block_size, block_size, NULL, 0, h));
      CHECK_HASH(h, want[i], "chain by kvc_block_hash", f[1]);
    }
  }
  free(tokens);
  free(want);
  free(got);
}

static void test_vectors(void) {
  char* text = hv_read_file(hv_dir, "block_hash_vectors.txt");
  REQUIRE(text != NULL);
  char* cursor = text;
  int roots = 0, blocks = 0, chains = 0;
  for (char* line; (line = hv_next_line(&cursor));) {
    if (line[0] == '#' || line[0] == '\0') continue;
    char* f[7];
    int nf = hv_fields(line, f, 6);
    if (strcmp(f[0], "root") == 0 && CHECK_EQ_I64(nf, 5)) {
      check_root_vector(f);
      roots++;
    } else if (strcmp(f[0], "block") == 0 && CHECK_EQ_I64(nf, 6)) {
      check_block_vector(f);
      blocks++;
    } else if (strcmp(f[0], "chain") == 0 && CHECK_EQ_I64(nf, 6)) {
      check_chain_vector(f);
      chains++;
    } else if (strcmp(f[0], "root") && strcmp(f[0], "block") && strcmp(f[0], "chain")) {
      CHECK(!"a line of block_hash_vectors.txt is no root, block or chain");
    }
  }
  printf("block_hash_vectors.txt: %d roots, %d blocks, %d chains\n", roots, blocks, chains);
  /* What make_block_hash_vectors.py writes: a shorter file means vectors went missing. */
  CHECK_EQ_I64(roots, 9);
  CHECK_EQ_I64(blocks, 11);
  CHECK_EQ_I64(chains, 8);
  free(text);
}

enum { TOKENS = 87, BS = 16, FULL = TOKENS / BS };

static void chain_of(const uint8_t root[32], const int32_t* tokens, uint8_t out[FULL][32]) {
  size_t count = 0;
  CHECK_OK(kvc_block_hash_chain(root, tokens, TOKENS, BS, out, FULL, &count));
  CHECK_EQ_I64(count, FULL);
}

/* Counts the blocks whose hashes differ between a and b. */
static int differing(uint8_t a[FULL][32], uint8_t b[FULL][32], int* first) {
  int n = 0;
  *first = -1;
  for (int i = 0; i < FULL; i++)
    if (memcmp(a[i], b[i], 32) != 0) {
      if (*first < 0) *first = i;
      n++;
    }
  return n;
}

/* A block's hash depends on every token up to its end, on the seed and the salt, and on nothing after it. */
static void test_a_hash_covers_exactly_its_prefix(void) {
  int32_t tokens[TOKENS];
  for (int i = 0; i < TOKENS; i++) tokens[i] = (int32_t)(i * 7919 % 32000);
  uint8_t root[32], base[FULL][32], other[FULL][32];
  REQUIRE_OK(kvc_block_hash_root("model", 5, NULL, 0, root));
  chain_of(root, tokens, base);
  int first = -1;
  for (int t = 0; t < TOKENS; t++) {
    tokens[t] ^= 1;
    chain_of(root, tokens, other);
    tokens[t] ^= 1;
    int n = differing(base, other, &first);
    if (t < FULL * BS) {
      /* Token t changes its own block and every later one. */
      if (!CHECK(n == FULL - t / BS && first == t / BS)) fprintf(stderr, "    token %d: %d differ from %d\n", t, n, first);
    } else {
      CHECK_EQ_I64(n, 0); /* the partial tail hashes nothing */
    }
  }
  uint8_t salted[32];
  REQUIRE_OK(kvc_block_hash_root("model", 5, "tenant", 6, salted));
  chain_of(salted, tokens, other);
  CHECK_EQ_I64(differing(base, other, &first), FULL);
  /* Extra keys change the block they are given to. */
  uint8_t plain[32], keyed[32];
  CHECK_OK(kvc_block_hash(root, tokens, BS, NULL, 0, plain));
  CHECK_OK(kvc_block_hash(root, tokens, BS, "lora:1", 6, keyed));
  CHECK(memcmp(plain, base[0], 32) == 0 && memcmp(plain, keyed, 32) != 0);
}

static const uint8_t SENTINEL = 0xA5;

static int untouched(const uint8_t* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != SENTINEL) return 0;
  return 1;
}

static void test_bad_input_root(void) {
  uint8_t out[32];
  memset(out, SENTINEL, sizeof out);
  EXPECT_ERR(kvc_block_hash_root(NULL, 3, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash_root",
             "seed is NULL", "seed_len is 3");
  EXPECT_ERR(kvc_block_hash_root("s", 1, NULL, 2, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash_root",
             "salt is NULL", "salt_len is 2");
  EXPECT_ERR(kvc_block_hash_root("s", 1, "t", 1, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash_root",
             "out is NULL");
#if SIZE_MAX > UINT32_MAX
  /* Checked before a byte is read: the pointers hold 1 byte, the lengths say more than le32 can encode. */
  size_t huge = (size_t)UINT32_MAX + 1;
  EXPECT_ERR(kvc_block_hash_root("s", huge, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash_root",
             "seed_len is 4294967296", "at most 4294967295");
  EXPECT_ERR(kvc_block_hash_root(NULL, 0, "t", huge, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash_root",
             "salt_len is 4294967296");
#endif
  CHECK(untouched(out, sizeof out));
}

static void test_bad_input_block(void) {
  uint8_t parent[32] = {0}, out[32];
  const int32_t good[3] = {1, 2, 3};
  const int32_t negative[4] = {0, 5, -7, 9};
  const int32_t most_negative[1] = {INT32_MIN};
  memset(out, SENTINEL, sizeof out);
  EXPECT_ERR(kvc_block_hash(NULL, good, 3, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "parent is NULL");
  EXPECT_ERR(kvc_block_hash(parent, NULL, 3, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "tokens is NULL", "num_tokens is 3");
  EXPECT_ERR(kvc_block_hash(parent, good, 0, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "num_tokens is 0");
  EXPECT_ERR(kvc_block_hash(parent, NULL, 0, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "num_tokens is 0");
  EXPECT_ERR(kvc_block_hash(parent, negative, 4, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "tokens[2] is -7", ">= 0");
  EXPECT_ERR(kvc_block_hash(parent, most_negative, 1, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "tokens[0] is -2147483648");
  EXPECT_ERR(kvc_block_hash(parent, good, 3, NULL, 4, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "extra is NULL", "extra_len is 4");
  EXPECT_ERR(kvc_block_hash(parent, good, 3, NULL, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "out is NULL");
#if SIZE_MAX > UINT32_MAX
  size_t huge = (size_t)UINT32_MAX + 1;
  EXPECT_ERR(kvc_block_hash(parent, good, huge, NULL, 0, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "num_tokens is 4294967296");
  EXPECT_ERR(kvc_block_hash(parent, good, 3, "x", huge, out), KVC_ERROR_INVALID_ARGUMENT, "kvc_block_hash",
             "extra_len is 4294967296");
#endif
  CHECK(untouched(out, sizeof out));
  /* In place, a refused call leaves the parent as it was too. */
  memset(parent, SENTINEL, sizeof parent);
  EXPECT_ERR(kvc_block_hash(parent, negative, 4, NULL, 0, parent), KVC_ERROR_INVALID_ARGUMENT, "tokens[2]");
  CHECK(untouched(parent, sizeof parent));
}

static void test_bad_input_chain(void) {
  uint8_t root[32] = {1}, out[4][32];
  int32_t tokens[10];
  for (int i = 0; i < 10; i++) tokens[i] = i;
  size_t count = 777;
  memset(out, SENTINEL, sizeof out);
  EXPECT_ERR(kvc_block_hash_chain(NULL, tokens, 10, 2, out, 5, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "root is NULL");
  EXPECT_ERR(kvc_block_hash_chain(root, tokens, 10, 2, out, 5, NULL), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "out_count is NULL");
  EXPECT_ERR(kvc_block_hash_chain(root, NULL, 10, 2, out, 5, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "tokens is NULL", "num_tokens is 10");
  EXPECT_ERR(kvc_block_hash_chain(root, tokens, 10, 2, NULL, 5, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "out is NULL", "out_capacity is 5");
  EXPECT_ERR(kvc_block_hash_chain(root, tokens, 10, 0, out, 5, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "block_size is 0");
  /* 10 tokens in blocks of 2 are 5 full blocks; room for 4 is refused before any hash is written. */
  EXPECT_ERR(kvc_block_hash_chain(root, tokens, 10, 2, out, 4, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "out_capacity is 4", "5 full blocks", "room for 5");
  /* A negative id in the tail, which is never hashed, is still refused: the list is the request's tokens. */
  tokens[9] = -1;
  EXPECT_ERR(kvc_block_hash_chain(root, tokens, 9 + 1, 3, out, 4, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "tokens[9] is -1");
  tokens[9] = 9;
  tokens[5] = -3;
  EXPECT_ERR(kvc_block_hash_chain(root, tokens, 10, 2, out, 5, &count), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_block_hash_chain", "tokens[5] is -3");
  CHECK(untouched(&out[0][0], sizeof out));
  CHECK_EQ_I64(count, 777);
  /* The empty cases are not errors: nothing full, nothing written, a count of 0. */
  tokens[5] = 5;
  CHECK_OK(kvc_block_hash_chain(root, NULL, 0, 16, NULL, 0, &count));
  CHECK_EQ_I64(count, 0);
  count = 777;
  CHECK_OK(kvc_block_hash_chain(root, tokens, 10, 16, NULL, 0, &count));
  CHECK_EQ_I64(count, 0);
}

int main(int argc, char** argv) {
  static const hv_test tests[] = {HV_TEST(test_vectors), HV_TEST(test_a_hash_covers_exactly_its_prefix),
                                  HV_TEST(test_bad_input_root), HV_TEST(test_bad_input_block),
                                  HV_TEST(test_bad_input_chain)};
  return hv_main(argc, argv, __FILE__, tests, sizeof tests / sizeof tests[0]);
}
