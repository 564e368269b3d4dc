/*
 * tests/unit/gpu_rope/test_gpu_rope.c: the arithmetic of the GPU kernels of
 * sink layers (backends/gpu/gpu_rope.h) on the CPU, against the CPU backend
 * (backends/cpu/cpu_rope.c), bit for bit.
 *
 * The kernels are run as a simulated grid (tests/gpu/simulated_rope_grid.h):
 * every thread of every block runs the item function the kernel calls, on
 * the item indices the kernel's grid-stride loop gives it, with the grid
 * the backend launches and with smaller grids whose threads take several
 * items; also split by seq rows as the backend's launches by value split a
 * large table. Keys are random bits (NaNs, infinities, subnormals), tables
 * rounded to the key dtype as the core passes them. The conversions are
 * checked against the core's (abi/backend/half.h) on every float16 value and
 * on every float32 near a rounding boundary; NaN results are the canonical
 * NaN, which is what makes the bits equal across hardware and compilers.
 */
#include <stdint.h>

#include "backend.h"
#include "half.h"
#include "rope_random.h"
#include "simulated_rope_grid.h"
#include "test_util.h"

static const kvc_dtype dtypes[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
static const kvc_exec cpu_place = {0, NULL, NULL};

/* ------------------------------------------------------------ conversions */

static void test_f16_to_f32_every_value(void) {
  long bad = 0;
  for (uint32_t h = 0; h < 65536; h++)
    bad += kvc_gpu_f16_bits_to_f32(h) != kvci_f32_bits(kvci_f16_to_f32((uint16_t)h));
  CHECK_EQ_I64(bad, 0);
}

/* Every float32 whose low bits are `low` (any sign, exponent and high mantissa bits): the rounding boundaries. */
static void check_roundings(uint32_t low_bits, uint32_t low) {
  long bad16 = 0, bad_store = 0, bad_bf16 = 0;
  for (uint64_t hi = 0; hi < (UINT64_C(1) << (32 - low_bits)); hi++) {
    uint32_t u = (uint32_t)(hi << low_bits) | low;
    float f = kvci_f32_from_bits(u);
    /* The core's roundings, except that a NaN becomes the canonical NaN (gpu_rope.h). */
    int nan = f != f;
    uint32_t r16 = kvc_gpu_round_f16(u);
    bad16 += r16 != (nan ? KVC_GPU_CANONICAL_NAN : kvci_f32_bits(kvci_f16_to_f32(kvci_f32_to_f16(f))));
    bad_store += kvc_gpu_f16_of_exact(r16) != kvci_f32_to_f16(kvci_f32_from_bits(r16));
    bad_bf16 += kvc_gpu_round_bf16(u) != (nan ? KVC_GPU_CANONICAL_NAN : kvci_f32_bits(kvci_round_to_bf16(f)));
  }
  if (!CHECK_EQ_I64(bad16 + bad_store + bad_bf16, 0))
    fprintf(TU_LOG, "  low bits %#x: float16 rounding %ld, float16 store %ld, bfloat16 rounding %ld wrong\n", low, bad16,
            bad_store, bad_bf16);
}

static void test_roundings_at_boundaries(void) {
  /* float16 keeps 10 of float32's 23 mantissa bits (13 dropped), at 2^-14 and below fewer: ties, neighbours. */
  static const uint32_t low13[] = {0, 1, 0xfff, 0x1000, 0x1001, 0x1fff};
  for (size_t i = 0; i < sizeof low13 / sizeof low13[0]; i++) check_roundings(13, low13[i]);
  /* bfloat16 drops 16; subnormal float16 values drop up to 24, reached through the high bits enumerated above. */
  static const uint32_t low16[] = {0x7fff, 0x8000, 0x8001, 0xffff};
  for (size_t i = 0; i < sizeof low16 / sizeof low16[0]; i++) check_roundings(16, low16[i]);
  for (int i = 0; i < 2000000; i++) check_roundings(32, (uint32_t)next_u64());
}

/* A NaN anywhere in a channel's arithmetic comes out as the canonical NaN, whichever NaN the operations returned. */
static void test_nan_results_are_canonical(void) {
  static const uint32_t special[] = {0x7fc00001u, 0xffa00002u, 0x7f800001u, 0x7f800000u, 0xff800000u,
                                     0,           0x80000000u, 0x3f800000u, 0x00000001u, 0x7f7fffffu};
  const size_t n = sizeof special / sizeof special[0];
  long nans = 0, bad = 0;
  for (int d = 0; d < 3; d++)
    for (size_t i = 0; i < n * n * n * n; i++) {
      float v[4];
      for (size_t k = 0, at = i; k < 4; k++, at /= n) v[k] = kvci_f32_from_bits(special[at % n]);
      uint32_t out = kvc_gpu_rotated(dtypes[d], v[0], v[1], v[2], v[3]);
      if (kvc_gpu_is_nan(out)) {
        nans++;
        bad += out != KVC_GPU_CANONICAL_NAN;
      }
    }
  CHECK(nans > 0);
  CHECK_EQ_I64(bad, 0);
}

/* ------------------------------------------------------------ the kernels */

/* How the simulated launch runs: one grid as the backend sizes it, a small grid, or by-value parts of rows. */
enum launch { LAUNCH_GRID, LAUNCH_SMALL_GRID, LAUNCH_ROW_PARTS, LAUNCHES };

static void simulate(enum launch how, const kvc_gpu_rope* r, const float* rc, const float* rs) {
  if (how == LAUNCH_GRID) {
    kvc_sim_rerotate(r, rc, rs, kvc_gpu_rope_grid(kvc_gpu_rope_items(r)));
  } else if (how == LAUNCH_SMALL_GRID) {
    kvc_sim_rerotate(r, rc, rs, (uint32_t)range(1, 3)); /* threads take several items each */
  } else {
    int32_t per = (int32_t)range(1, 3);
    for (int32_t j0 = 0; j0 < r->n[2]; j0 += per) {
      kvc_gpu_rope part = kvc_gpu_rope_rows(r, j0, r->n[2] - j0 < per ? r->n[2] - j0 : per);
      kvc_sim_rerotate(&part, rc + (int64_t)j0 * r->dim, rs + (int64_t)j0 * r->dim, kvc_gpu_rope_grid(kvc_gpu_rope_items(&part)));
    }
  }
}

/* Random keys (padded rows, gaps between heads, batch and heads in either order) rotated by both: every byte equal. */
static void one_rerotation(kvc_dtype dt, int64_t dim, enum launch how) {
  const kvc_backend* cpu = kvci_cpu_backend();
  int64_t sh[4] = {range(1, 3), range(1, 3), range(1, 6), dim};
  int64_t st[4];
  st[3] = 1;
  st[2] = dim + range(0, 3); /* channels past the rotary ones stay as they are */
  int64_t plane = sh[2] * st[2] + range(0, 2) * st[2];
  if (range(0, 1)) {
    st[1] = plane;
    st[0] = sh[1] * plane;
  } else { /* heads outermost */
    st[0] = plane;
    st[1] = sh[0] * plane;
  }
  size_t elem = kvc_dtype_size(dt), count = (size_t)(sh[0] * sh[1] * plane), bytes = count * elem;
  unsigned char* got = (unsigned char*)malloc(bytes);
  unsigned char* want = (unsigned char*)malloc(bytes);
  float* rc = (float*)malloc((size_t)(sh[2] * dim) * sizeof(float));
  float* rs = (float*)malloc((size_t)(sh[2] * dim) * sizeof(float));
  REQUIRE(got && want && rc && rs);
  for (size_t i = 0; i < bytes; i++) got[i] = (unsigned char)next_u64();
  memcpy(want, got, bytes);
  for (int64_t i = 0; i < sh[2] * dim; i++) {
    rc[i] = random_value(dt);
    rs[i] = random_value(dt);
  }
  CHECK_EQ_I64(cpu->rerotate_keys_4d(cpu->ctx, &cpu_place, dt, want, st, sh, rc, rs), 0);
  kvc_gpu_rope r = kvc_gpu_rope_of(dt, got, st, sh);
  simulate(how, &r, rc, rs);
  size_t at = 0;
  while (at < count && !memcmp(got + at * elem, want + at * elem, elem)) at++;
  if (!CHECK(at == count)) {
    char launch[32];
    snprintf(launch, sizeof launch, ", launch %d", (int)how);
    rope_report_mismatch(TU_LOG, launch, dt, dim, sh, at, got, want, "the CPU's");
  }
  free(got);
  free(want);
  free(rc);
  free(rs);
}

static void test_rerotate_equals_cpu_backend(void) {
  /* Odd and even rotary sizes, around the CPU backend's block of 64 pairs and a block of threads. */
  static const int64_t dims[] = {1, 2, 3, 4, 5, 7, 8, 63, 64, 127, 128, 129, 130, 256, 257, 512, 513};
  for (int d = 0; d < 3; d++)
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
      for (int how = 0; how < LAUNCHES; how++)
        for (int rep = 0; rep < 3; rep++) one_rerotation(dtypes[d], dims[i], (enum launch)how);
}

static void test_read_f32_equals_cpu_backend(void) {
  const kvc_backend* cpu = kvci_cpu_backend();
  for (int rep = 0; rep < 300; rep++) {
    kvc_dtype dt = dtypes[rep % 3];
    int64_t sh[4], st[4], origin;
    int64_t span = random_read_region(sh, st, 70, &origin);
    size_t elem = kvc_dtype_size(dt), count = (size_t)(sh[0] * sh[1] * sh[2] * sh[3]);
    unsigned char* src = (unsigned char*)malloc((size_t)span * elem);
    uint32_t* got = (uint32_t*)malloc(count * sizeof(float));
    float* want = (float*)malloc(count * sizeof(float));
    REQUIRE(src && got && want);
    for (size_t i = 0; i < (size_t)span * elem; i++) src[i] = (unsigned char)next_u64();
    const unsigned char* base = src + (size_t)origin * elem;
    CHECK_EQ_I64(cpu->read_f32_4d(cpu->ctx, &cpu_place, want, base, dt, st, sh), 0);
    kvc_gpu_read p = kvc_gpu_read_of(dt, base, st, sh);
    kvc_sim_read_f32(&p, got, rep % 2 ? 1 : kvc_gpu_rope_grid(kvc_gpu_read_items(&p)));
    if (!CHECK(!memcmp(got, want, count * sizeof(float)))) fprintf(TU_LOG, "  dtype %d, repetition %d\n", (int)dt, rep);
    free(src);
    free(got);
    free(want);
  }
}

int main(void) {
  TU_RUN(test_f16_to_f32_every_value);
  TU_RUN(test_roundings_at_boundaries);
  TU_RUN(test_nan_results_are_canonical);
  TU_RUN(test_rerotate_equals_cpu_backend);
  TU_RUN(test_read_f32_equals_cpu_backend);
  return tu_finish();
}
