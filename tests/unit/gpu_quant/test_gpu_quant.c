/*
 * tests/unit/gpu_quant/test_gpu_quant.c: the GPU backend's quantizer kernels
 * (backends/gpu/gpu_quant_plan.h), run on the CPU as their grids run them
 * (tests/gpu/quant_grid.c), against the CPU backend's entries
 * (backends/cpu/cpu_quant_ops.c), bit for bit.
 *
 * Random jobs of every dtype, quanto (2, 4 bits) and HQQ (1..8 bits, both
 * axes), odd group sizes and counts, several calls, spans whose axes come in
 * any order with padding and negative strides, records at odd byte offsets
 * and strides, dequantized values in place or elsewhere, and values that
 * include NaN, infinities, subnormals and groups of equal values. Every byte
 * of the records, the dequantized values and the source is compared, with
 * the threads of each launch run forwards and backwards. Jobs whose calls do
 * not fit the scratch at once run in batches (the scratch of one call, as
 * the contract allows). What this cannot check, the device's own arithmetic
 * (its double pow, NaN payloads), docs/design.md bounds and tests/gpu checks.
 */
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu/cpu_quant_ops.h"
#include "half.h"
#include "kvcache/quantized.h"
#include "gpu_quant_plan.h"
#include "quant_grid.h"
#include "quant_math/quant_math.h"

static int failures = 0, checks = 0;

/* Counts a check; prints where and why when `ok` is 0. */
static void check_at(int ok, int line, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void check_at(int ok, int line, const char* fmt, ...) {
  checks++;
  if (ok) return;
  failures++;
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "%s:%d: ", __FILE__, line);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
}
#define CHECK(cond, ...) check_at((cond) ? 1 : 0, __LINE__, __VA_ARGS__)

/* splitmix64: a fixed sequence, so that a failure reproduces. */
static uint64_t rng_state = 0x2545f4914f6cdd1du;
static uint64_t next_rand(void) {
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15u);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9u;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebu;
  return z ^ (z >> 31);
}
static int64_t rand_in(int64_t lo, int64_t hi) { return lo + (int64_t)(next_rand() % (uint64_t)(hi - lo + 1)); }
static float rand_unit(void) { return (float)(next_rand() >> 40) / (float)(1 << 24); }

static const int32_t dtypes[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
static const char* dtype_name(int32_t dt) {
  return dt == KVC_DTYPE_FLOAT32 ? "float32" : dt == KVC_DTYPE_FLOAT16 ? "float16" : "bfloat16";
}
static size_t elem_of(int32_t dt) { return dt == KVC_DTYPE_FLOAT32 ? 4 : 2; }

/* A value for slot i of a group: mostly smooth data, sometimes the special cases. `flavour` picks a group's kind:
   0 ordinary, 1 all equal, 2 with NaN / infinities, 3 tiny (subnormal range) values, 4 huge range. */
static float value_of(int flavour, float base) {
  const float r = rand_unit() * 2.0f - 1.0f;
  switch (flavour) {
    case 1: return base;
    case 2: {
      const uint64_t pick = next_rand() % 8;
      if (pick == 0) return kvci_f32_from_bits(0x7fc00000u | (uint32_t)(next_rand() & 0x3fffffu) | (uint32_t)(next_rand() & 1) << 31);
      if (pick == 1) return (next_rand() & 1) ? INFINITY : -INFINITY;
      return r;
    }
    case 3: return r * 1e-6f;
    case 4: return r * 6e4f;
    default: return base + r * 3.0f;
  }
}

/* A random strided layout of the 5 axes (call0, call1, group0, group1, value) over a buffer: the axes in a random
   order, padding between them, some strides negative. Strides in elements; *origin: the element offset of index 0;
   returns the buffer's elements. */
static int64_t random_layout(const int64_t n[5], int64_t st[5], int64_t* origin) {
  int order[5] = {0, 1, 2, 3, 4};
  for (int i = 4; i > 0; i--) {
    int j = (int)rand_in(0, i), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  int64_t size = 1;
  for (int i = 0; i < 5; i++) {
    const int a = order[i];
    st[a] = size;
    size = size * n[a] + (next_rand() % 3 == 0 ? rand_in(1, 5) : 0);
  }
  *origin = 0;
  for (int a = 0; a < 5; a++)
    if (n[a] > 1 && next_rand() % 5 == 0) {
      *origin += (n[a] - 1) * st[a];
      st[a] = -st[a];
    }
  return size + 3;
}

static kvc_quant_span span_of(const int64_t n[5], const int64_t st[5]) {
  kvc_quant_span s;
  s.calls[0] = n[0];
  s.calls[1] = n[1];
  s.groups[0] = n[2];
  s.groups[1] = n[3];
  s.call_strides[0] = st[0];
  s.call_strides[1] = st[1];
  s.group_strides[0] = st[2];
  s.group_strides[1] = st[3];
  s.value_stride = st[4];
  return s;
}

static unsigned char* random_bytes(size_t bytes) {
  unsigned char* p = (unsigned char*)malloc(bytes ? bytes : 1);
  for (size_t i = 0; i < bytes; i++) p[i] = (unsigned char)next_rand();
  return p;
}

/* Fills the span's values (the rest of the buffer keeps its random bytes). */
static void fill_values(unsigned char* buf, int64_t origin, const int64_t n[5], const int64_t st[5], int32_t dt) {
  for (int64_t c0 = 0; c0 < n[0]; c0++)
    for (int64_t c1 = 0; c1 < n[1]; c1++)
      for (int64_t k0 = 0; k0 < n[2]; k0++)
        for (int64_t k1 = 0; k1 < n[3]; k1++) {
          const int flavour = next_rand() % 4 == 0 ? (int)rand_in(1, 4) : 0;
          const float base = rand_unit() * 4.0f - 2.0f;
          for (int64_t i = 0; i < n[4]; i++) {
            const int64_t at = origin + c0 * st[0] + c1 * st[1] + k0 * st[2] + k1 * st[3] + i * st[4];
            kvci_store_f32((kvc_dtype)dt, buf, at, value_of(flavour, base));
          }
        }
}

/*
 * Which NaN an operation returns (payload and sign) is not part of the contract: x86 returns the first NaN
 * operand, and which operand is first is the compiler's choice for a commutative operation (two builds of the
 * same C differ), and NVIDIA GPUs return one canonical NaN (docs/design.md, 'Quantizing on devices'). Where both
 * sides hold a NaN of the dtype, the second side's bytes are made the first's before the byte comparison, so
 * that every other bit is still compared.
 */
static long nans_matched;
static int is_nan_at(const unsigned char* p, int32_t dt) {
  const float v = kvc_qm_load_bytes((kvc_dtype)dt, p);
  return v != v;
}
static void match_nan(const unsigned char* a, unsigned char* b, int32_t dt) {
  const size_t e = elem_of(dt);
  if (is_nan_at(a, dt) && is_nan_at(b, dt) && memcmp(a, b, e)) {
    memcpy(b, a, e);
    nans_matched++;
  }
}
static void match_nan_values(const unsigned char* a, unsigned char* b, size_t bytes, int32_t dt) {
  for (size_t i = 0; i + elem_of(dt) <= bytes; i += elem_of(dt)) match_nan(a + i, b + i, dt);
}

static int first_difference(const unsigned char* a, const unsigned char* b, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (a[i] != b[i]) return (int)i;
  return -1;
}

typedef struct quant_case {
  int32_t quantizer, nbits, dtype, axis;
  int64_t group, calls[2], groups[2];
  int in_place, keep_records, want_dequant, small_scratch;
} quant_case;

static void describe(const quant_case* q, char* out, size_t cap) {
  snprintf(out, cap, "%s %d bits axis %d %s, group %lld, calls %lldx%lld, groups %lldx%lld%s%s%s%s",
           q->quantizer == KVC_QUANTIZER_HQQ ? "hqq" : "quanto", (int)q->nbits, (int)q->axis, dtype_name(q->dtype),
           (long long)q->group, (long long)q->calls[0], (long long)q->calls[1], (long long)q->groups[0],
           (long long)q->groups[1], q->in_place ? ", in place" : "", q->keep_records ? "" : ", no records",
           q->want_dequant ? "" : ", no dequant", q->small_scratch ? ", one call's scratch" : "");
}

static kvc_quant_spec spec_of(const quant_case* q) {
  kvc_quant_spec s;
  s.quantizer = q->quantizer;
  s.nbits = q->nbits;
  s.dtype = q->dtype;
  s.axis = q->axis;
  return s;
}

/* Two buffers of the same random bytes: one for the CPU backend, one for the grid. */
static void random_pair(size_t bytes, unsigned char* out[2]) {
  out[0] = random_bytes(bytes);
  out[1] = (unsigned char*)malloc(bytes ? bytes : 1);
  memcpy(out[1], out[0], bytes);
}

/* One quantize job on both sides, then a dequantize job of the records on both sides. */
static void run_case(const quant_case* q) {
  char what[256];
  describe(q, what, sizeof what);
  const size_t elem = elem_of(q->dtype);
  const int64_t n[5] = {q->calls[0], q->calls[1], q->groups[0], q->groups[1], q->group};
  int64_t sst[5], sorigin;
  const int64_t sn = random_layout(n, sst, &sorigin);
  unsigned char* src = random_bytes((size_t)sn * elem);
  fill_values(src, sorigin, n, sst, q->dtype);
  int64_t dst_[5], dorigin = 0, dn = 0;
  if (!q->in_place) dn = random_layout(n, dst_, &dorigin);
  /* records: calls[0] x calls[1] x groups, at an odd offset, strides with a little slack */
  const int64_t ng = q->groups[0] * q->groups[1], rb = kvc_quant_record_bytes(q->group, q->nbits, elem);
  const int64_t rstride = rb + rand_in(0, 3), c1stride = ng * rstride + rand_in(0, 5),
                c0stride = q->calls[1] * c1stride + rand_in(0, 7), roff = rand_in(0, 7);
  const size_t rbytes = (size_t)(roff + q->calls[0] * c0stride + 8);
  unsigned char* rec[2];
  random_pair(rbytes, rec);
  unsigned char* srcs[2] = {src, (unsigned char*)malloc((size_t)sn * elem)};
  memcpy(srcs[1], src, (size_t)sn * elem);
  unsigned char* deq[2] = {NULL, NULL};
  if (!q->in_place && q->want_dequant) random_pair((size_t)dn * elem, deq);
  const size_t scratch_bytes = kvc_quantize_scratch_bytes(ng, q->group) * (q->small_scratch ? 1 : (size_t)(n[0] * n[1]));
  void* scratch = malloc(scratch_bytes);
  for (int side = 0; side < 2; side++) {
    kvc_quantize_job job;
    memset(&job, 0, sizeof job);
    job.spec = spec_of(q);
    job.group = q->group;
    job.src = srcs[side] + sorigin * (int64_t)elem;
    job.src_span = span_of(n, sst);
    if (q->keep_records) {
      job.records.base = rec[side] + roff;
      job.records.call_strides[0] = c0stride;
      job.records.call_strides[1] = c1stride;
      job.records.record_stride = rstride;
    }
    if (q->in_place && q->want_dequant) {
      job.dequant = (void*)job.src;
      job.dequant_span = job.src_span;
    } else if (q->want_dequant) {
      job.dequant = deq[side] + dorigin * (int64_t)elem;
      job.dequant_span = span_of(n, dst_);
    }
    job.scratch = scratch;
    job.scratch_bytes = scratch_bytes;
    const int rc = side ? kvc_grid_quantize_groups(&job) : kvci_cpu_quantize_groups(NULL, NULL, &job);
    CHECK(rc == 0, "%s: quantize side %d returned %d", what, side, rc);
  }
  if (q->keep_records)
    for (int64_t c = 0; c < q->calls[0] * q->calls[1]; c++)
      for (int64_t k = 0; k < ng; k++) {
        const int64_t at = roff + (c / q->calls[1]) * c0stride + (c % q->calls[1]) * c1stride + k * rstride;
        match_nan(rec[0] + at, rec[1] + at, q->dtype);
        match_nan(rec[0] + at + elem, rec[1] + at + elem, q->dtype);
      }
  match_nan_values(srcs[0], srcs[1], (size_t)sn * elem, q->dtype);
  if (deq[0]) match_nan_values(deq[0], deq[1], (size_t)dn * elem, q->dtype);
  int d = first_difference(rec[0], rec[1], rbytes);
  CHECK(d < 0, "%s: records differ at byte %d", what, d);
  d = first_difference(srcs[0], srcs[1], (size_t)sn * elem);
  CHECK(d < 0, "%s: source / in-place values differ at byte %d", what, d);
  if (deq[0]) {
    d = first_difference(deq[0], deq[1], (size_t)dn * elem);
    CHECK(d < 0, "%s: dequantized values differ at byte %d", what, d);
  }

  /* dequantize_groups of the CPU's records: a random lo..hi into a fresh random layout */
  if (q->keep_records) {
    const int64_t lo = rand_in(0, q->group), hi = rand_in(lo, q->group);
    const int64_t m[5] = {n[0], n[1], n[2], n[3], hi - lo};
    int64_t ost[5], oorigin;
    const int64_t on = random_layout(m, ost, &oorigin);
    unsigned char* out[2];
    random_pair((size_t)on * elem, out);
    for (int side = 0; side < 2; side++) {
      kvc_dequantize_job job;
      memset(&job, 0, sizeof job);
      job.spec = spec_of(q);
      job.group = q->group;
      job.lo = lo;
      job.hi = hi;
      job.records.base = rec[0] + roff;
      job.records.call_strides[0] = c0stride;
      job.records.call_strides[1] = c1stride;
      job.records.record_stride = rstride;
      job.dst = out[side] + oorigin * (int64_t)elem;
      job.dst_span = span_of(m, ost);
      const int rc = side ? kvc_grid_dequantize_groups(&job) : kvci_cpu_dequantize_groups(NULL, NULL, &job);
      CHECK(rc == 0, "%s: dequantize side %d returned %d", what, side, rc);
    }
    match_nan_values(out[0], out[1], (size_t)on * elem, q->dtype);
    d = first_difference(out[0], out[1], (size_t)on * elem);
    CHECK(d < 0, "%s: dequantize_groups %lld..%lld differs at byte %d", what, (long long)lo, (long long)hi, d);
    free(out[0]);
    free(out[1]);
  }
  free(scratch);
  for (int i = 0; i < 2; i++) {
    free(srcs[i]);
    free(rec[i]);
    free(deq[i]);
  }
}

static void test_quantizers(void) {
  static const int64_t group_sizes[] = {1, 2, 3, 8, 16, 31, 32, 64, 100};
  int cases = 0;
  for (int quantizer = 0; quantizer < 2; quantizer++)
    for (int di = 0; di < 3; di++)
      for (int nbits = 1; nbits <= 8; nbits++) {
        if (!quantizer && nbits != 2 && nbits != 4) continue;
        for (int axis = 0; axis < (quantizer ? 2 : 1); axis++)
          for (int gi = 0; gi < (int)(sizeof group_sizes / sizeof *group_sizes); gi++) {
            quant_case q;
            memset(&q, 0, sizeof q);
            q.quantizer = quantizer ? KVC_QUANTIZER_HQQ : KVC_QUANTIZER_QUANTO;
            q.nbits = nbits;
            q.dtype = dtypes[di];
            q.axis = axis;
            q.group = group_sizes[gi];
            q.calls[0] = rand_in(1, 2);
            q.calls[1] = rand_in(1, 3);
            q.groups[0] = rand_in(1, 4);
            q.groups[1] = rand_in(1, 6);
            q.in_place = next_rand() % 3 == 0;
            q.keep_records = next_rand() % 6 != 0;
            q.want_dequant = next_rand() % 6 != 0;
            q.small_scratch = next_rand() % 2;
            kvc_grid_order = (int)(next_rand() & 1);
            run_case(&q);
            cases++;
          }
      }
  /* Calls large enough for several level-0 blocks of the error cascade and a deep cascade of the means. */
  for (int di = 0; di < 3; di++)
    for (int axis = 0; axis < 2; axis++) {
      quant_case q;
      memset(&q, 0, sizeof q);
      q.quantizer = KVC_QUANTIZER_HQQ;
      q.nbits = 4;
      q.dtype = dtypes[di];
      q.axis = axis;
      q.group = axis ? 64 : 600;
      q.calls[0] = 1;
      q.calls[1] = 2;
      q.groups[0] = 3;
      q.groups[1] = axis ? 45 : 7;
      q.keep_records = q.want_dequant = 1;
      q.small_scratch = di == 1;
      run_case(&q);
      cases++;
    }
  printf("  %d quantize and dequantize jobs compared\n", cases);
}

/* FP8: calibration (scale bits) and round trip (every byte) over random strided regions, NaN and inf included. */
static void test_fp8(void) {
  int cases = 0;
  for (int di = 0; di < 3; di++)
    for (int rep = 0; rep < 40; rep++) {
      const int32_t dt = dtypes[di];
      const size_t elem = elem_of(dt);
      const int64_t shape[4] = {rand_in(1, 2), rand_in(1, 3), rand_in(1, 40), rand_in(1, 70)};
      const int64_t n5[5] = {shape[0], shape[1], shape[2], shape[3], 1};
      int64_t s5[5], sorigin, d5[5], dorigin;
      const int64_t sn = random_layout(n5, s5, &sorigin), dn = random_layout(n5, d5, &dorigin);
      unsigned char* src = random_bytes((size_t)sn * elem);
      const int flavour = rep % 5;
      for (int64_t e = 0; e < sn; e++) kvci_store_f32((kvc_dtype)dt, src, e, value_of(flavour, 1.5f) * (rep % 7 == 0 ? 1e-3f : 100.0f));
      const int64_t ss[4] = {s5[0], s5[1], s5[2], s5[3]}, ds[4] = {d5[0], d5[1], d5[2], d5[3]};
      const void* s0 = src + sorigin * (int64_t)elem;
      float scale[2] = {0, 0};
      CHECK(kvci_cpu_fp8_calibrate(NULL, NULL, s0, ss, shape, dt, &scale[0]) == 0, "cpu calibrate");
      kvc_grid_order = rep & 1;
      CHECK(kvc_grid_fp8_calibrate(s0, ss, shape, dt, &scale[1]) == 0, "grid calibrate");
      CHECK(kvci_f32_bits(scale[0]) == kvci_f32_bits(scale[1]) || (scale[0] != scale[0] && scale[1] != scale[1]), "fp8 %s case %d: scale %08x on the CPU, %08x on the grid",
            dtype_name(dt), rep, kvci_f32_bits(scale[0]), kvci_f32_bits(scale[1]));
      const float use = rep % 3 == 0 ? scale[0] : rand_unit() * 3.0f + 1e-3f;
      unsigned char* out[2];
      random_pair((size_t)dn * elem, out);
      CHECK(kvci_cpu_fp8_round_trip(NULL, NULL, out[0] + dorigin * (int64_t)elem, ds, s0, ss, shape, dt, use) == 0, "cpu");
      CHECK(kvc_grid_fp8_round_trip(out[1] + dorigin * (int64_t)elem, ds, s0, ss, shape, dt, use) == 0, "grid");
      match_nan_values(out[0], out[1], (size_t)dn * elem, dt);
      const int d = first_difference(out[0], out[1], (size_t)dn * elem);
      CHECK(d < 0, "fp8 %s case %d: round trip differs at byte %d", dtype_name(dt), rep, d);
      free(src);
      free(out[0]);
      free(out[1]);
      cases++;
    }
  printf("  %d FP8 calibrations and round trips compared\n", cases);
}

/* A job the kernels cannot run says so (the core then reports KVC_ERROR_UNSUPPORTED), and an empty one is a no-op. */
static void test_refusals(void) {
  float x[4] = {1, 2, 3, 4};
  unsigned char scratch[4096];
  kvc_quantize_job job;
  memset(&job, 0, sizeof job);
  job.spec.quantizer = KVC_QUANTIZER_QUANTO;
  job.spec.nbits = 3;
  job.spec.dtype = KVC_DTYPE_FLOAT32;
  job.group = 4;
  job.src = x;
  job.src_span.calls[0] = job.src_span.calls[1] = job.src_span.groups[0] = job.src_span.groups[1] = 1;
  job.src_span.value_stride = 1;
  job.scratch = scratch;
  job.scratch_bytes = sizeof scratch;
  CHECK(kvc_grid_quantize_groups(&job) == KVC_BACKEND_UNSUPPORTED, "quanto 3 bits is refused");
  job.spec.nbits = 2;
  job.spec.dtype = 99;
  CHECK(kvc_grid_quantize_groups(&job) == KVC_BACKEND_UNSUPPORTED, "dtype 99 is refused");
  job.spec.dtype = KVC_DTYPE_FLOAT32;
  job.src_span.calls[0] = 0;
  CHECK(kvc_grid_quantize_groups(&job) == 0, "no calls: nothing to do");
}

/* Launches per batch of an HQQ job, from the plan the GPU backend launches: a residual of 128 tokens x 8 heads x
   head_dim 128 in groups of 64 (axis 1 and 0), and a call too small for error columns. Was 103 (and 2 + 20 x 4 + 1
   = 83 without error blocks) before the start gathered its own values, the means took the error blocks' level-0
   sums beside them, and the last round stopped deciding. */
static int hqq_launches(int axis, int64_t group, int64_t groups) {
  float x[1];
  kvc_quantize_job job;
  memset(&job, 0, sizeof job);
  job.spec.quantizer = KVC_QUANTIZER_HQQ;
  job.spec.nbits = 4;
  job.spec.dtype = KVC_DTYPE_BFLOAT16;
  job.spec.axis = axis;
  job.group = group;
  job.src = x;
  job.src_span.calls[0] = job.src_span.calls[1] = job.src_span.groups[0] = 1;
  job.src_span.groups[1] = groups;
  job.src_span.value_stride = 1;
  kvc_gpu_quant plan;
  CHECK(kvc_gpu_quant_plan(&plan, &job) == 0, "hqq plan");
  kvc_gq_launch l[KVC_GQ_MAX_LAUNCHES];
  return kvc_gpu_quant_launches(&plan, l);
}

static void test_launch_counts(void) {
  const int big1 = hqq_launches(1, 64, 128 * 8 * 128 / 64), big0 = hqq_launches(0, 64, 128 * 8 * 128 / 64);
  const int tiny = hqq_launches(1, 2, 3);
  printf("  HQQ launches per job: %d (128 x 8 x 128 values, axis 1), %d (axis 0), %d (6 values)\n", big1, big0, tiny);
  CHECK(big1 == 80 && big0 == 80, "a 131072-value HQQ call takes %d / %d launches, not 80", big1, big0);
  CHECK(tiny == 61, "a 6-value HQQ call takes %d launches, not 61", tiny);
}

int main(void) {
  printf("test_gpu_quant: the quantizer kernels' code on simulated grids against the CPU backend\n");
  test_quantizers();
  test_fp8();
  test_refusals();
  test_launch_counts();
  printf("%d checks, %d failures, %ld launches; %ld NaNs of different payloads taken as equal\n", checks, failures,
         kvc_grid_launches, nans_matched);
  return failures ? 1 : 0;
}
