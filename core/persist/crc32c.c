/* core/persist/crc32c.c: CRC-32C, an 8-slice table and, on x86-64, the SSE 4.2 instruction (crc32c.h). */
#include "crc32c.h"

#include <string.h>

#define POLY 0x82F63B78u /* Castagnoli, reflected */

static uint32_t table[8][256];
static int table_ready; /* benign race: every thread computes the same table */

static void make_table(void) {
  for (uint32_t n = 0; n < 256; n++) {
    uint32_t c = n;
    for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
    table[0][n] = c;
  }
  for (uint32_t n = 0; n < 256; n++)
    for (int s = 1; s < 8; s++) table[s][n] = (table[s - 1][n] >> 8) ^ table[0][table[s - 1][n] & 0xFF];
  table_ready = 1;
}

/* Little-endian load (the slices assume the first byte in the low bits). */
static uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

uint32_t kvci_crc32c_update_portable(uint32_t crc, const void* data, size_t n) {
  if (!table_ready) make_table();
  const unsigned char* p = (const unsigned char*)data;
  uint32_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w = load_le64(p) ^ c;
    c = table[7][w & 0xFF] ^ table[6][(w >> 8) & 0xFF] ^ table[5][(w >> 16) & 0xFF] ^ table[4][(w >> 24) & 0xFF] ^
        table[3][(w >> 32) & 0xFF] ^ table[2][(w >> 40) & 0xFF] ^ table[1][(w >> 48) & 0xFF] ^
        table[0][(w >> 56) & 0xFF];
  }
  while (n--) c = (c >> 8) ^ table[0][(c ^ *p++) & 0xFF];
  return ~c;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* One 8-byte crc32 per cycle of throughput; memcpy keeps unaligned loads defined. */
__attribute__((target("sse4.2"))) static uint32_t update_sse42(uint32_t crc, const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t c = ~crc;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

uint32_t kvci_crc32c_update(uint32_t crc, const void* data, size_t n) {
  static int hw = -1; /* benign race: every thread finds the same answer */
  if (hw < 0) hw = __builtin_cpu_supports("sse4.2") ? 1 : 0;
  return hw ? update_sse42(crc, data, n) : kvci_crc32c_update_portable(crc, data, n);
}
#else
uint32_t kvci_crc32c_update(uint32_t crc, const void* data, size_t n) {
  return kvci_crc32c_update_portable(crc, data, n);
}
#endif
