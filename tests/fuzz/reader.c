/*
 * reader.c: see reader.h.
 */
#include "reader.h"

uint8_t rd(reader* r) { return r->i < r->n ? r->p[r->i++] : 0; }

int64_t rd_range(reader* r, int64_t lo, int64_t hi) {
  return lo + (int64_t)(rd(r) % (uint64_t)(hi - lo + 1));
}

int rare(reader* r, int n) { return rd(r) % n == (uint8_t)(n - 1); }
