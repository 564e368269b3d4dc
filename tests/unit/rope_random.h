/*
 * tests/unit/rope_random.h: random inputs of the tests of the RoPE
 * operations of sink layers: the CPU backend's (test_internal_cpu_rope.c)
 * and the GPU kernels' arithmetic (gpu_rope/test_gpu_rope.c). A fixed seed,
 * so that a failure repeats.
 */
#ifndef KVCACHE_ROPE_RANDOM_H
#define KVCACHE_ROPE_RANDOM_H

#include <stdint.h>
#include <stdio.h>

#include "../common/xorshift.h"
#include "half.h"

static uint64_t rope_rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t next_u64(void) { return xs64_next(&rope_rng_state); }

static int64_t range(int64_t lo, int64_t hi) { return xs64_range(&rope_rng_state, lo, hi); }

/* A value of `dt` as float32: mostly ordinary numbers, sometimes any bit pattern of the dtype. */
static float random_value(kvc_dtype dt) {
  if (range(0, 7) == 0) {
    uint32_t u = (uint32_t)next_u64();
    if (dt == KVC_DTYPE_FLOAT16) return kvci_f16_to_f32((uint16_t)u);
    if (dt == KVC_DTYPE_BFLOAT16) return kvci_bf16_to_f32((uint16_t)u);
    return kvci_f32_from_bits(u);
  }
  float f = (float)((double)(int64_t)(next_u64() >> 11) / (double)(1ull << 52) - 1.0) * 4.0f;
  return kvci_round_to(dt, f);
}

/*
 * A region of shape sh (sh[3] up to max_dim) to read with element strides
 * st: gaps between rows, a dim of extent 1 sometimes broadcast (stride 0),
 * often one dim read backwards. Returns the elements the region spans;
 * *origin is the offset of element (0, 0, 0, 0) in them.
 */
static int64_t random_read_region(int64_t sh[4], int64_t st[4], int64_t max_dim, int64_t* origin) {
  sh[0] = range(1, 2);
  sh[1] = range(1, 3);
  sh[2] = range(1, 6);
  sh[3] = range(1, max_dim);
  int64_t span = 1;
  for (int i = 3; i >= 0; i--) {
    st[i] = sh[i] == 1 && range(0, 1) ? 0 : span;
    span *= sh[i] + range(0, 1);
  }
  *origin = 0;
  int flip = (int)range(0, 5);
  if (flip < 4) {
    *origin = (sh[flip] - 1) * st[flip];
    st[flip] = -st[flip];
  }
  return span;
}

/* Says where a re-rotation's result first differs from the one it is checked against (`against` names it). */
static void rope_report_mismatch(FILE* log, const char* case_name, kvc_dtype dt, int64_t dim, const int64_t sh[4],
                                 size_t at, const void* got, const void* want, const char* against) {
  fprintf(log, "  dtype %d, rotary size %lld, shape {%lld, %lld, %lld}%s: element %zu is %08x, %s %08x\n", (int)dt,
          (long long)dim, (long long)sh[0], (long long)sh[1], (long long)sh[2], case_name, at,
          (unsigned)kvci_f32_bits(kvci_load_f32(dt, got, (int64_t)at)), against,
          (unsigned)kvci_f32_bits(kvci_load_f32(dt, want, (int64_t)at)));
}

#endif /* KVCACHE_ROPE_RANDOM_H */
