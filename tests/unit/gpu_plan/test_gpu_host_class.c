/*
 * tests/unit/gpu_plan/test_gpu_host_class.c: the size classes of the GPU
 * backend's pinned host buffers (backends/gpu/gpu_host_class.h), on the CPU.
 *
 * A class holds every request it is given, wastes at most a quarter of it,
 * and grows with the request; and, counted here without a GPU, a serving
 * loop whose host-tier requests vary from step to step needs a pinned
 * allocation per class it touches, not per size it asks for (what the
 * plugin's exact-size reuse needed before).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_host_class.h"
#include "plan_test_util.h"

static void test_bounds(void) {
  size_t prev = 0;
  for (size_t bytes = 1; bytes <= ((size_t)1 << 22); bytes += 1 + bytes / 97) {
    const size_t c = kvc_gpu_host_class(bytes);
    CHECK(c >= bytes, "class %zu of %zu bytes is smaller than the request", c, bytes);
    CHECK(c >= prev, "classes shrink: %zu bytes get %zu after %zu", bytes, c, prev);
    if (bytes > KVC_GPU_HOST_CLASS_MIN)
      CHECK((c - bytes) * 4 <= bytes, "class %zu wastes more than a quarter of %zu bytes", c, bytes);
    else
      CHECK(c == KVC_GPU_HOST_CLASS_MIN, "%zu bytes: class %zu, not the smallest", bytes, c);
    CHECK(kvc_gpu_host_class(c) == c, "class %zu is not its own class", c);
    prev = c;
  }
  /* Four classes per doubling above the smallest. */
  int classes = 0;
  for (size_t bytes = ((size_t)1 << 20) + 1; bytes <= ((size_t)1 << 21); bytes++) {
    const size_t c = kvc_gpu_host_class(bytes);
    if (c != kvc_gpu_host_class(bytes - 1)) classes++;
  }
  CHECK(classes == 4, "%d classes between 1 MiB and 2 MiB, not 4", classes);
  CHECK(kvc_gpu_host_class(SIZE_MAX) == 0, "SIZE_MAX has no class");
  CHECK(kvc_gpu_host_class(((size_t)1 << 62) + 1) == ((size_t)5 << 60), "2^62 + 1 bytes: class 1.25 x 2^62");
}

/* Distinct values among n sizes. */
static int distinct(const size_t* v, int n) {
  int d = 0;
  for (int i = 0; i < n; i++) {
    int seen = 0;
    for (int j = 0; j < i && !seen; j++) seen = v[j] == v[i];
    d += !seen;
  }
  return d;
}

/* RoPE tables of a sink cache whose window shift varies (rows 1 .. 4096 of head_dim 128, cos and sin), and
   offloaded stores of a growing cache: distinct exact sizes (buffers pinned by exact-size reuse) vs classes. */
static void test_reuse_counts(void) {
  enum { STEPS = 2000 };
  static size_t exact[STEPS], cls[STEPS];
  for (int i = 0; i < STEPS; i++) {
    exact[i] = (size_t)rand_in(1, 4096) * 128 * 2 * sizeof(float);
    cls[i] = kvc_gpu_host_class(exact[i]);
  }
  const int e = distinct(exact, STEPS), c = distinct(cls, STEPS);
  printf("  %d RoPE table uploads of random lengths: %d sizes (exact-size reuse), %d classes\n", STEPS, e, c);
  /* 1 KiB to 4 MiB: the smallest class, then four per doubling from 4 KiB to 4 MiB */
  CHECK(c <= 1 + 4 * 10 && c < e / 10, "%d classes for %d sizes", c, e);
  /* A 32-layer store of 8 heads x 128 dims x bf16 per token, K and V, growing by 256 tokens to 32k tokens. */
  int n = 0;
  for (size_t tokens = 256; tokens <= 32768; tokens += 256) {
    exact[n] = tokens * 8 * 128 * 2;
    cls[n] = kvc_gpu_host_class(exact[n]);
    n++;
  }
  const int ge = distinct(exact, n), gc = distinct(cls, n);
  printf("  a store growing by 256 tokens to 32k: %d sizes, %d classes\n", ge, gc);
  CHECK(gc < ge, "growth: %d classes for %d sizes", gc, ge);
}

int main(void) {
  printf("test_gpu_host_class: size classes of the GPU backend's pinned host buffers\n");
  test_bounds();
  test_reuse_counts();
  return plan_finish("test_gpu_host_class");
}
