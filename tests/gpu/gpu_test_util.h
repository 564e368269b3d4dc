/*
 * tests/gpu/gpu_test_util.h: what the device tests share on top of
 * tests/unit/test_util.h (checks, runner): opening the device runtime or
 * skipping, a reproducible random source, and reading any tensor (device
 * memory, the host tier or CPU memory) back into a compact host buffer.
 * Static functions: include it from exactly one translation unit per test.
 */
#ifndef KVC_TESTS_GPU_TEST_UTIL_H
#define KVC_TESTS_GPU_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_runtime.h"
#include "test_util.h"

/* Opens the runtime; without a device the program prints SKIPPED and why, and exits with CTest's skip code. */
static TU_UNUSED void gt_open_or_skip(const char* program) {
  char why[600] = "";
  drt_status st = drt_open(why, sizeof why);
  if (st == DRT_SKIP) {
    printf("SKIPPED: %s (%s runtime): %s\n", program, drt_name(), why);
    fflush(stdout);
    exit(DRT_SKIP_EXIT);
  }
  if (st != DRT_READY) {
    printf("FAILED: %s (%s runtime) cannot start: %s\n", program, drt_name(), why);
    fflush(stdout);
    exit(1);
  }
  printf("%s: %s runtime, %d device(s)\n", program, drt_name(), drt_device_count());
}

/* ------------------------------------------------------------ random */

static uint64_t gt_rng_state = UINT64_C(0x853c49e6748fea9b);

static TU_UNUSED uint64_t gt_next(void) {
  /* xorshift64*: fixed seed, so every failure replays */
  gt_rng_state ^= gt_rng_state >> 12;
  gt_rng_state ^= gt_rng_state << 25;
  gt_rng_state ^= gt_rng_state >> 27;
  return gt_rng_state * UINT64_C(2685821657736338717);
}

/* Uniform in [lo, hi]. */
static TU_UNUSED int64_t gt_range(int64_t lo, int64_t hi) {
  return lo + (int64_t)(gt_next() % (uint64_t)(hi - lo + 1));
}

static TU_UNUSED void gt_fill_random(void* p, size_t n) {
  unsigned char* b = (unsigned char*)p;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(gt_next() >> 56);
}

/* ------------------------------------------------------ reading back */

static TU_UNUSED int gt_is_device_tensor(const kvc_tensor* t) {
  return t->device.device_type == drt_device_type() || t->device.device_type == drt_host_device_type();
}

/* Bytes of one element of a kvc tensor (lanes are always 1 here). */
static TU_UNUSED size_t gt_elem(const kvc_tensor* t) { return (size_t)t->dtype.bits / 8u; }

static TU_UNUSED int64_t gt_numel(const kvc_tensor* t) {
  int64_t n = 1;
  for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

/*
 * The elements of `t` in row-major order, compact, in a malloc'd buffer
 * (*nbytes bytes; NULL with 0 for an empty tensor). Device and host-tier
 * tensors are read through the runtime after all work issued so far; the
 * bytes spanned by the view are read in one copy, then gathered.
 */
static TU_UNUSED unsigned char* gt_read_tensor(const kvc_tensor* t, size_t* nbytes) {
  *nbytes = 0;
  int64_t n = gt_numel(t);
  if (n <= 0) return NULL;
  size_t elem = gt_elem(t);
  int nd = t->ndim;
  int64_t st[8];
  int64_t run = 1;
  for (int i = nd - 1; i >= 0; i--) {
    st[i] = t->strides ? t->strides[i] : run;
    run *= t->shape[i];
  }
  /* Strides may be negative (a view read backwards) or zero: the span runs from the lowest to the highest element. */
  int64_t first = 0, last = 0;
  for (int i = 0; i < nd; i++) {
    int64_t reach = (t->shape[i] - 1) * st[i];
    if (reach < 0)
      first += reach;
    else
      last += reach;
  }
  size_t span = (size_t)(last - first + 1) * elem;
  const unsigned char* origin = (const unsigned char*)t->data + t->byte_offset;
  const unsigned char* base = origin + first * (int64_t)elem;
  unsigned char* staged = NULL;
  if (gt_is_device_tensor(t)) {
    staged = (unsigned char*)malloc(span);
    if (!staged || drt_download(t->device.device_id, staged, base, span)) {
      fprintf(stderr, "gt_read_tensor: reading %zu bytes of device %d back failed: %s\n", span,
              (int)t->device.device_id, drt_error());
      free(staged);
      return NULL;
    }
    base = staged;
  }
  unsigned char* out = (unsigned char*)malloc((size_t)n * elem);
  int64_t idx[8] = {0};
  for (int64_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int i = 0; i < nd; i++) off += idx[i] * st[i];
    memcpy(out + (size_t)k * elem, base + (off - first) * (int64_t)elem, elem);
    for (int i = nd - 1; i >= 0; i--) {
      if (++idx[i] < t->shape[i]) break;
      idx[i] = 0;
    }
  }
  free(staged);
  *nbytes = (size_t)n * elem;
  return out;
}

#endif /* KVC_TESTS_GPU_TEST_UTIL_H */
