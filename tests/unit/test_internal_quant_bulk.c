/*
 * kvci_dequantize_packed (backends/cpu/quantize.h), the bulk dequantization compact
 * layers materialize their history with, against the per-group reference:
 * kvci_dequantize_groups of the unpacked codes, stored with kvci_store_f32.
 * Bit for bit, for every quantizer, nbits and dtype, with group sizes that
 * take its table path and its direct path, groups longer than one chunk,
 * partial ranges lo..hi, unaligned records, both destination layouts a
 * layer uses (per-token rows, per-channel columns), and scales that make
 * zeros, infinities and NaNs. Nothing outside the written elements changes.
 */
#include <math.h>

#include "half.h"
#include "cpu/quantize.h"
#include "test_util.h"

static uint64_t bulk_rng = 0x9E3779B97F4A7C15ULL;

static uint32_t next_u32(void) { return tu_xorshift32(&bulk_rng); }

/* Uniform in [-2, 2), rounded to dt. */
static float next_value(kvc_dtype dt) { return kvci_round_to(dt, (float)next_u32() / 1073741824.0f - 2.0f); }

static size_t elem_of(kvc_dtype dt) { return dt == KVC_DTYPE_FLOAT32 ? 4 : 2; }

static void put_param(kvc_dtype dt, unsigned char* p, float f) {
  unsigned char tmp[4];
  kvci_store_f32(dt, tmp, 0, f);
  memcpy(p, tmp, elem_of(dt));
}

enum { MAX_GROUPS = 6, MAX_GROUP = 600, PAD = 3 };

/*
 * One case: ngroups groups of `group` values quantized from random data (the
 * parameters of group 1 and 2 replaced when `odd` is set), laid out as
 * records [pad][scale][zero][codes] of an odd stride, dequantized into rows
 * of `row_groups` groups, each value at `value_stride`.
 */
static void check_case(kvc_quantizer q, int nbits, kvc_dtype dt, int64_t group, int64_t lo, int64_t hi, int channel,
                       int odd) {
  static float x[MAX_GROUPS * MAX_GROUP], ref[MAX_GROUPS * MAX_GROUP], scale[MAX_GROUPS], zero[MAX_GROUPS];
  static uint8_t codes[MAX_GROUPS * MAX_GROUP];
  static unsigned char records[MAX_GROUPS * (MAX_GROUP + 16)];
  static unsigned char out[4 * 4 * MAX_GROUPS * MAX_GROUP], expect[sizeof out];
  const int64_t ngroups = MAX_GROUPS;
  const kvc_quantizer_spec spec = {q, nbits, dt, channel ? 0 : 1};
  for (int64_t i = 0; i < ngroups * group; i++) x[i] = next_value(dt);
  REQUIRE(kvci_quantize_groups(&spec, x, ngroups, group, codes, scale, zero) == 0);
  if (odd) {
    scale[1] = 0.0f; /* every value is -zero (quanto) or 0 */
    zero[1] = -0.0f;
    scale[2] = kvci_round_to(dt, dt == KVC_DTYPE_FLOAT32 ? 3e38f : dt == KVC_DTYPE_FLOAT16 ? 60000.0f : 3e38f);
    zero[2] = -scale[2]; /* overflows to infinity, and inf - inf is NaN */
    scale[3] = NAN;
  }
  const size_t elem = elem_of(dt);
  const int64_t stride = PAD + 2 * (int64_t)elem + (int64_t)kvci_packed_bytes(group, nbits) + 1; /* unaligned */
  memset(records, 0xEE, sizeof records);
  for (int64_t k = 0; k < ngroups; k++) {
    unsigned char* r = records + k * stride + PAD;
    put_param(dt, r, scale[k]);
    put_param(dt, r + elem, zero[k]);
    kvci_pack_codes(codes + k * group, group, nbits, r + 2 * elem);
  }
  /* Rows of 2 groups (per-token: a token's groups side by side; per-channel: channels, values down columns). */
  const int64_t row_groups = 2, n = hi - lo;
  const int64_t value_stride = channel ? row_groups + 1 : 1, group_stride = channel ? 1 : n;
  const int64_t row_stride = channel ? 1 + value_stride * n : row_groups * n + 5;
  const int64_t total = (ngroups / row_groups) * row_stride + row_groups * n * value_stride;
  REQUIRE((size_t)total * elem <= sizeof out);

  /* The reference: per-group dequantization, then each value stored where the layout puts it. */
  kvci_dequantize_groups(&spec, codes, scale, zero, ngroups, group, ref);
  memset(expect, 0xA5, sizeof expect);
  memset(out, 0xA5, sizeof out);
  for (int64_t k = 0; k < ngroups; k++)
    for (int64_t i = lo; i < hi; i++)
      kvci_store_f32(dt, expect,
                    k / row_groups * row_stride + k % row_groups * group_stride + (i - lo) * value_stride,
                    ref[k * group + i]);

  const kvc_packed_groups src = {records + PAD + 2 * elem, records + PAD, records + PAD + elem, stride, ngroups,
                                 group};
  const kvc_dequant_dst dst = {out, row_groups, row_stride, group_stride, value_stride};
  kvci_dequantize_packed(&spec, &src, lo, hi, &dst);
  int64_t at = -1;
  for (size_t b = 0; b < sizeof out && at < 0; b++)
    if (out[b] != expect[b]) at = (int64_t)b;
  if (!tu_report(at < 0, __FILE__, __LINE__, "bulk dequantization == per-group reference, bit for bit"))
    fprintf(TU_LOG, "    %s %d-bit dtype %d group %lld values %lld..%lld %s%s: first difference at byte %lld\n",
            q == KVC_QUANTIZER_HQQ ? "hqq" : "quanto", nbits, (int)dt, (long long)group, (long long)lo,
            (long long)hi, channel ? "per-channel" : "per-token", odd ? " odd parameters" : "", (long long)at);
}

static void test_bulk_equals_reference(void) {
  static const struct {
    kvc_quantizer q;
    int nbits;
  } kinds[] = {{KVC_QUANTIZER_QUANTO, 2}, {KVC_QUANTIZER_QUANTO, 4}, {KVC_QUANTIZER_HQQ, 1},
               {KVC_QUANTIZER_HQQ, 2},    {KVC_QUANTIZER_HQQ, 3},    {KVC_QUANTIZER_HQQ, 4},
               {KVC_QUANTIZER_HQQ, 8}};
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  /* 1 .. 64: a table of 2^nbits values or the direct path depending on nbits; 300: more than a chunk of codes;
   * 600: 8-bit codes by table, over three chunks. */
  const int64_t groups[] = {1, 3, 8, 17, 64, 300, 600};
  for (size_t ki = 0; ki < sizeof kinds / sizeof kinds[0]; ki++)
    for (int di = 0; di < 3; di++)
      for (size_t gi = 0; gi < sizeof groups / sizeof groups[0]; gi++)
        for (int channel = 0; channel <= 1; channel++) {
          const int64_t g = groups[gi];
          for (int odd = 0; odd <= 1; odd++) check_case(kinds[ki].q, kinds[ki].nbits, dts[di], g, 0, g, channel, odd);
          /* Partial ranges, as a crop into a per-channel block writes: lo inside a byte, lo == hi, a tail. */
          check_case(kinds[ki].q, kinds[ki].nbits, dts[di], g, g / 3, g - g / 5, channel, 0);
          check_case(kinds[ki].q, kinds[ki].nbits, dts[di], g, g / 2, g / 2, channel, 0);
          check_case(kinds[ki].q, kinds[ki].nbits, dts[di], g, g - 1, g, channel, 1);
        }
}

/* The bfloat16 rounding the quantizers use equals the round trip through bfloat16, at its edges. */
static void test_round_to_bf16_edges(void) {
  static const uint32_t bits[] = {0x00000000u, 0x80000000u, 0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x7f7fffffu,
                                  0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7f800001u, 0xffc00000u, 0x7fffffffu,
                                  0x00000001u, 0x807fffffu, 0x7f7f8000u, 0x4b7fffffu};
  int ok = 1;
  for (size_t i = 0; i < sizeof bits / sizeof bits[0]; i++) {
    const float f = kvci_f32_from_bits(bits[i]);
    const uint32_t a = kvci_f32_bits(kvci_round_to_bf16(f)), b = kvci_f32_bits(kvci_bf16_to_f32(kvci_f32_to_bf16(f)));
    if (a != b) {
      ok = 0;
      fprintf(TU_LOG, "    %08x: %08x, round trip %08x\n", (unsigned)bits[i], (unsigned)a, (unsigned)b);
    }
  }
  for (int i = 0; i < 1000000 && ok; i++) {
    const float f = kvci_f32_from_bits(next_u32() ^ (next_u32() << 16));
    ok = kvci_f32_bits(kvci_round_to_bf16(f)) == kvci_f32_bits(kvci_bf16_to_f32(kvci_f32_to_bf16(f)));
  }
  CHECK(ok);
}

int main(void) {
  TU_RUN(test_bulk_equals_reference);
  TU_RUN(test_round_to_bf16_edges);
  return tu_finish();
}
