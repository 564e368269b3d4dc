/*
 * test_internal_crc32c.c: CRC-32C (core/persist/crc32c.c) against published
 * vectors (the "123456789" check value, RFC 3720 B.4), the table and the
 * instruction implementations against each other on every length and
 * alignment up to 300 bytes and on buffers past the three-lane segments,
 * and split updates against one update.
 */
#include <stdlib.h>
#include <string.h>

#include "persist/crc32c.h"
#include "test_util.h"

static void test_published_vectors(void) {
  unsigned char buf[32];
  CHECK_EQ_U64(kvci_crc32c_update(0, "123456789", 9), 0xE3069283u);
  CHECK_EQ_U64(kvci_crc32c_update_portable(0, "123456789", 9), 0xE3069283u);
  memset(buf, 0, 32);
  CHECK_EQ_U64(kvci_crc32c_update(0, buf, 32), 0x8A9136AAu);
  memset(buf, 0xFF, 32);
  CHECK_EQ_U64(kvci_crc32c_update(0, buf, 32), 0x62A8AB43u);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
  CHECK_EQ_U64(kvci_crc32c_update(0, buf, 32), 0x46DD794Eu);
  for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
  CHECK_EQ_U64(kvci_crc32c_update(0, buf, 32), 0x113FDB5Cu);
  CHECK_EQ_U64(kvci_crc32c_update(0, buf, 0), 0u);
}

static void test_implementations_agree(void) {
  unsigned char buf[320];
  uint64_t s = 12345;
  for (size_t i = 0; i < sizeof buf; i++) buf[i] = (unsigned char)tu_xorshift32(&s);
  for (size_t off = 0; off < 8; off++)
    for (size_t n = 0; n <= 300; n++) {
      uint32_t a = kvci_crc32c_update(0, buf + off, n), b = kvci_crc32c_update_portable(0, buf + off, n);
      if (!CHECK_EQ_U64(a, b)) return;
      size_t cut = n / 3;
      uint32_t split = kvci_crc32c_update(kvci_crc32c_update(0, buf + off, cut), buf + off + cut, n - cut);
      if (!CHECK_EQ_U64(split, a)) return;
    }
}

/* Buffers past the folding threshold (1 KiB, where the core has VPCLMULQDQ) and three 4 KiB lanes (the
   instruction's three-lane path): every fold step, lane boundary and tail. */
static void test_long_buffers_agree(void) {
  enum { N = 3 * 4096 * 3 + 100 };
  unsigned char* buf = (unsigned char*)malloc(N + 8);
  uint64_t s = 777;
  for (size_t i = 0; i < N + 8; i++) buf[i] = (unsigned char)tu_xorshift32(&s);
  const size_t lens[] = {1023, 1024, 1025, 1087, 1279, 1280, 1343, 4096 + 200, 12287, 12288, 12289, 12288 + 4095,
                         24576, 24583, 36864, N};
  for (size_t off = 0; off < 8; off += 3)
    for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
      uint32_t a = kvci_crc32c_update(0x1234u, buf + off, lens[k]);
      uint32_t b = kvci_crc32c_update_portable(0x1234u, buf + off, lens[k]);
      if (!CHECK_EQ_U64(a, b)) break;
    }
  free(buf);
}

int main(void) {
  TU_RUN(test_published_vectors);
  TU_RUN(test_long_buffers_agree);
  TU_RUN(test_implementations_agree);
  return tu_finish();
}
