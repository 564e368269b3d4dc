/*
 * xorshift.h: the tests' reproducible pseudo-random numbers, one xorshift64
 * step of a state the caller keeps (each file its own state and seed, so its
 * inputs do not depend on other files). Header-only and without the unit
 * harness, for the programs that have their own checks (GPU planning, RoPE).
 */
#ifndef KVC_TESTS_XORSHIFT_H
#define KVC_TESTS_XORSHIFT_H

#include <stdint.h>

static inline uint64_t xs64_next(uint64_t* state) {
  *state ^= *state << 13;
  *state ^= *state >> 7;
  *state ^= *state << 17;
  return *state;
}

/* A number from lo to hi, both included. */
static inline int64_t xs64_range(uint64_t* state, int64_t lo, int64_t hi) {
  return lo + (int64_t)(xs64_next(state) % (uint64_t)(hi - lo + 1));
}

#endif /* KVC_TESTS_XORSHIFT_H */
