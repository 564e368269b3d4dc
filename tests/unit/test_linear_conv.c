/*
 * test_linear_conv.c: the conv state of linear-attention layers: the worked
 * traces 'Linear conv state trace' (LinearAttentionLayer) and 'Legacy MambaCache conv trace' (legacy MambaCache), the first
 * call's padding, past recording and crop ('Linear-attention layers'), reset, has_previous_state,
 * and long random sequences against a model written from the rules of docs/semantics.md.
 */
#include "test_linear.h"

/* ------------------------------------------------- a reference conv state */

/* Times stored, oldest first (-1 = a zero column), and the rules of 'Linear-attention layers' / 'Legacy Mamba caches' on them. */
typedef struct conv_model {
  int64_t k;
  int record, has_prev;
  int64_t n;
  int64_t cols[4096];
} conv_model;

/* update_conv_state with times first..first+n-1; writes transformers' `full` to ret. */
static int64_t model_update(conv_model* m, int64_t first, int64_t n, int64_t* ret) {
  int64_t r = 0;
  if (!m->has_prev) {
    m->has_prev = 1;
    for (int64_t j = 0; !m->record && j < m->k - n; j++) ret[r++] = -1;
  } else {
    for (int64_t j = 0; j < m->n; j++) ret[r++] = m->cols[j];
  }
  for (int64_t j = 0; j < n; j++) ret[r++] = first + j;
  int64_t from = m->record || r <= m->k ? 0 : r - m->k;
  m->n = 0;
  for (int64_t j = from; j < r; j++) m->cols[m->n++] = ret[j];
  return r;
}

/* The legacy protocol: roll left by one, then column j at clamp(pos[j], 0, K-1). */
static void model_legacy(conv_model* m, int64_t first, int64_t n, const int64_t* pos) {
  if (m->n == 0) {
    for (int64_t j = 0; j < m->k; j++) m->cols[j] = -1;
    m->n = m->k;
  }
  int64_t head = m->cols[0];
  for (int64_t j = 0; j + 1 < m->n; j++) m->cols[j] = m->cols[j + 1];
  m->cols[m->n - 1] = head;
  for (int64_t j = 0; j < n; j++) {
    int64_t p = pos[j] < 0 ? 0 : pos[j] > m->k - 1 ? m->k - 1 : pos[j];
    m->cols[p] = first + j;
  }
  m->has_prev = 1;
}

/* crop(tokens <= 0): conv[..., -t-K : -t], or conv[..., -K:] for 0, Python's clamped slices. */
static void model_crop(conv_model* m, int64_t tokens) {
  int64_t t = -tokens, len = m->n;
  int64_t end = t == 0 ? len : (t < len ? len - t : 0);
  int64_t begin = end > m->k ? end - m->k : 0;
  for (int64_t j = begin; j < end; j++) m->cols[j - begin] = m->cols[j];
  m->n = end - begin;
}

/* ------------------------------------------------------------------ traces */

/* 'Linear conv state trace': K = 4, no recording. */
static void test_trace_d7(void) {
  kvc_cache* c = tl_linear(1, 4);
  REQUIRE(c != NULL);
  kvc_tensor ret;
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 0);
  REQUIRE_OK(tl_conv(c, 0, 1, 3, 0, 6, NULL, &ret)); /* [a..f] */
  const int64_t a_f[6] = {0, 1, 2, 3, 4, 5}, c_f[4] = {2, 3, 4, 5}, c_g[5] = {2, 3, 4, 5, 6}, d_g[4] = {3, 4, 5, 6};
  CHECK_CONV(&ret, 1, 3, a_f, 6, NULL); /* no padding: 6 >= K */
  CHECK_CONV_STATE(c, 0, 0, 1, 3, c_f, 4);
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 1);
  REQUIRE_OK(tl_conv(c, 0, 1, 3, 6, 1, NULL, &ret)); /* [g] */
  CHECK_CONV(&ret, 1, 3, c_g, 5, NULL);
  CHECK_CONV_STATE(c, 0, 0, 1, 3, d_g, 4);
  kvc_cache_destroy(c);

  /* A prefill of length 2 returns [0, 0, a, b] and stores it. */
  c = tl_linear(1, 4);
  REQUIRE(c != NULL);
  REQUIRE_OK(tl_conv(c, 0, 2, 2, 0, 2, NULL, &ret));
  const int64_t padded[4] = {-1, -1, 0, 1};
  CHECK_CONV(&ret, 2, 2, padded, 4, NULL);
  CHECK_CONV_STATE(c, 0, 0, 2, 2, padded, 4);
  kvc_cache_destroy(c);
}

/* 'Legacy MambaCache conv trace': legacy MambaCache (generation 2), K = 4: prefill positions 0..3, then [4] clamped to 3. */
static void test_trace_d8(void) {
  kvc_cache* c = tl_linear(1, 4);
  REQUIRE(c != NULL);
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  TU_POSITIONS(o, 0, 1, 2, 3);
  kvc_tensor ret;
  /* The mixer passes pad(x, (4 - 6, 0)): the last 4 of 6 prefill columns, times 2..5 (c..f). */
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 2, 4, &o, &ret));
  const int64_t c_f[4] = {2, 3, 4, 5}, d_g[4] = {3, 4, 5, 6};
  CHECK_CONV(&ret, 1, 2, c_f, 4, NULL);
  TU_POSITIONS(o, 4);
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 6, 1, &o, &ret));
  CHECK_CONV(&ret, 1, 2, d_g, 4, NULL);
  CHECK_CONV_STATE(c, 0, 0, 1, 2, d_g, 4);
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 1);
  /* The roll is exact: a position that is not the last keeps the rolled-in oldest column at the end. */
  TU_POSITIONS(o, 1); /* mid */
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 7, 1, &o, &ret));
  const int64_t rolled[4] = {4, 7, 6, 3};
  CHECK_CONV(&ret, 1, 2, rolled, 4, NULL);
  kvc_cache_destroy(c);
}

/* Generation 4's cache_init flag is cache_position = 0..K-1 with K columns: the state becomes the input. */
static void test_legacy_cache_init_equivalence(void) {
  kvc_cache* c = tl_linear(1, 3);
  REQUIRE(c != NULL);
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  TU_POSITIONS(o, 0, 1, 2);
  REQUIRE_OK(tl_conv(c, 0, 2, 3, 10, 3, &o, NULL));
  REQUIRE_OK(tl_conv(c, 0, 2, 3, 20, 3, &o, NULL)); /* a second cache_init overwrites everything */
  CHECK_CONV_STATE_IS(c, 0, 0, 2, 3, 20, 21, 22);
  TU_POSITIONS(o, 2); /* the last */
  REQUIRE_OK(tl_conv(c, 0, 2, 3, 23, 1, &o, NULL));
  CHECK_CONV_STATE_IS(c, 0, 0, 2, 3, 21, 22, 23);
  kvc_cache_destroy(c);
}

/* Without a configured K, the first input's last dimension becomes K (transformers' trap), unless the option says. */
static void test_kernel_from_first_input(void) {
  kvc_tensor ret;
  kvc_cache* c = tl_linear_fed(2, 0, 1, 1, 5, &ret); /* K = 5 */
  REQUIRE(c != NULL);
  kvc_layer_info li = tu_info(c, 0);
  CHECK_EQ_I64(li.conv_kernel_size, 5);
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 5, 1, NULL, &ret));
  CHECK_CONV_STATE_IS(c, 0, 0, 1, 1, 1, 2, 3, 4, 5);
  /* State 1 with an explicit K = 3 and a first input of 1 column: padded to 3. */
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  o.state_index = 1;
  o.conv_kernel_size = 3;
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 0, 1, &o, &ret));
  CHECK_CONV_IS(&ret, 1, 1, -1, -1, 0);
  /* Later calls may pass the same K (as Mamba does on every call) or none. */
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 1, 2, &o, &ret));
  o.conv_kernel_size = 0;
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 3, 1, &o, &ret));
  CHECK_CONV_IS(&ret, 1, 1, 0, 1, 2, 3);
  kvc_cache_destroy(c);
}

/* A zero-column input: padding only on the first call, the stored columns afterwards. */
static void test_zero_columns(void) {
  kvc_tensor ret;
  kvc_cache* c = tl_linear_fed(1, 3, 1, 2, 0, &ret);
  REQUIRE(c != NULL);
  CHECK_CONV_IS(&ret, 1, 2, -1, -1, -1);
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 0, 2, NULL, &ret));
  CHECK_CONV_IS(&ret, 1, 2, -1, -1, -1, 0, 1);
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 2, 0, NULL, &ret));
  CHECK_CONV_IS(&ret, 1, 2, -1, 0, 1);
  kvc_cache_destroy(c);
}

/* ------------------------------------------------------- recording, crop */

static void test_recording_and_crop(void) {
  kvc_cache* c = tl_linear(1, 3);
  REQUIRE(c != NULL);
  /* Not recording: crop refuses, whatever the argument, even before any update ('Linear-attention layers'). */
  CHECK_ERR(kvc_cache_crop(c, 0), KVC_ERROR_INVALID_STATE);
  CHECK_ERR(kvc_cache_crop(c, -1), KVC_ERROR_INVALID_STATE);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  CHECK(tu_info(c, 0).records_past);
  CHECK_ERR(kvc_cache_crop(c, 2), KVC_ERROR_INVALID_STATE); /* positive: refused */
  CHECK_OK(kvc_cache_crop(c, -1));                          /* nothing recorded yet: nothing to do */
  kvc_tensor ret;
  /* Recording: the first call is not padded and the state keeps everything. */
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 0, 2, NULL, &ret));
  CHECK_CONV_IS(&ret, 1, 2, 0, 1);
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 2, 3, NULL, &ret));
  CHECK_CONV_IS(&ret, 1, 2, 0, 1, 2, 3, 4);
  for (int64_t t = 5; t < 40; t++) REQUIRE_OK(tl_conv(c, 0, 1, 2, t, 1, NULL, &ret));
  kvc_tensor st = tl_conv_view(c, 0, 0);
  CHECK_EQ_I64(st.shape[2], 40);
  /* crop(-2): conv[..., -2-3 : -2] = times 35..37. */
  REQUIRE_OK(kvc_cache_crop(c, -2));
  CHECK_CONV_STATE_IS(c, 0, 0, 1, 2, 35, 36, 37);
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 1); /* crop keeps has_previous_state */
  /* Going on from the rolled-back state. */
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 38, 2, NULL, &ret));
  const int64_t more[5] = {35, 36, 37, 38, 39};
  CHECK_CONV(&ret, 1, 2, more, 5, NULL);
  /* crop(0): back to the last K. */
  REQUIRE_OK(kvc_cache_crop(c, 0));
  CHECK_CONV_STATE_IS(c, 0, 0, 1, 2, 37, 38, 39);
  /* Removing more than K + stored: Python's slice clamps to an empty state; later updates start from nothing. */
  REQUIRE_OK(kvc_cache_crop(c, -1));
  const int64_t left[2] = {37, 38};
  CHECK_CONV_STATE(c, 0, 0, 1, 2, left, 2);
  REQUIRE_OK(kvc_cache_crop(c, INT64_MIN));
  st = tl_conv_view(c, 0, 0);
  CHECK_EQ_I64(st.ndim, 3);
  CHECK_EQ_I64(st.shape[2], 0);
  REQUIRE_OK(tl_conv(c, 0, 1, 2, 50, 1, NULL, &ret));
  CHECK_CONV_IS(&ret, 1, 2, 50);
  kvc_cache_destroy(c);
}

/* Recording switched on after decoding without it: the K stored columns grow from there. */
static void test_recording_after_decoding(void) {
  kvc_cache* c = tl_linear(1, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 0, 1, NULL, NULL));
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 1, 1, NULL, NULL));
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 2, 3, NULL, NULL));
  CHECK_CONV_STATE_IS(c, 0, 0, 1, 1, 0, 1, 2, 3, 4);
  kvc_cache_destroy(c);
}

/* ------------------------------------------------------------------ reset */

static void test_reset(void) {
  kvc_tensor ret;
  kvc_cache* c = tl_linear_fed(2, 3, 2, 2, 5, &ret);
  REQUIRE(c != NULL);
  int64_t shape[3] = {2, 4, 3};
  tl_tensor s;
  tl_rec_input(&s, KVC_DTYPE_FLOAT32, 3, shape, 1.0f);
  REQUIRE_OK(kvc_cache_update_recurrent_state(c, 0, 1, &s.t, NULL));
  tl_free(&s);
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 1);
  CHECK_EQ_I64(tl_has_prev(c, 0, 1), 0);
  CHECK_EQ_I64(tl_has_prev(c, 0, -1), 0); /* all states: state 1 never had a conv update */
  CHECK(!tu_info(c, 0).has_previous_state);
  REQUIRE_OK(kvc_cache_reset(c));
  CHECK_EQ_I64(tl_has_prev(c, 0, 0), 0);
  /* States keep their shape, zeroed in place. */
  CHECK_CONV_STATE_IS(c, 0, 0, 2, 2, -1, -1, -1);
  kvc_tensor rv = tl_rec_view(c, 0, 1);
  REQUIRE_EQ_I64(rv.ndim, 3);
  float f[24];
  REQUIRE_EQ_I64(tu_read_view(&rv, f), 24);
  int nonzero = 0;
  for (int i = 0; i < 24; i++) nonzero += f[i] != 0.0f;
  CHECK_EQ_I64(nonzero, 0);
  /* The next call is a first call again: padded. */
  REQUIRE_OK(tl_conv(c, 0, 2, 2, 9, 1, NULL, &ret));
  CHECK_CONV_IS(&ret, 2, 2, -1, -1, 9);
  kvc_cache_destroy(c);
}

/* ----------------------------------------------- random sequences vs model */

typedef struct rng {
  uint64_t s;
} rng;

static int64_t rng_int(rng* r, int64_t lo, int64_t hi) { return xs64_range(&r->s, lo, hi); }

/* Random updates, crops, resets and legacy calls on one state, compared with the model after every call. */
static void test_random_against_model(void) {
  rng r = {0x9E3779B97F4A7C15ull};
  for (int round = 0; round < 60; round++) {
    int64_t k = rng_int(&r, 1, 5), B = rng_int(&r, 1, 3), C = rng_int(&r, 1, 3);
    int record = round % 3 == 0;
    kvc_cache* c = tl_linear(1, k);
    REQUIRE(c != NULL);
    if (record) REQUIRE_OK(kvc_cache_activate_past_recording(c));
    conv_model* m = (conv_model*)calloc(1, sizeof *m);
    REQUIRE(m != NULL);
    m->k = k;
    m->record = record;
    int64_t t = 0, ret[4096];
    int legacy = !record && round % 3 == 1;
    for (int step = 0; step < 80 && m->n < 3000; step++) {
      int64_t what = rng_int(&r, 0, 9);
      if (what == 0) {
        REQUIRE_OK(kvc_cache_reset(c));
        for (int64_t j = 0; j < m->n; j++) m->cols[j] = -1;
        m->has_prev = 0;
      } else if (what == 1 && record && m->has_prev) {
        int64_t x = -rng_int(&r, 0, 6);
        REQUIRE_OK(kvc_cache_crop(c, x));
        model_crop(m, x);
      } else if (legacy) {
        int64_t n = m->has_prev ? 1 : k, pos[8];
        for (int64_t j = 0; j < n; j++) pos[j] = m->has_prev ? rng_int(&r, -1, k + 2) : j;
        kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
        o.cache_position = pos;
        o.cache_position_length = (uint32_t)n;
        kvc_tensor got;
        REQUIRE_OK(tl_conv(c, 0, B, C, t, n, &o, &got));
        model_legacy(m, t, n, pos);
        CHECK_CONV(&got, B, C, m->cols, m->n, NULL);
        t += n;
      } else {
        int64_t n = rng_int(&r, 0, 1) ? 1 : rng_int(&r, 0, 9);
        kvc_tensor got;
        REQUIRE_OK(tl_conv(c, 0, B, C, t, n, NULL, &got));
        int64_t rn = model_update(m, t, n, ret);
        CHECK_CONV(&got, B, C, ret, rn, NULL);
        t += n;
      }
      kvc_tensor st = tl_conv_view(c, 0, 0);
      if (m->has_prev || m->n) CHECK_CONV(&st, B, C, m->cols, m->n, NULL);
      CHECK_EQ_I64(tl_has_prev(c, 0, 0), m->has_prev);
      if (tu_failures_total) break;
    }
    free(m);
    kvc_cache_destroy(c);
    if (tu_failures_total) return;
  }
}

/* Steady one-column decoding allocates nothing and keeps the footprint fixed (the region moves, not the history). */
static void test_steady_decoding_fixed_memory(void) {
  kvc_cache* c = tl_linear(1, 4);
  REQUIRE(c != NULL);
  REQUIRE_OK(tl_conv(c, 0, 2, 8, 0, 7, NULL, NULL));
  kvc_memory_info m0 = tu_memory(c);
  CHECK(m0.bytes_state > 0);
  CHECK_EQ_U64(m0.bytes_state, m0.bytes_reserved);
  kvc_tensor ret;
  for (int64_t t = 7; t < 1000; t++) {
    REQUIRE_OK(tl_conv(c, 0, 2, 8, t, 1, NULL, &ret));
    const int64_t want[5] = {t - 4, t - 3, t - 2, t - 1, t};
    if (!CHECK_CONV(&ret, 2, 8, want, 5, NULL)) break;
  }
  kvc_memory_info m1 = tu_memory(c);
  CHECK_EQ_U64(m1.bytes_reserved, m0.bytes_reserved);
  kvc_cache_destroy(c);
}

/* Every dtype is stored and returned bit for bit, and inputs with any strides are read correctly. */
static void test_dtypes_and_strides(void) {
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  for (int d = 0; d < 3; d++) {
    kvc_cache* c = tl_linear(1, 3);
    REQUIRE(c != NULL);
    tl_tensor x, y;
    tl_conv_input_ex(&x, dts[d], 2, 3, 0, 2, 1); /* non-contiguous: time-major in memory */
    kvc_tensor ret;
    REQUIRE_OK(kvc_cache_update_conv_state(c, 0, &x.t, NULL, &ret));
    tl_conv_input_ex(&y, dts[d], 2, 3, 2, 2, 0);
    REQUIRE_OK(kvc_cache_update_conv_state(c, 0, &y.t, NULL, &ret));
    CHECK_EQ_I64(kvc_dtype_from_data_type(ret.dtype), dts[d]);
    REQUIRE_EQ_I64(ret.shape[2], 5);
    /* Compare raw element bits with the inputs': column 0 is padding, 1-2 from x, 3-4 from y. */
    size_t es = tu_dtype_bytes(dts[d]);
    for (int64_t b = 0; b < 2; b++)
      for (int64_t ch = 0; ch < 3; ch++)
        for (int64_t j = 1; j < 5; j++) {
          const tl_tensor* src = j < 3 ? &x : &y;
          int64_t sj = j < 3 ? j - 1 : j - 3;
          int64_t gi[3] = {b, ch, j}, si[3] = {b, ch, sj};
          CHECK(memcmp(tu_elem_ptr(&ret, gi), tu_elem_ptr(&src->t, si), es) == 0);
        }
    tl_free(&x);
    tl_free(&y);
    kvc_cache_destroy(c);
  }
}

int main(void) {
  TU_RUN(test_trace_d7);
  TU_RUN(test_trace_d8);
  TU_RUN(test_legacy_cache_init_equivalence);
  TU_RUN(test_kernel_from_first_input);
  TU_RUN(test_zero_columns);
  TU_RUN(test_recording_and_crop);
  TU_RUN(test_recording_after_decoding);
  TU_RUN(test_reset);
  TU_RUN(test_random_against_model);
  TU_RUN(test_steady_decoding_fixed_memory);
  TU_RUN(test_dtypes_and_strides);
  return tu_finish();
}
