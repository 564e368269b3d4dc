/*
 * The test harness checks itself: its float16/bfloat16 conversions, its
 * strided tensors and view reader, its token decoder, and that a token check
 * and snapshot_equal do fail when they should (a harness that cannot fail
 * would make every other test meaningless).
 */
#include <math.h>

#include "test_util.h"

static void test_f16_known_values(void) {
  CHECK_EQ_U64(tu_f32_to_f16(1.0f), 0x3c00);
  CHECK_EQ_U64(tu_f32_to_f16(-2.0f), 0xc000);
  CHECK_EQ_U64(tu_f32_to_f16(65504.0f), 0x7bff);
  CHECK_EQ_U64(tu_f32_to_f16(65520.0f), 0x7c00); /* halfway to the next binade: rounds to inf */
  CHECK_EQ_U64(tu_f32_to_f16(-0.0f), 0x8000);
  CHECK_EQ_U64(tu_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
  CHECK_EQ_U64(tu_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);       /* tie to even: 0 */
  CHECK_EQ_U64(tu_f32_to_f16(ldexpf(3.0f, -25)), 0x0002);       /* tie to even: 2 */
  CHECK_EQ_U64(tu_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00); /* tie to even */
  CHECK_EQ_U64(tu_f32_to_f16(1.0f + ldexpf(3.0f, -11)), 0x3c02);
  uint16_t nan = tu_f32_to_f16(tu_bits_f32(0x7fc00001u));
  CHECK((nan & 0x7c00u) == 0x7c00u && (nan & 0x3ffu) != 0);
  CHECK_EQ_F64(tu_f16_to_f32(0x3555), 0.333251953125);
  CHECK_EQ_U64(tu_f32_bits(tu_f16_to_f32(0x8001)), tu_f32_bits(-ldexpf(1.0f, -24)));
}

/* How many of the 16-bit patterns that are not NaN (exponent bits `exp`, mantissa bits `mant`) come back other than
 * they were from 16 bits -> float -> 16 bits. */
static long round_trip_failures(uint32_t exp, uint32_t mant, float (*to_f32)(uint16_t), uint16_t (*from_f32)(float)) {
  long bad = 0;
  for (uint32_t h = 0; h < 0x10000u; h++) {
    if ((h & exp) == exp && (h & mant)) continue;
    if (from_f32(to_f32((uint16_t)h)) != h) bad++;
  }
  return bad;
}

/* Every non-NaN half survives half -> float -> half. */
static void test_f16_round_trip_exhaustive(void) {
  CHECK_EQ_I64(round_trip_failures(0x7c00u, 0x3ffu, tu_f16_to_f32, tu_f32_to_f16), 0);
}

static void test_bf16(void) {
  CHECK_EQ_U64(tu_f32_to_bf16(1.0f), 0x3f80);
  CHECK_EQ_U64(tu_f32_to_bf16(tu_bits_f32(0x3f808000u)), 0x3f80); /* tie to even */
  CHECK_EQ_U64(tu_f32_to_bf16(tu_bits_f32(0x3f818000u)), 0x3f82);
  CHECK_EQ_U64(tu_f32_to_bf16(tu_bits_f32(0x3f808001u)), 0x3f81);
  CHECK_EQ_U64(tu_f32_to_bf16(-0.0f), 0x8000);
  uint16_t nan = tu_f32_to_bf16(tu_bits_f32(0x7f800001u)); /* payload below bf16's bits: stays NaN */
  CHECK((nan & 0x7f80u) == 0x7f80u && (nan & 0x7fu) != 0);
  CHECK_EQ_I64(round_trip_failures(0x7f80u, 0x7fu, tu_bf16_to_f32, tu_f32_to_bf16), 0);
}

/* A strided tensor reads back as the compact one it was built from. */
static void test_layouts_read_back(void) {
  float src[2 * 3 * 4 * 5];
  for (int i = 0; i < 120; i++) src[i] = (float)i * 0.5f - 7.0f;
  const tu_layout lays[3] = {{{0, 2, 1, 3}, 1, 2, 12, 1}, {{3, 1, 0, 2}, 3, 1, 6, 1}, {{0, 1, 2, 3}, 1, 0, 0, 0}};
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  for (int i = 0; i < 3; i++)
    for (int j = 0; j < 3; j++) {
      tu_tensor x;
      tu_tensor_make_ex(&x, dts[j], 2, 3, 4, 5, &lays[i], src, NULL);
      CHECK_EQ_U64(x.t.byte_offset, lays[i].byte_offset);
      CHECK(lays[i].explicit_strides ? x.t.strides != NULL : x.t.strides == NULL);
      float back[120];
      CHECK_EQ_I64(tu_read_view(&x.t, back), 120);
      int same = 1;
      for (int k = 0; k < 120; k++) same &= back[k] == src[k]; /* all exactly representable */
      CHECK(same);
      CHECK_EQ_F64(tu_get(&x.t, 1, 2, 3, 4), src[119]);
      tu_tensor_free(&x);
    }
}

/* The token decoder names token, source row, and catches corruption. */
static void test_token_decoding(void) {
  tu_tensor x;
  tu_tensor_tokens(&x, 3, 2, 4, 5, 7, 1);
  int64_t row = -5;
  CHECK_EQ_I64(tu_decode_token(&x.t, 2, 1, 3, 1, &row), 10);
  CHECK_EQ_I64(row, 2);
  CHECK_EQ_I64(tu_decode_token(&x.t, 0, 0, 0, 0, NULL), -2); /* values read as keys */
  float* f = (float*)x.alloc;
  f[2] += 1.0f; /* corrupt one element of [0,0,0,*] */
  CHECK_EQ_I64(tu_decode_token(&x.t, 0, 0, 0, 1, NULL), -2);
  f[2] = 0.0f; /* a half-zero row */
  CHECK_EQ_I64(tu_decode_token(&x.t, 0, 0, 0, 1, NULL), -2);
  for (int d = 0; d < 5; d++) f[d] = 0.0f;
  CHECK_EQ_I64(tu_decode_token(&x.t, 0, 0, 0, 1, NULL), -1);
  tu_tensor_free(&x);
}

/* Runs a check that must fail, without counting that failure against this test. */
#define EXPECT_CHECK_FAILS(expr)                       \
  do {                                                 \
    long f_ = tu_failures_total, c_ = tu_checks_total; \
    quiet(1);                                          \
    int r_ = (expr);                                   \
    quiet(0);                                          \
    tu_failures_total = f_;                            \
    tu_checks_total = c_;                              \
    CHECK(r_ == 0);                                    \
  } while (0)

/* Sends the harness's failure reports to a scratch file while an expected failure runs. */
static void quiet(int on) {
  if (on) {
    tu_log_stream = tmpfile();
  } else {
    if (tu_log_stream) fclose(tu_log_stream);
    tu_log_stream = NULL;
  }
}

static void test_checks_can_fail(void) {
  tu_tensor k, v;
  tu_tensor_tokens(&k, 2, 1, 3, 2, 0, 0);
  tu_tensor_tokens(&v, 2, 1, 3, 2, 0, 1);
  kvc_kv kv = {k.t, v.t};
  CHECK_KV_SEQ(kv, 0, 1, 2);
  EXPECT_CHECK_FAILS(CHECK_KV_SEQ(kv, 0, 1, 3));
  EXPECT_CHECK_FAILS(CHECK_KV_SEQ(kv, 0, 1));
  EXPECT_CHECK_FAILS(CHECK_KV_SEQ(kv, 0, 1, -1));
  const int64_t swapped[2] = {1, 0};
  EXPECT_CHECK_FAILS(CHECK_TOKENS_ROWS(kv, TU_LIST(0, 1, 2), 3, swapped));
  kvc_kv crossed = {k.t, k.t}; /* keys where values belong */
  EXPECT_CHECK_FAILS(CHECK_KV_SEQ(crossed, 0, 1, 2));
  EXPECT_CHECK_FAILS(CHECK_SHAPE(k.t, 2, 1, 3, 3));
  EXPECT_CHECK_FAILS(CHECK_EQ_I64(1, 2));
  EXPECT_CHECK_FAILS(CHECK_OK(kvc_cache_crop(NULL, 0)));
  tu_tensor_free(&k);
  tu_tensor_free(&v);
}

/* snapshot_equal sees one changed token, a changed counter, and a changed flag. */
static void test_snapshot_detects_changes(void) {
  kvc_layer_options l[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_DYNAMIC_SLIDING, 4, 0)};
  kvc_cache* a = tu_custom_cache(2, l);
  kvc_cache* b = tu_custom_cache(2, l);
  REQUIRE(a && b);
  for (uint32_t i = 0; i < 2; i++) {
    REQUIRE_OK(tu_update_tokens(a, i, 1, 1, 3, 2, 2, 0, NULL, NULL));
    REQUIRE_OK(tu_update_list(b, i, 1, 1, 2, 2, TU_LIST(0, 1, i ? 2 : 9), 3, NULL, NULL));
  }
  tu_snapshot sa, sb;
  snapshot(a, &sa);
  snapshot(b, &sb);
  CHECK(sa.num_layers == 2 && sa.layers[0].seq == 3 && sa.layers[1].info.kind == KVC_LAYER_DYNAMIC_SLIDING);
  quiet(1);
  CHECK(!snapshot_equal(&sa, &sb));
  quiet(0);
  snapshot_free(&sb);

  kvc_cache* c = NULL;
  REQUIRE_OK(kvc_cache_clone(a, &c));
  snapshot(c, &sb);
  CHECK(snapshot_equal(&sa, &sb));
  snapshot_free(&sb);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  snapshot(c, &sb);
  quiet(1);
  CHECK(!snapshot_equal(&sa, &sb));
  quiet(0);
  snapshot_free(&sb);
  REQUIRE_OK(kvc_cache_crop(a, -1));
  snapshot(a, &sb);
  quiet(1);
  CHECK(!snapshot_equal(&sa, &sb));
  quiet(0);
  snapshot_free(&sb);
  snapshot_free(&sa);
  TU_DESTROY(a, b, c);
}

int main(void) {
  TU_RUN(test_f16_known_values);
  TU_RUN(test_f16_round_trip_exhaustive);
  TU_RUN(test_bf16);
  TU_RUN(test_layouts_read_back);
  TU_RUN(test_token_decoding);
  TU_RUN(test_checks_can_fail);
  TU_RUN(test_snapshot_detects_changes);
  return tu_finish();
}
