/* core/persist/record.c: records of little-endian int64 values and float32 runs (record.h). */
#include "record.h"

#include <stdlib.h>
#include <string.h>

#include "format.h"

static unsigned char* grow(kvci_record* r, size_t n) {
  if (r->failed) return NULL;
  if (r->len + n > r->cap) {
    size_t cap = r->cap ? r->cap : 256;
    while (cap < r->len + n) cap *= 2;
    unsigned char* p = (unsigned char*)realloc(r->bytes, cap);
    if (!p) {
      r->failed = 1;
      return NULL;
    }
    r->bytes = p;
    r->cap = cap;
  }
  unsigned char* at = r->bytes + r->len;
  r->len += n;
  return at;
}

void kvci_rec_i64(kvci_record* r, int64_t v) {
  unsigned char* p = grow(r, 8);
  if (p) kvcf_put64(p, (uint64_t)v);
}

void kvci_rec_f32s(kvci_record* r, const float* v, int64_t n) {
  unsigned char* p = n > 0 ? grow(r, (size_t)n * 4) : NULL;
  for (int64_t i = 0; p && i < n; i++) {
    uint32_t bits;
    memcpy(&bits, &v[i], 4);
    kvcf_put32(p + 4 * i, bits);
  }
}

void kvci_rec_bytes(kvci_record* r, const void* v, size_t n) {
  unsigned char* p = n ? grow(r, n) : NULL;
  if (p) memcpy(p, v, n);
}

void kvci_rec_free(kvci_record* r) {
  free(r->bytes);
  memset(r, 0, sizeof *r);
}

int kvci_rec_get_i64(kvci_record_reader* r, int64_t* out) {
  if (r->len - r->at < 8) return -1;
  *out = (int64_t)kvcf_get64(r->bytes + r->at);
  r->at += 8;
  return 0;
}

int kvci_rec_get_range(kvci_record_reader* r, int64_t lo, int64_t hi, int64_t* out) {
  int64_t v;
  if (kvci_rec_get_i64(r, &v) || v < lo || v > hi) return -1;
  *out = v;
  return 0;
}

int kvci_rec_get_f32s(kvci_record_reader* r, float* out, int64_t n) {
  if (n < 0 || (uint64_t)n > (r->len - r->at) / 4) return -1;
  for (int64_t i = 0; i < n; i++) {
    uint32_t bits = kvcf_get32(r->bytes + r->at + 4 * i);
    memcpy(&out[i], &bits, 4);
  }
  r->at += (size_t)n * 4;
  return 0;
}

int kvci_rec_get_bytes(kvci_record_reader* r, const unsigned char** out, size_t n) {
  if (r->len - r->at < n) return -1;
  *out = r->bytes + r->at;
  r->at += n;
  return 0;
}
