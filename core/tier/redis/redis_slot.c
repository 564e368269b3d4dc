/*
 * core/tier/redis/redis_slot.c: where Redis Cluster keeps a key. The slot is
 * CRC16-XMODEM of the key mod 16384, or of the text between the first '{'
 * and the next '}' when that text is not empty (a hash tag). The tier's keys
 * carry no tag, so each block lands in its own slot. Also the parsing of
 * "host:port" node addresses.
 */
#include <stdlib.h>
#include <string.h>

#include "redis_internal.h"

uint16_t kvci_redis_crc16(const void* data, size_t len) {
  const uint8_t* p = data;
  uint16_t crc = 0;
  for (size_t i = 0; i < len; i++) {
    crc ^= (uint16_t)(p[i] << 8);
    for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
  }
  return crc;
}

uint16_t kvci_redis_key_slot(const void* key, size_t len) {
  const char* k = key;
  const char* open = memchr(k, '{', len);
  if (open) {
    size_t start = (size_t)(open - k) + 1;
    const char* close = memchr(open + 1, '}', len - start);
    if (close && close > open + 1) return kvci_redis_crc16(open + 1, (size_t)(close - open - 1)) & 16383;
  }
  return kvci_redis_crc16(k, len) & 16383;
}

int kvci_redis_parse_address(const char* s, size_t len, char* host, size_t cap, uint16_t* port) {
  const char* colon = NULL;
  const char* h = s;
  size_t hlen;
  if (len > 0 && s[0] == '[') {
    const char* end = memchr(s, ']', len);
    if (!end || (size_t)(end - s) + 1 >= len || end[1] != ':') return -1;
    h = s + 1;
    hlen = (size_t)(end - s) - 1;
    colon = end + 1;
  } else {
    for (size_t i = len; i > 0; i--)
      if (s[i - 1] == ':') {
        colon = s + i - 1;
        break;
      }
    if (!colon) return -1;
    hlen = (size_t)(colon - s);
    if (memchr(s, ':', hlen)) return -1; /* an IPv6 address needs brackets */
  }
  size_t plen = len - (size_t)(colon + 1 - s);
  if (hlen == 0 || hlen >= cap || hlen > KVCI_REDIS_HOST_MAX || plen == 0 || plen > 5) return -1;
  unsigned long p = 0;
  for (size_t i = 0; i < plen; i++) {
    char ch = colon[1 + i];
    if (ch < '0' || ch > '9') return -1;
    p = p * 10 + (unsigned long)(ch - '0');
  }
  if (p == 0 || p > 65535) return -1;
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = (uint16_t)p;
  return 0;
}
