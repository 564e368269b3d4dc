/*
 * The CPU backend's RoPE operations of sink layers (backends/cpu/cpu_rope.c,
 * table entries rerotate_keys_4d and read_f32_4d) against a plain reference
 * written from the formula with the core's conversions (core/half.h).
 *
 * The backend rewrites each key row in place without scratch (pairs of
 * channels for even rotary sizes, one cycle through the channels for odd
 * ones), so this checks that the order changes no bits: random bit patterns
 * (NaN, infinities and subnormals included) in every key dtype, rotary sizes
 * around the backend's block size, odd ones, strided rows with channels past
 * the rotary ones that must stay untouched. The reads are checked on random
 * strides of any sign, 0 included, in every dtype the RoPE options allow.
 */
#include "backend.h"
#include "half.h"
#include "rope_random.h"
#include "test_util.h"

/* As the backend: every product and sum rounded on its own. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

static void reference_rerotate(kvc_dtype dt, void* keys, const int64_t st[4], const int64_t sh[4], const float* rcos,
                               const float* rsin) {
  int64_t dim = sh[3], half = dim / 2, upper = dim - half;
  size_t elem = kvc_dtype_size(dt);
  float* row = (float*)malloc((size_t)dim * sizeof(float));
  for (int64_t b = 0; b < sh[0]; b++)
    for (int64_t h = 0; h < sh[1]; h++)
      for (int64_t j = 0; j < sh[2]; j++) {
        char* base = (char*)keys + (size_t)(b * st[0] + h * st[1] + j * st[2]) * elem;
        for (int64_t d = 0; d < dim; d++) row[d] = kvci_load_f32(dt, base, d);
        for (int64_t d = 0; d < dim; d++) {
          float rotated = d < upper ? -row[half + d] : row[d - upper]; /* rotate_half */
          float a = kvci_round_to(dt, row[d] * rcos[j * dim + d]);
          float r = kvci_round_to(dt, rotated * rsin[j * dim + d]);
          float sum = a + r;
          kvci_store_f32(dt, base, d, kvci_round_to(dt, sum));
        }
      }
  free(row);
}

static const kvc_dtype dtypes[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};

/* One random region of keys rotated by the backend and by the reference: every element of the buffer equal. */
static void one_rerotation(kvc_dtype dt, int64_t dim) {
  const kvc_backend* cpu = kvci_cpu_backend();
  const kvc_exec place = {0, NULL, NULL};
  int64_t sh[4] = {range(1, 2), range(1, 3), range(1, 5), dim};
  int64_t width = dim + range(0, 3); /* channels past the rotary ones (partial rotation) stay as they are */
  int64_t st[4];
  st[3] = 1;
  st[2] = width;
  st[1] = sh[2] * st[2] + range(0, 2) * width; /* unused slots between heads */
  st[0] = sh[1] * st[1];
  size_t elem = kvc_dtype_size(dt), count = (size_t)(sh[0] * st[0]), bytes = count * elem;
  unsigned char* got = (unsigned char*)malloc(bytes);
  unsigned char* want = (unsigned char*)malloc(bytes);
  float* rc = (float*)malloc((size_t)(sh[2] * dim) * sizeof(float));
  float* rs = (float*)malloc((size_t)(sh[2] * dim) * sizeof(float));
  REQUIRE(got && want && rc && rs);
  for (size_t i = 0; i < count; i++) kvci_store_f32(dt, got, (int64_t)i, random_value(dt));
  memcpy(want, got, bytes);
  for (int64_t i = 0; i < sh[2] * dim; i++) {
    rc[i] = random_value(dt);
    rs[i] = random_value(dt);
  }
  CHECK_EQ_I64(cpu->rerotate_keys_4d(cpu->ctx, &place, dt, got, st, sh, rc, rs), 0);
  reference_rerotate(dt, want, st, sh, rc, rs);
  /* Bits equal, except that a NaN may come out as any NaN: which operand's NaN an operation returns is up to the
     compiler's (and torch's) order of operands; no value is NaN on one side only. */
  size_t at = 0;
  for (; at < count; at++) {
    float g = kvci_load_f32(dt, got, (int64_t)at), w = kvci_load_f32(dt, want, (int64_t)at);
    if (memcmp(got + at * elem, want + at * elem, elem) && !(g != g && w != w)) break;
  }
  if (!CHECK(at == count)) rope_report_mismatch(TU_LOG, "", dt, dim, sh, at, got, want, "the reference");
  free(got);
  free(want);
  free(rc);
  free(rs);
}

static void test_rerotate_matches_reference(void) {
  /* Odd and even sizes, and sizes around the backend's block of 64 pairs. */
  static const int64_t dims[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 33, 64, 127, 128, 129, 130, 131, 256, 257};
  for (int d = 0; d < 3; d++)
    for (size_t i = 0; i < sizeof dims / sizeof dims[0]; i++)
      for (int rep = 0; rep < 4; rep++) one_rerotation(dtypes[d], dims[i]);
}

/* An empty region is a no-op (the keys pointer may be anything). */
static void test_rerotate_empty(void) {
  const kvc_backend* cpu = kvci_cpu_backend();
  const kvc_exec place = {0, NULL, NULL};
  const int64_t st[4] = {0, 0, 0, 1}, sh[4] = {1, 1, 0, 8};
  CHECK_EQ_I64(cpu->rerotate_keys_4d(cpu->ctx, &place, KVC_DTYPE_FLOAT16, NULL, st, sh, NULL, NULL), 0);
}

static void test_read_f32(void) {
  const kvc_backend* cpu = kvci_cpu_backend();
  const kvc_exec place = {0, NULL, NULL};
  for (int rep = 0; rep < 200; rep++) {
    kvc_dtype dt = dtypes[rep % 3];
    int64_t sh[4], st[4], origin;
    int64_t span = random_read_region(sh, st, 9, &origin);
    size_t elem = kvc_dtype_size(dt);
    unsigned char* src = (unsigned char*)malloc((size_t)span * elem);
    float* got = (float*)malloc((size_t)(sh[0] * sh[1] * sh[2] * sh[3]) * sizeof(float));
    REQUIRE(src && got);
    for (int64_t i = 0; i < span; i++) kvci_store_f32(dt, src, i, random_value(dt));
    const unsigned char* base = src + (size_t)origin * elem;
    CHECK_EQ_I64(cpu->read_f32_4d(cpu->ctx, &place, got, base, dt, st, sh), 0);
    int ok = 1;
    int64_t k = 0;
    for (int64_t b = 0; b < sh[0]; b++)
      for (int64_t h = 0; h < sh[1]; h++)
        for (int64_t s = 0; s < sh[2]; s++)
          for (int64_t d = 0; d < sh[3]; d++, k++) {
            float want = kvci_load_f32(dt, base, b * st[0] + h * st[1] + s * st[2] + d * st[3]);
            ok &= kvci_f32_bits(want) == kvci_f32_bits(got[k]);
          }
    if (!CHECK(ok)) fprintf(TU_LOG, "  dtype %d, repetition %d\n", (int)dt, rep);
    free(src);
    free(got);
  }
  /* Dtypes the RoPE options do not allow are refused. */
  const int64_t st[4] = {1, 1, 1, 1}, sh[4] = {1, 1, 1, 1};
  float out = 0;
  CHECK(cpu->read_f32_4d(cpu->ctx, &place, &out, &out, KVC_DTYPE_UNSET, st, sh) != 0);
}

int main(void) {
  TU_RUN(test_rerotate_matches_reference);
  TU_RUN(test_rerotate_empty);
  TU_RUN(test_read_f32);
  return tu_finish();
}
