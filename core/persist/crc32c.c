/* core/persist/crc32c.c: CRC-32C, an 8-slice table and, on x86-64, the SSE 4.2 instruction in three lanes (crc32c.h). */
#include "crc32c.h"

#include <pthread.h>
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif
#include <stdatomic.h>
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
/*
 * The crc32 instruction has a latency of 3 cycles and a throughput of 1: one chain of it runs at a third of what
 * the core can do, below a memory copy's bandwidth (a restore then checksums slower than it reads). So a long
 * buffer is cut into segments of three lanes of LANE bytes, each lane its own chain, and the three registers are
 * combined: the raw register is linear, R(r, A || B) = Z(R(r, A), |B|) ^ R(0, B), where Z(r, n) is r after n zero
 * bytes, itself linear in r and so four table lookups (`zeros`, made once from the instruction).
 */
#define LANE 4096u
static uint32_t zeros[4][256]; /* Z(b << 8k, LANE) for each byte b of the register */
static pthread_once_t zeros_once = PTHREAD_ONCE_INIT;

__attribute__((target("sse4.2"))) static uint32_t zero_bytes(uint32_t r, size_t n) {
  uint64_t c = r;
  for (; n >= 8; n -= 8) c = __builtin_ia32_crc32di(c, 0);
  return (uint32_t)c;
}

__attribute__((target("sse4.2"))) static void make_zeros(void) {
  uint32_t basis[32];
  for (int b = 0; b < 32; b++) basis[b] = zero_bytes(1u << b, LANE);
  for (int k = 0; k < 4; k++)
    for (uint32_t v = 0; v < 256; v++) {
      uint32_t z = 0;
      for (int b = 0; b < 8; b++)
        if (v >> b & 1) z ^= basis[8 * k + b];
      zeros[k][v] = z;
    }
}

static uint32_t shift_lane(uint32_t r) {
  return zeros[0][r & 0xFF] ^ zeros[1][r >> 8 & 0xFF] ^ zeros[2][r >> 16 & 0xFF] ^ zeros[3][r >> 24];
}

/* One 8-byte crc32 per cycle of throughput; memcpy keeps unaligned loads defined. */
__attribute__((target("sse4.2"))) static uint32_t update_sse42(uint32_t crc, const void* data, size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  uint64_t c = (uint32_t)~crc;
  if (n >= 3 * LANE) pthread_once(&zeros_once, make_zeros);
  for (; n >= 3 * LANE; n -= 3 * LANE, p += 3 * LANE) {
    uint64_t c1 = 0, c2 = 0;
    for (size_t i = 0; i < LANE; i += 8) {
      uint64_t w0, w1, w2;
      memcpy(&w0, p + i, 8);
      memcpy(&w1, p + LANE + i, 8);
      memcpy(&w2, p + 2 * LANE + i, 8);
      c = __builtin_ia32_crc32di(c, w0);
      c1 = __builtin_ia32_crc32di(c1, w1);
      c2 = __builtin_ia32_crc32di(c2, w2);
    }
    c = shift_lane(shift_lane((uint32_t)c) ^ (uint32_t)c1) ^ (uint32_t)c2;
  }
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
  }
  uint32_t c32 = (uint32_t)c;
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return ~c32;
}

/*
 * Even three chains of the crc32 instruction run at 8 bytes a cycle, about a third of a copy's pace (a tier get
 * spent a third of its copy's time on the check). Where the core has VPCLMULQDQ (AVX-512), a long buffer is
 * folded instead, 256 bytes a step into four 512-bit accumulators: each 128-bit lane X becomes
 * lo(X) * k(d + 32) ^ hi(X) * k(d - 32) ^ the bytes d bits further on, carry-less, where k(e) is x^e mod P
 * bit-reflected and shifted left by one; X then stays congruent (mod P) to everything folded into it, so the CRC
 * of the folded 16 bytes followed by the rest is the buffer's. The initial register is XORed into the first 4
 * bytes; the last 16 folded bytes and the tail go through the instruction. Constants for d = 2048 (a step),
 * 512 (one accumulator into the next), and 384, 256, 128 (lanes 0..2 into lane 3).
 */
#define FOLD_MIN 1024u /* shorter buffers are not worth the set-up */
#define FOLD_K(lo, hi) _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo)

__attribute__((target("avx512f,vpclmulqdq"))) static __m512i fold512(__m512i x, __m512i k, __m512i next) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00), _mm512_clmulepi64_epi128(x, k, 0x11),
                                   next, 0x96); /* a ^ b ^ c */
}

__attribute__((target("avx512f,vpclmulqdq,sse4.2"))) static uint32_t update_fold(uint32_t crc, const void* data,
                                                                                 size_t n) {
  const unsigned char* p = (const unsigned char*)data;
  const __m512i k2048 = FOLD_K(0xdcb17aa4, 0xb9e02b86), k512 = FOLD_K(0x740eef02, 0x9e4addf8);
  const __m512i lanes = _mm512_set_epi64(0, 0, 0x14cd00bd6, 0xf20c0dfe, 0xba4fc28e, 0x1384aa63a, 0x1d82c63da,
                                         0x1c291d04);
  __m512i x0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, (uint32_t)~crc));
  __m512i x1 = _mm512_loadu_si512(p + 64), x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
  for (p += 256, n -= 256; n >= 256; n -= 256, p += 256) {
    x0 = fold512(x0, k2048, _mm512_loadu_si512(p));
    x1 = fold512(x1, k2048, _mm512_loadu_si512(p + 64));
    x2 = fold512(x2, k2048, _mm512_loadu_si512(p + 128));
    x3 = fold512(x3, k2048, _mm512_loadu_si512(p + 192));
  }
  x3 = fold512(fold512(fold512(x0, k512, x1), k512, x2), k512, x3);
  for (; n >= 64; n -= 64, p += 64) x3 = fold512(x3, k512, _mm512_loadu_si512(p));
  __m512i f = _mm512_xor_si512(_mm512_clmulepi64_epi128(x3, lanes, 0x00), _mm512_clmulepi64_epi128(x3, lanes, 0x11));
  __m128i x = _mm_xor_si128(_mm_xor_si128(_mm512_extracti32x4_epi32(f, 0), _mm512_extracti32x4_epi32(f, 1)),
                            _mm_xor_si128(_mm512_extracti32x4_epi32(f, 2), _mm512_extracti32x4_epi32(x3, 3)));
  uint64_t lo = (uint64_t)_mm_cvtsi128_si64(x), hi = (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x));
  uint32_t c = (uint32_t)__builtin_ia32_crc32di(__builtin_ia32_crc32di(0, lo), hi);
  return update_sse42(~c, p, n);
}

uint32_t kvci_crc32c_update(uint32_t crc, const void* data, size_t n) {
  static _Atomic int hw = -1; /* every thread finds the same answer: 0 none, 1 SSE 4.2, 2 and VPCLMULQDQ */
  int have = atomic_load_explicit(&hw, memory_order_relaxed);
  if (have < 0) {
    have = !__builtin_cpu_supports("sse4.2")                                                 ? 0
           : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") ? 2
                                                                                          : 1;
    atomic_store_explicit(&hw, have, memory_order_relaxed);
  }
  if (have == 2 && n >= FOLD_MIN) return update_fold(crc, data, n);
  return have ? update_sse42(crc, data, n) : kvci_crc32c_update_portable(crc, data, n);
}
#else
uint32_t kvci_crc32c_update(uint32_t crc, const void* data, size_t n) {
  return kvci_crc32c_update_portable(crc, data, n);
}
#endif
