/*
 * reader.h: how a fuzz target reads its input bytes, front to back (zeros
 * once they run out, so an input that ends early means the ordinary
 * choices).
 */
#ifndef KVC_FUZZ_READER_H
#define KVC_FUZZ_READER_H

#include <stddef.h>
#include <stdint.h>

typedef struct reader {
  const uint8_t* p;
  size_t n, i;
} reader;

uint8_t rd(reader* r);
/* A value in [lo, hi]. */
int64_t rd_range(reader* r, int64_t lo, int64_t hi);
/* True once in `n` bytes, never for byte 0: an input that runs out of bytes reads zeros, which must mean the
 * ordinary choice, not a fault. */
int rare(reader* r, int n);

#endif /* KVC_FUZZ_READER_H */
