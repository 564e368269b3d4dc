/*
 * core/pool/cbor.c: deterministic CBOR heads and the UTF-8 check (cbor.h).
 */
#include "cbor.h"

#include <string.h>

size_t kvci_cbor_head(uint8_t* out, int major, uint64_t v) {
  uint8_t m = (uint8_t)(major << 5);
  if (v < 24) {
    out[0] = (uint8_t)(m | v);
    return 1;
  }
  int n = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffu ? 4 : 8;
  out[0] = (uint8_t)(m | (n == 1 ? 24 : n == 2 ? 25 : n == 4 ? 26 : 27));
  for (int i = 0; i < n; i++) out[1 + i] = (uint8_t)(v >> (8 * (n - 1 - i)));
  return 1 + (size_t)n;
}

size_t kvci_cbor_int(uint8_t* out, int64_t v) {
  /* CBOR's negative integers hold -1 - v, which for v < 0 is ~v as unsigned. */
  return v >= 0 ? kvci_cbor_head(out, KVCI_CBOR_UINT, (uint64_t)v) : kvci_cbor_head(out, KVCI_CBOR_NINT, ~(uint64_t)v);
}

size_t kvci_cbor_text(uint8_t* out, const void* text, size_t len) {
  size_t n = kvci_cbor_head(out, KVCI_CBOR_TEXT, len);
  if (len) memcpy(out + n, text, len);
  return n + len;
}

int kvci_utf8_valid(const void* s, size_t len) {
  const uint8_t* p = (const uint8_t*)s;
  size_t i = 0;
  while (i < len) {
    uint8_t c = p[i];
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      i++;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return 0;
    }
    if (len - i <= n) return 0;
    for (size_t k = 1; k <= n; k++) {
      if ((p[i + k] & 0xc0) != 0x80) return 0;
      cp = (cp << 6) | (p[i + k] & 0x3f);
    }
    static const uint32_t least[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
    i += n + 1;
  }
  return 1;
}
