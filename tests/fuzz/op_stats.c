/*
 * op_stats.c: the operations of a target that draws them by weight (fuzz_kinds.c, fuzz_pool.c): the draw, and
 * how often each succeeded and failed, printed after a standalone run: inputs that make every call fail would
 * test little. The target sets g_op to the operation it runs and calls count_result with each call's code.
 */
#include <stdint.h>
#include <stdio.h>

#include "kvcache.h"

#define OPS_MAX 64 /* operations a target may count */

static long g_ok[OPS_MAX], g_err[OPS_MAX];
static int g_op; /* the operation running, for the statistics */

/* Operation i with probability weights[i] / (their sum), from one input byte. */
static int ops_draw(const uint8_t* weights, int count, uint8_t b) {
  int total = 0;
  for (int i = 0; i < count; i++) total += weights[i];
  int x = b % total;
  for (int i = 0; i < count; i++) {
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  return 0;
}

static void count_result(kvc_code code) {
  if (code == KVC_OK)
    g_ok[g_op]++;
  else
    g_err[g_op]++;
}

#ifdef KVC_FUZZ_STANDALONE
/* The table of successes and failures of `count` operations, their names in a column `width` wide. */
static void ops_print_counts(const char* const* names, int count, int width) {
  printf("%-*s %10s %10s\n", width, "operation", "succeeded", "failed");
  for (int i = 0; i < count; i++) printf("%-*s %10ld %10ld\n", width, names[i], g_ok[i], g_err[i]);
}
#endif
