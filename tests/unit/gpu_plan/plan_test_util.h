/*
 * tests/unit/gpu_plan/plan_test_util.h: what the GPU planning tests share:
 * a check that counts failures and goes on, a seeded random sequence, and
 * the bytes a strided region spans. Static: include it from one file per
 * test program.
 */
#ifndef KVC_TESTS_PLAN_TEST_UTIL_H
#define KVC_TESTS_PLAN_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "../../common/xorshift.h"

static int failures = 0;
#define CHECK(cond, ...)                                          \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "%s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      failures++;                                                 \
    }                                                             \
  } while (0)

/* main's result: 1 after a line counting the failed checks, 0 after one saying that all passed. */
static int plan_finish(const char* program) {
  if (failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", program, failures);
    return 1;
  }
  printf("%s: all checks passed\n", program);
  return 0;
}

/* xorshift64: the same cases on every run. */
static uint64_t rng = 0x9e3779b97f4a7c15u;
static inline uint64_t next_rand(void) { return xs64_next(&rng); }
static inline int64_t rand_in(int64_t lo, int64_t hi) { return xs64_range(&rng, lo, hi); }

/* Bytes from element [0, 0, 0, 0] to the end of the last element (non-negative strides). */
static size_t extent_bytes(const int64_t st[4], const int64_t shape[4], int64_t elem) {
  int64_t last = 0;
  for (int i = 0; i < 4; i++) last += (shape[i] - 1) * st[i];
  return (size_t)((last + 1) * elem);
}

#endif /* KVC_TESTS_PLAN_TEST_UTIL_H */
