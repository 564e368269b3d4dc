/*
 * core/pool/sha256_x86.c: the SHA-NI compression (see sha256_x86.h).
 *
 * The SHA-NI round instruction works on the state split as {A,B,E,F} and
 * {C,D,G,H}; two rounds per instruction, the two halves trading places
 * after each. The message schedule of FIPS 180-4 (W_t for t >= 16) is
 * sha256msg1 (the sigma0 terms), an add of W_{t-7}, and sha256msg2 (the
 * sigma1 terms), four words at a time. Compiled with target attributes, so
 * the rest of the library keeps the baseline instruction set.
 */
#include "sha256_x86.h"

#include "sha256.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))

#include <cpuid.h>
#include <immintrin.h>

int kvci_sha256_x86_available(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
  int ssse3 = (c >> 9) & 1, sse41 = (c >> 19) & 1;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
  int sha = (b >> 29) & 1;
  return ssse3 && sse41 && sha;
}

__attribute__((target("sha,ssse3,sse4.1"))) void kvci_sha256_x86_compress(uint32_t state[8], const uint8_t* blocks,
                                                                            size_t count) {
  /* Message words are big-endian: swap the bytes of each 32-bit lane. */
  const __m128i bswap = _mm_set_epi64x(0x0c0d0e0f08090a0bLL, 0x0405060700010203LL);
  /* state[0..3] = A B C D, state[4..7] = E F G H (lane 0 first) into ABEF and CDGH, lane 0 the last letter. */
  __m128i abcd = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&state[0]), 0xB1); /* B A D C */
  __m128i efgh = _mm_shuffle_epi32(_mm_loadu_si128((const __m128i*)&state[4]), 0x1B); /* H G F E */
  __m128i abef = _mm_alignr_epi8(abcd, efgh, 8);                                      /* F E B A */
  __m128i cdgh = _mm_blend_epi16(efgh, abcd, 0xF0);                                   /* H G D C */

  for (; count; count--, blocks += 64) {
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[4]; /* W of the last four groups of four rounds, group g at w[g & 3] */
    for (int g = 0; g < 16; g++) {
      if (g < 4) {
        w[g] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i*)(blocks + 16 * g)), bswap);
      } else {
        /* W[4g..4g+3] from groups g-4 (at w[g&3]), g-3, g-2, g-1: W_{t-16} + s0(W_{t-15}) + W_{t-7} + s1(W_{t-2}). */
        __m128i t = _mm_sha256msg1_epu32(w[g & 3], w[(g + 1) & 3]);
        t = _mm_add_epi32(t, _mm_alignr_epi8(w[(g + 3) & 3], w[(g + 2) & 3], 4));
        w[g & 3] = _mm_sha256msg2_epu32(t, w[(g + 3) & 3]);
      }
      __m128i wk = _mm_add_epi32(w[g & 3], _mm_loadu_si128((const __m128i*)&kvci_sha256_k[4 * g]));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, wk); /* rounds 4g, 4g+1: the new ABEF */
      wk = _mm_shuffle_epi32(wk, 0x0E);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, wk); /* rounds 4g+2, 4g+3 */
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
  }

  __m128i feba = _mm_shuffle_epi32(abef, 0x1B); /* lanes: A B E F -> back to A B C D and E F G H */
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128((__m128i*)&state[0], _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128((__m128i*)&state[4], _mm_alignr_epi8(dchg, feba, 8));
}

#else

int kvci_sha256_x86_available(void) { return 0; }

void kvci_sha256_x86_compress(uint32_t state[8], const uint8_t* blocks, size_t count) {
  (void)state;
  (void)blocks;
  (void)count;
}

#endif
