/*
 * backends/cpu/quant_pack.c: bit packing of quantized codes (quantize.h). Code i
 * takes bits [i*nbits, (i+1)*nbits) of a little-endian bit stream: byte j
 * holds bits 8j .. 8j+7, lowest first. The format is ours (it never leaves
 * the cache), so it is chosen to be dense for every nbits, 3 included.
 */
#include <string.h>

#include "quantize.h"

size_t kvci_packed_bytes(int64_t n, int nbits) { return (size_t)((n * nbits + 7) / 8); }

void kvci_pack_codes(const uint8_t* codes, int64_t n, int nbits, uint8_t* out) {
  const unsigned mask = (1u << nbits) - 1u;
  if (nbits == 8) {
    memcpy(out, codes, (size_t)n);
  } else if (8 % nbits == 0) {
    const int per_byte = 8 / nbits;
    int64_t j = 0, i = 0;
    for (; i + per_byte <= n; j++) {
      unsigned b = 0;
      for (int k = 0; k < per_byte; k++, i++) b |= (codes[i] & mask) << (k * nbits);
      out[j] = (uint8_t)b;
    }
    if (i < n) {
      unsigned b = 0;
      for (int k = 0; i < n; k++, i++) b |= (codes[i] & mask) << (k * nbits);
      out[j] = (uint8_t)b;
    }
  } else {
    uint32_t acc = 0;
    int held = 0;
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
      acc |= (uint32_t)(codes[i] & mask) << held;
      held += nbits;
      while (held >= 8) {
        out[j++] = (uint8_t)acc;
        acc >>= 8;
        held -= 8;
      }
    }
    if (held > 0) out[j] = (uint8_t)acc;
  }
}

/* The codes of `bytes` whole bytes; called with a constant nbits, so that the shifts are constants and the loop
 * vectorizes (compact layers unpack their whole history on every step). */
static inline void unpack_whole_bytes(const uint8_t* in, int64_t bytes, int nbits, uint8_t* codes) {
  const int per_byte = 8 / nbits;
  const unsigned mask = (1u << nbits) - 1u;
  for (int64_t j = 0; j < bytes; j++)
    for (int k = 0; k < per_byte; k++) codes[j * per_byte + k] = (uint8_t)((in[j] >> (k * nbits)) & mask);
}

void kvci_unpack_codes(const uint8_t* in, int64_t n, int nbits, uint8_t* codes) {
  const unsigned mask = (1u << nbits) - 1u;
  if (nbits == 8) {
    memcpy(codes, in, (size_t)n);
  } else if (8 % nbits == 0) {
    const int per_byte = 8 / nbits;
    const int64_t whole = n / per_byte;
    if (nbits == 4)
      unpack_whole_bytes(in, whole, 4, codes);
    else if (nbits == 2)
      unpack_whole_bytes(in, whole, 2, codes);
    else
      unpack_whole_bytes(in, whole, 1, codes);
    for (int64_t i = whole * per_byte; i < n; i++)
      codes[i] = (uint8_t)((in[i / per_byte] >> ((i % per_byte) * nbits)) & mask);
  } else {
    uint32_t acc = 0;
    int held = 0;
    int64_t j = 0;
    for (int64_t i = 0; i < n; i++) {
      if (held < nbits) {
        acc |= (uint32_t)in[j++] << held;
        held += 8;
      }
      codes[i] = (uint8_t)(acc & mask);
      acc >>= nbits;
      held -= nbits;
    }
  }
}
