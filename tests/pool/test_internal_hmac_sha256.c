/*
 * test_internal_hmac_sha256.c: core/pool/hmac_sha256.c against the seven
 * test cases of RFC 4231 (keys shorter than, equal to after hashing, and
 * longer than the 64-byte block; case 5 compares the first 128 bits, as
 * the RFC does), computed in one call and a byte at a time, with a prepared
 * key reused for several messages, and the constant-time comparison.
 */
#include "hash_vectors.h"
#include "pool/hmac_sha256.h"

typedef struct rfc4231_case {
  const char* name;
  uint8_t key_byte; /* the key repeated from one byte, or 0: key_text */
  size_t key_len;
  const char* key_text;
  uint8_t data_byte; /* the data repeated from one byte, or 0: data_text */
  size_t data_len;
  const char* data_text;
  const char* mac_hex;
  size_t mac_bytes; /* compared */
} rfc4231_case;

static const rfc4231_case CASES[] = {
    {"test case 1", 0x0b, 20, NULL, 0, 0, "Hi There",
     "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7", 32},
    {"test case 2", 0, 4, "Jefe", 0, 0, "what do ya want for nothing?",
     "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", 32},
    {"test case 3", 0xaa, 20, NULL, 0xdd, 50, NULL,
     "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe", 32},
    {"test case 4", 0, 25, "\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10\x11\x12\x13\x14\x15\x16"
     "\x17\x18\x19", 0xcd, 50, NULL, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b", 32},
    {"test case 5 (truncated to 128 bits)", 0x0c, 20, NULL, 0, 0, "Test With Truncation",
     "a3b6167473100ee06e0c796c2955552b00000000000000000000000000000000", 16},
    {"test case 6 (a 131-byte key)", 0xaa, 131, NULL, 0, 0, "Test Using Larger Than Block-Size Key - Hash Key First",
     "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", 32},
    {"test case 7 (131-byte key, 152-byte data)", 0xaa, 131, NULL, 0, 0,
     "This is a test using a larger than block-size key and a larger than block-size data. The key needs to be "
     "hashed before being used by the HMAC algorithm.",
     "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2", 32},
};

static void check_mac(const uint8_t* got, const rfc4231_case* c, const char* how) {
  uint8_t want[32];
  REQUIRE(hv_hash(c->mac_hex, want));
  if (!CHECK(memcmp(got, want, c->mac_bytes) == 0)) fprintf(stderr, "  %s, %s: the MAC differs\n", c->name, how);
}

static void test_rfc4231_cases(void) {
  uint8_t key[256], data[256];
  for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) {
    const rfc4231_case* c = &CASES[i];
    if (c->key_text) memcpy(key, c->key_text, c->key_len);
    else memset(key, c->key_byte, c->key_len);
    size_t n = c->data_text ? strlen(c->data_text) : c->data_len;
    if (c->data_text) memcpy(data, c->data_text, n);
    else memset(data, c->data_byte, n);
    uint8_t got[32];
    kvci_hmac_sha256(key, c->key_len, data, n, got);
    check_mac(got, c, "one call");
    kvci_hmac_sha256_key k;
    kvci_hmac_sha256_key_init(&k, key, c->key_len);
    kvci_hmac_sha256_ctx h;
    kvci_hmac_sha256_init(&h, &k);
    for (size_t j = 0; j < n; j++) kvci_hmac_sha256_update(&h, data + j, 1);
    kvci_hmac_sha256_final(&h, got);
    check_mac(got, c, "a byte at a time");
    /* The prepared key is not spent by a MAC: a second one over the same data agrees. */
    kvci_hmac_sha256_init(&h, &k);
    kvci_hmac_sha256_update(&h, data, n);
    kvci_hmac_sha256_final(&h, got);
    check_mac(got, c, "the prepared key reused");
    kvci_hmac_sha256_key_wipe(&k);
    const uint8_t* bytes = (const uint8_t*)&k;
    size_t nonzero = 0;
    for (size_t j = 0; j < sizeof k; j++) nonzero += bytes[j] != 0;
    CHECK_EQ_U64(nonzero, 0);
  }
}

/* Keys that differ in one byte, or only by trailing zero bytes past 64, give different MACs. */
static void test_key_bytes_matter(void) {
  uint8_t a[32], b[32], key[80];
  memset(key, 7, sizeof key);
  kvci_hmac_sha256(key, 32, "m", 1, a);
  key[31] ^= 1;
  kvci_hmac_sha256(key, 32, "m", 1, b);
  CHECK(memcmp(a, b, 32) != 0);
  kvci_hmac_sha256(key, 65, "m", 1, a); /* hashed first: 65 bytes are not the first 64 */
  kvci_hmac_sha256(key, 64, "m", 1, b);
  CHECK(memcmp(a, b, 32) != 0);
}

/* An empty key is padded with zeros only (no bytes to copy); the value is Python's hmac.new(b"", b"", sha256). */
static void test_empty_key_and_message(void) {
  uint8_t got[32], want[32];
  REQUIRE(hv_hash("b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad", want));
  kvci_hmac_sha256("", 0, "", 0, got);
  CHECK(memcmp(got, want, 32) == 0);
}

static void test_equal_const_time(void) {
  uint8_t a[32], b[32];
  memset(a, 0x5a, sizeof a);
  memcpy(b, a, sizeof b);
  CHECK(kvci_equal_const_time(a, b, 32));
  CHECK(kvci_equal_const_time(a, b, 0));
  for (size_t i = 0; i < 32; i++)
    for (int bit = 0; bit < 8; bit++) {
      b[i] ^= (uint8_t)(1u << bit);
      if (!CHECK(!kvci_equal_const_time(a, b, 32))) fprintf(stderr, "  byte %zu bit %d flipped: equal\n", i, bit);
      b[i] ^= (uint8_t)(1u << bit);
    }
}

int main(void) {
  TU_RUN(test_rfc4231_cases);
  TU_RUN(test_key_bytes_matter);
  TU_RUN(test_empty_key_and_message);
  TU_RUN(test_equal_const_time);
  return tu_finish();
}
