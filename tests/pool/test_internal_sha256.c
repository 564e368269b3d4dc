/*
 * test_internal_sha256.c: core/pool/sha256.c against the FIPS 180-2 examples
 * (appendix B and the one-million-'a' message) and against Python's hashlib
 * for every message length 0..300 (sha256_vectors.txt), hashed in one call,
 * split in two at every point, and a byte at a time: every path through the
 * buffering and the padding (lengths 55, 56, 63, 64 and 119/120 included).
 */
#include "hash_vectors.h"
#include "pool/sha256.h"
#include "pool/sha256_x86.h"


/* The digest of `msg` by one call, compared with `want_hex`. */
static void check_digest(const void* msg, size_t len, const char* want_hex, const char* name) {
  uint8_t want[32], got[32];
  REQUIRE(hv_hash(want_hex, want));
  kvci_sha256(msg, len, got);
  CHECK_HASH(got, want, "sha256", name);
}

static void test_fips_examples(void) {
  check_digest("abc", 3, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", "'abc'");
  check_digest("", 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "the empty message");
  check_digest(NULL, 0, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", "NULL, 0");
  static const char m448[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  check_digest(m448, sizeof m448 - 1, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
               "the 448-bit message");
  static const char m896[] =
      "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrst"
      "nopqrstu";
  check_digest(m896, sizeof m896 - 1, "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1",
               "the 896-bit message");
}

static void test_one_million_a(void) {
  static const char* want_hex = "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0";
  enum { N = 1000000 };
  char* a = (char*)malloc(N);
  REQUIRE(a != NULL);
  memset(a, 'a', N);
  check_digest(a, N, want_hex, "one million 'a' in one update");
  /* The same in pieces of 1000, and in pieces of 1..64 bytes that never line up with the blocks. */
  uint8_t want[32], got[32];
  REQUIRE(hv_hash(want_hex, want));
  kvci_sha256_ctx h;
  kvci_sha256_init(&h);
  for (int i = 0; i < N / 1000; i++) kvci_sha256_update(&h, a, 1000);
  kvci_sha256_final(&h, got);
  CHECK_HASH(got, want, "sha256", "one million 'a' in pieces of 1000");
  kvci_sha256_init(&h);
  for (size_t done = 0, piece = 1; done < N; piece = piece % 64 + 1) {
    size_t take = N - done < piece ? N - done : piece;
    kvci_sha256_update(&h, a + done, take);
    done += take;
  }
  kvci_sha256_final(&h, got);
  CHECK_HASH(got, want, "sha256", "one million 'a' in pieces of 1..64");
  free(a);
}

/* Byte i of the length-n message of sha256_vectors.txt (make_block_hash_vectors.py's sha256_message). */
static uint8_t message_byte(size_t n, size_t i) { return (uint8_t)((i * 131 + n * 17 + 1) & 0xFF); }

static void test_lengths_0_to_300_against_hashlib(void) {
  char* text = hv_read_file(hv_dir, "sha256_vectors.txt");
  REQUIRE(text != NULL);
  char* cursor = text;
  size_t seen = 0;
  uint8_t msg[512];
  for (char* line; (line = hv_next_line(&cursor));) {
    if (line[0] == '#' || line[0] == '\0') continue;
    char* f[3];
    if (!CHECK(hv_fields(line, f, 2) == 2)) break;
    size_t n = (size_t)strtoul(f[0], NULL, 10);
    uint8_t want[32], got[32];
    if (!CHECK(n == seen && n < sizeof msg && hv_hash(f[1], want))) break;
    for (size_t i = 0; i < n; i++) msg[i] = message_byte(n, i);
    char name[64];
    snprintf(name, sizeof name, "the %zu-byte message", n);
    kvci_sha256(msg, n, got);
    CHECK_HASH(got, want, "one call", name);
    /* Split in two at every point: the carry of a partial block into the next update. */
    int splits_ok = 1;
    for (size_t k = 0; k <= n; k++) {
      kvci_sha256_ctx h;
      kvci_sha256_init(&h);
      kvci_sha256_update(&h, msg, k);
      kvci_sha256_update(&h, msg + k, n - k);
      kvci_sha256_final(&h, got);
      if (memcmp(got, want, 32) != 0) {
        splits_ok = 0;
        fprintf(stderr, "the %zu-byte message split at %zu hashes differently\n", n, k);
      }
    }
    CHECK(splits_ok);
    kvci_sha256_ctx h;
    kvci_sha256_init(&h);
    for (size_t i = 0; i < n; i++) kvci_sha256_update(&h, msg + i, 1);
    kvci_sha256_final(&h, got);
    CHECK_HASH(got, want, "a byte at a time", name);
    seen++;
  }
  /* A file cut short fails here rather than testing fewer lengths. */
  CHECK_EQ_I64(seen, 301);
  free(text);
}

/* The state is plain data: a copy continues independently (how a caller forks a common prefix). */
static void test_copy_forks_the_computation(void) {
  kvci_sha256_ctx a, b;
  kvci_sha256_init(&a);
  kvci_sha256_update(&a, "ab", 2);
  b = a;
  kvci_sha256_update(&a, "c", 1);
  kvci_sha256_update(&b, "d", 1);
  uint8_t ga[32], gb[32], abc[32], abd[32];
  kvci_sha256_final(&a, ga);
  kvci_sha256_final(&b, gb);
  kvci_sha256("abc", 3, abc);
  kvci_sha256("abd", 3, abd);
  CHECK_HASH(ga, abc, "forked", "'ab' + 'c'");
  CHECK_HASH(gb, abd, "forked", "'ab' + 'd'");
  CHECK(memcmp(abc, abd, 32) != 0);
}

/*
 * The SHA-NI compression against the portable one on random states and runs of 1..8 blocks. The digests above
 * went through whichever path this host picks; this compares the two directly, so a host with SHA-NI checks
 * both, and says which it could run.
 */
static void test_sha_ni_equals_portable(void) {
  if (!kvci_sha256_x86_available()) {
    printf("  SKIPPED: this CPU has no SHA extensions (SHA-NI); the portable path was tested above\n");
    return;
  }
  uint64_t x = 0x9E3779B97F4A7C15u;
  uint8_t blocks[8 * KVCI_SHA256_BLOCK_SIZE];
  for (int run = 0; run < 2000; run++) {
    uint32_t a[8], b[8];
    for (int i = 0; i < 8; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      a[i] = b[i] = (uint32_t)(x >> 16);
    }
    size_t count = 1 + (size_t)(run % 8);
    for (size_t i = 0; i < count * KVCI_SHA256_BLOCK_SIZE; i++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      blocks[i] = (uint8_t)(x >> 24);
    }
    kvci_sha256_compress_portable(a, blocks, count);
    kvci_sha256_x86_compress(b, blocks, count);
    if (!CHECK(memcmp(a, b, sizeof a) == 0))
      fprintf(stderr, "  run %d (%zu blocks): the SHA-NI state differs from the portable one\n", run, count);
  }
}

int main(int argc, char** argv) {
  static const hv_test tests[] = {HV_TEST(test_fips_examples), HV_TEST(test_one_million_a),
                                  HV_TEST(test_lengths_0_to_300_against_hashlib),
                                  HV_TEST(test_copy_forks_the_computation), HV_TEST(test_sha_ni_equals_portable)};
  return hv_main(argc, argv, __FILE__, tests, sizeof tests / sizeof tests[0]);
}
