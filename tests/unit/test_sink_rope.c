/*
 * Sink layers with RoPE (docs/semantics.md, 'Sink layers' and 'Sink layer trace'): kept keys are re-rotated by
 * the angle of the new tokens, also at the first shift; the cos/sin table
 * comes from the first sink layer's updates only, as [batch, seq, dim] rows
 * appended up to the window or as a whole [seq, dim] table; a re-rotation is
 * computed once per number of new tokens; the table is cache state that
 * clone, split and stack carry, that reset forgets and that a failed call
 * leaves alone. The tables turn a quarter per position (test_sink.h), so every
 * expected key is exact.
 */
#include "test_sink.h"

/* update(layer, tokens) with 3-D quarter-turn cos/sin for positions first..first+n-1. */
static kvc_error* step3(kvc_cache* c, uint32_t layer, kvc_dtype dt, kvc_dtype cos_dt, int64_t b, int64_t h, int64_t dk,
                        int64_t partial, const int64_t* tokens, int64_t n, int64_t first, int turn, kvc_kv* out) {
  sk_rope r;
  sk_rope_make(&r, cos_dt, 3, b, first, n, partial ? partial : dk, turn);
  kvc_update_options o = sk_opts(&r, partial);
  kvc_error* e = sk_update(c, layer, dt, b, h, dk, 1, tokens, n, &o, out);
  sk_rope_free(&r);
  return e;
}

/* update(layer, tokens) with a whole 2-D table of `rows` positions from 0. */
static kvc_error* step2(kvc_cache* c, uint32_t layer, int64_t b, int64_t dk, int64_t rows, int turn,
                        const int64_t* tokens, int64_t n, kvc_kv* out) {
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 2, 1, 0, rows, dk, turn);
  kvc_update_options o = sk_opts(&r, 0);
  kvc_error* e = sk_update(c, layer, KVC_DTYPE_FLOAT32, b, 1, dk, 1, tokens, n, &o, out);
  sk_rope_free(&r);
  return e;
}

/*
 * 'Sink layer trace' with RoPE: at the first shift tokens 2, 3, 4 stay in slots 2..4 and are
 * still rotated back by one position (transformers' first-shift quirk); from
 * then on every kept key turns once per shift of one token, twice for two.
 */
static void d6_rope(kvc_dtype dt, kvc_dtype cos_dt) {
  kvc_cache* c = sk_cache(6, 2, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  REQUIRE_OK(step3(c, 0, dt, cos_dt, 1, 1, 2, 0, TU_LIST(0, 1, 2, 3), 4, 0, 1, &out));
  REQUIRE_OK(step3(c, 0, dt, cos_dt, 1, 1, 2, 0, TU_LIST(4), 1, 4, 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 2, 3, 4), ((const int[]){0, 0, 0, 0, 0}), 5, 2);
  REQUIRE_OK(step3(c, 0, dt, cos_dt, 1, 1, 2, 0, TU_LIST(5), 1, 5, 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 2, 3, 4, 5), ((const int[]){0, 0, 1, 1, 1, 0}), 6, 2);
  REQUIRE_OK(step3(c, 0, dt, cos_dt, 1, 1, 2, 0, TU_LIST(6), 1, 6, 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 3, 4, 5, 6), ((const int[]){0, 0, 2, 2, 1, 0}), 6, 2);
  REQUIRE_OK(step3(c, 0, dt, cos_dt, 1, 1, 2, 0, TU_LIST(7, 8), 2, 7, 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 5, 6, 7, 8), ((const int[]){0, 0, 3, 2, 0, 0}), 6, 2);
  CHECK_SINK(tu_view(c, 0), TU_LIST(0, 1, 5, 6, 7, 8), ((const int[]){0, 0, 3, 2, 0, 0}), 6, 2);
  kvc_cache_destroy(c);
}

static void test_d6_first_shift_quirk(void) { d6_rope(KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32); }

/* The rotation is applied in the key dtype, whatever the dtype of cos/sin. */
static void test_d6_dtypes(void) {
  d6_rope(KVC_DTYPE_FLOAT16, KVC_DTYPE_FLOAT16);
  d6_rope(KVC_DTYPE_BFLOAT16, KVC_DTYPE_BFLOAT16);
  d6_rope(KVC_DTYPE_BFLOAT16, KVC_DTYPE_FLOAT32);
  d6_rope(KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16);
}

/* The older form: every call passes the whole [seq, dim] table. */
static void test_whole_table_form(void) {
  kvc_cache* c = sk_cache(6, 2, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  REQUIRE_OK(step2(c, 0, 1, 4, 6, 1, TU_LIST(0, 1, 2, 3, 4), 5, &out));
  REQUIRE_OK(step2(c, 0, 1, 4, 9, 1, TU_LIST(5), 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 2, 3, 4, 5), ((const int[]){0, 0, 1, 1, 1, 0}), 6, 4);
  REQUIRE_OK(step2(c, 0, 1, 4, 6, 1, TU_LIST(6), 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 3, 4, 5, 6), ((const int[]){0, 0, 2, 2, 1, 0}), 6, 4);
  kvc_cache_destroy(c);
}

/* partial_rotation_size: only the first channels turn (Phi, Persimmon); the rest are kept as they are. */
static void test_partial_rotation(void) {
  const int64_t dims[2][2] = {{3, 2}, {6, 4}};
  for (int i = 0; i < 2; i++) {
    int64_t dk = dims[i][0], rot = dims[i][1];
    kvc_cache* c = sk_cache(4, 1, 0);
    REQUIRE(c != NULL);
    kvc_kv out;
    REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 2, dk, rot, TU_LIST(0, 1, 2), 3, 0, 1, &out));
    REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 2, dk, rot, TU_LIST(3), 1, 3, 1, &out));
    CHECK_SINK(out, TU_LIST(0, 1, 2, 3), ((const int[]){0, 1, 1, 0}), 4, rot);
    REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 2, dk, rot, TU_LIST(4), 1, 4, 1, &out));
    CHECK_SINK(out, TU_LIST(0, 2, 3, 4), ((const int[]){0, 2, 1, 0}), 4, rot);
    kvc_cache_destroy(c);
  }
}

/*
 * Only the first sink layer records the table (transformers: layer 0): the
 * identity cos/sin that layer 1 receives are not recorded, and its keys turn
 * with layer 0's table. In a custom cache the first sink layer need not be 0.
 */
static void test_table_comes_from_the_first_sink_layer(void) {
  kvc_cache* c = sk_cache(4, 1, 2);
  REQUIRE(c != NULL);
  kvc_kv out;
  for (int64_t t = 0; t < 5; t++) {
    REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 1, 2, 0, &t, 1, t, 1, NULL));
    REQUIRE_OK(step3(c, 1, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 1, 2, 0, &t, 1, t, 0, &out));
  }
  CHECK_SINK(out, TU_LIST(0, 2, 3, 4), ((const int[]){0, 2, 1, 0}), 4, 2);
  kvc_cache_destroy(c);

  kvc_layer_options layers[2] = {tu_layer(KVC_LAYER_DYNAMIC, 0, 0), tu_layer(KVC_LAYER_SINK, 4, 0)};
  layers[1].num_sink_tokens = 1;
  c = tu_custom_cache(2, layers);
  REQUIRE(c != NULL);
  for (int64_t t = 0; t < 5; t++) {
    REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 1, 2, 0, &t, 1, t, 0, NULL));
    REQUIRE_OK(step3(c, 1, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 1, 2, 0, &t, 1, t, 1, &out));
  }
  CHECK_SINK(out, TU_LIST(0, 2, 3, 4), ((const int[]){0, 2, 1, 0}), 4, 2);
  kvc_cache_destroy(c);
}

/*
 * A re-rotation is computed at the first shift by that many tokens and kept
 * (transformers' dict keyed by the number of new tokens): after the table is
 * replaced by the identity, one-token shifts still turn by the old table, and
 * a first two-token shift uses the new one.
 */
static void test_rerotation_is_computed_once_per_size(void) {
  kvc_cache* c = sk_cache(4, 1, 0);
  REQUIRE(c != NULL);
  kvc_kv out;
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 1, TU_LIST(0, 1, 2, 3), 4, &out));
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 1, TU_LIST(4), 1, &out));
  CHECK_SINK(out, TU_LIST(0, 2, 3, 4), ((const int[]){0, 1, 1, 0}), 4, 2);
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 0, TU_LIST(5), 1, &out)); /* identity table, cached quarter turn */
  CHECK_SINK(out, TU_LIST(0, 3, 4, 5), ((const int[]){0, 2, 1, 0}), 4, 2);
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 0, TU_LIST(6, 7), 2, &out)); /* first 2-token shift: the identity */
  CHECK_SINK(out, TU_LIST(0, 5, 6, 7), ((const int[]){0, 0, 0, 0}), 4, 2);
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 0, TU_LIST(8), 1, &out));
  CHECK_SINK(out, TU_LIST(0, 6, 7, 8), ((const int[]){0, 1, 1, 0}), 4, 2);
  kvc_cache_destroy(c);
}

/*
 * A call that fails changes nothing, the table included: update_all records
 * layer 0's table before layer 1 is looked at in transformers, but here
 * layer 1's refusal leaves the quarter table in place for the next call.
 */
static void test_failed_call_keeps_the_table(void) {
  kvc_cache* c = sk_two_layers(6, 3);
  REQUIRE(c != NULL);
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 3, 1, 0, 6, 2, 1);
  kvc_update_options o = sk_opts(&r, 0);
  REQUIRE_OK(sk_update_all(c, 2, 2, 1, TU_LIST(0, 1, 2, 3, 4, 5), 6, &o, NULL));
  sk_rope_free(&r);
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 2, 1, 0, 8, 2, 0);
  o = sk_opts(&r, 0);
  /* layer 1: 3 - 1 - 2 = 0 */
  CHECK_UNCHANGED_BY(c, CHECK_ERR(sk_update_all(c, 2, 2, 1, TU_LIST(6, 7), 2, &o, NULL), KVC_ERROR_INVALID_ARGUMENT));
  sk_rope_free(&r);
  kvc_kv out;
  REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 1, 2, 0, TU_LIST(6), 1, 6, 0, &out));
  CHECK_SINK(out, TU_LIST(1, 2, 3, 4, 5, 6), ((const int[]){1, 1, 1, 1, 1, 0}), 6, 2);
  kvc_cache_destroy(c);
}

/* Keys [0, kept) of a view: the first n positions of its keys and values. */
static kvc_kv prefix(kvc_kv kv, int64_t n, int64_t shapes[2][4]) {
  memcpy(shapes[0], kv.key.shape, sizeof shapes[0]);
  memcpy(shapes[1], kv.value.shape, sizeof shapes[1]);
  shapes[0][2] = shapes[1][2] = n;
  kv.key.shape = shapes[0];
  kv.value.shape = shapes[1];
  return kv;
}

/*
 * Clone and split carry the table recorded so far: the derived caches append
 * the next row to it and re-rotate with it (a lost table would make the shift
 * fail: one recorded row is not a window). Stack takes it from the splits.
 */
static void test_clone_split_stack_carry_the_table(void) {
  kvc_cache* c = sk_cache(4, 1, 0);
  REQUIRE(c != NULL);
  REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 2, 1, 2, 0, TU_LIST(0, 1, 2), 3, 0, 1, NULL));
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  kvc_kv out;
  REQUIRE_OK(step3(d, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 2, 1, 2, 0, TU_LIST(3), 1, 3, 1, &out));
  CHECK_SINK(out, TU_LIST(0, 1, 2, 3), ((const int[]){0, 1, 1, 0}), 4, 2);

  kvc_cache* parts[2] = {NULL, NULL};
  size_t count = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, 2, 1, parts, 2, &count));
  REQUIRE_EQ_I64(count, 2);
  int64_t shapes[2][4];
  for (int p = 0; p < 2; p++) {
    REQUIRE_OK(step3(parts[p], 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 1, 1, 2, 0, TU_LIST(3), 1, 3, 1, &out));
    const int64_t row[1] = {p};
    CHECK_SINK_ROWS(prefix(out, 3, shapes), TU_LIST(0, 1, 2), ((const int[]){0, 1, 1}), 3, 2, row);
  }
  kvc_cache* s = NULL;
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &s));
  /* the table is full (4 rows): identity rows are not appended; a first 2-token shift turns twice */
  REQUIRE_OK(step3(s, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 2, 1, 2, 0, TU_LIST(4, 5), 2, 4, 0, &out));
  CHECK_SHAPE(out.key, 2, 1, 4, 2);
  for (int64_t b = 0; b < 2; b++) {
    CHECK_EQ_F64(tu_get(&out.key, b, 0, 0, 0), sk_turned(0, b, 0, 0, 0, 2));
    CHECK_EQ_F64(tu_get(&out.key, b, 0, 1, 1), sk_turned(3, 0, 0, 1, 2, 2)); /* token 3 came from the splits' row 0 */
    CHECK_EQ_F64(tu_get(&out.key, b, 0, 3, 0), sk_turned(5, b, 0, 0, 0, 2));
  }
  TU_DESTROY(s, parts[0], parts[1], d, c);
}

/*
 * reset forgets the table and the re-rotations, as a new SinkCache would: the
 * next one-token shift computes its rotation from the identity table given
 * after the reset, and a layer that shifts before layer 0 has recorded a new
 * table is refused.
 */
static void test_reset_forgets_the_table(void) {
  kvc_cache* c = sk_cache(4, 1, 2);
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 2; i++) {
    REQUIRE_OK(step2(c, i, 1, 2, 4, 1, TU_LIST(0, 1, 2, 3), 4, NULL));
    REQUIRE_OK(step2(c, i, 1, 2, 4, 1, TU_LIST(4), 1, NULL));
  }
  REQUIRE_OK(kvc_cache_reset(c));
  kvc_kv out;
  REQUIRE_OK(step2(c, 1, 1, 2, 4, 0, TU_LIST(10, 11, 12, 13), 4, NULL));
  CHECK_ERR(step2(c, 1, 1, 2, 4, 0, TU_LIST(14), 1, NULL), KVC_ERROR_INVALID_STATE);
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 0, TU_LIST(10, 11, 12, 13), 4, NULL));
  REQUIRE_OK(step2(c, 0, 1, 2, 4, 0, TU_LIST(14), 1, &out));
  CHECK_SINK(out, TU_LIST(10, 12, 13, 14), ((const int[]){0, 0, 0, 0}), 4, 2);
  kvc_cache_destroy(c);
}

/* reorder moves rows; the next shift turns every kept key of every row. */
static void test_reorder_then_shift(void) {
  kvc_cache* c = sk_cache(4, 1, 0);
  REQUIRE(c != NULL);
  REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 2, 2, 2, 0, TU_LIST(0, 1, 2), 3, 0, 1, NULL));
  const int64_t idx[2] = {1, 0};
  REQUIRE_OK(kvc_cache_reorder(c, idx, 2));
  kvc_kv out;
  REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, 2, 2, 2, 0, TU_LIST(3), 1, 3, 1, &out));
  int64_t shapes[2][4];
  CHECK_SINK_ROWS(prefix(out, 3, shapes), TU_LIST(0, 1, 2), ((const int[]){0, 1, 1}), 3, 2, idx);
  for (int64_t b = 0; b < 2; b++) CHECK_EQ_F64(tu_get(&out.key, b, 1, 3, 1), sk_turned(3, b, 1, 1, 0, 2));
  kvc_cache_destroy(c);
}

enum { STEADY_B = 2, STEADY_H = 2, STEADY_D = 4 };

/* A decode step of test_steady_decoding_with_rope: token t at position t, turned a quarter. */
static kvc_error* decode_with_rope(kvc_cache* c, int64_t t) {
  return step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, STEADY_B, STEADY_H, STEADY_D, 0, &t, 1, t, 1, NULL);
}

/*
 * Steady decoding with RoPE on a full window: no allocation (same store, same
 * memory), and the token k positions before the newest has turned k quarters.
 */
static void test_steady_decoding_with_rope(void) {
  const int64_t W = 32, S = 4, D = STEADY_D;
  kvc_cache* c = sk_cache(W, S, 0);
  REQUIRE(c != NULL);
  int64_t toks[64];
  REQUIRE_OK(step3(c, 0, KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT32, STEADY_B, STEADY_H, D, 0, tu_range(toks, 0, W), W, 0,
                   1, NULL));
  REQUIRE_OK(decode_with_rope(c, W));
  kvc_kv st = sk_decode_in_place(c, 0, W + 1, W + 200, decode_with_rope);
  int64_t want[32];
  sk_window_tokens(want, W, S, W + 200);
  int q[32];
  for (int64_t s = 0; s < W; s++) q[s] = s < S ? 0 : (int)(W - 1 - s);
  CHECK_SINK(st, want, q, W, D);
  kvc_cache_destroy(c);
}

/* ------------------------------------------------------------ a scalar reference */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint32_t rnd(void) { return tu_xorshift32(&rng_state); }

/* A random finite value of dtype dt (any magnitude, subnormals included; a quarter near the largest), as float. */
static float random_value(kvc_dtype dt) {
  for (;;) {
    uint32_t u = rnd();
    if (u % 4 == 0) /* the top binade, where sums overflow to infinity */
      u = dt == KVC_DTYPE_FLOAT32 ? (u & 0x807fffffu) | 0x7f000000u
          : dt == KVC_DTYPE_FLOAT16 ? (u & 0x83ffu) | 0x7800u
                                    : (u & 0x807fu) | 0x7f00u;
    float f = dt == KVC_DTYPE_FLOAT32   ? tu_bits_f32(u)
              : dt == KVC_DTYPE_FLOAT16 ? tu_f16_to_f32((uint16_t)u)
                                        : tu_bf16_to_f32((uint16_t)u);
    if (f == f && f - f == 0.0f) return f;
  }
}

static float rounded(kvc_dtype dt, float f) {
  if (dt == KVC_DTYPE_FLOAT16) return tu_f16_to_f32(tu_f32_to_f16(f));
  if (dt == KVC_DTYPE_BFLOAT16) return tu_bf16_to_f32(tu_f32_to_bf16(f));
  return f;
}

/*
 * Keys of any magnitude (products that underflow to subnormals or sums that
 * overflow to infinity included) and a table of arbitrary cos/sin values:
 * the re-rotated keys equal, bit for bit, transformers' formula evaluated
 * here one rounded operation at a time (float32 tables cast to the key
 * dtype, then k * c + rotate_half(k) * s in the key dtype).
 */
static void test_rotation_matches_a_scalar_reference(void) {
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  enum { D = 7, W = 4, SINKS = 1, ROWS = W - SINKS - 1 };
  for (int t = 0; t < 3; t++)
    for (int round = 0; round < 40; round++) {
      kvc_dtype dt = dts[t];
      int64_t rot = round % 2 ? 6 : D; /* odd and partial rotary sizes */
      float keys[3][D], tc[W][D], ts[W][D];
      for (int i = 0; i < 3; i++)
        for (int d = 0; d < D; d++) keys[i][d] = random_value(dt);
      for (int p = 0; p < W; p++)
        for (int d = 0; d < D; d++) {
          /* cos/sin in [-1, 1], some tiny; given as float32 (the table is float32 for any key dtype) */
          float m = (float)(rnd() % 2000001) / 1000000.0f - 1.0f;
          tc[p][d] = rnd() % 8 ? m : m * 1e-6f;
          ts[p][d] = (float)(rnd() % 2000001) / 1000000.0f - 1.0f;
        }
      kvc_cache* c = sk_cache(W, SINKS, 0);
      REQUIRE(c != NULL);
      tu_tensor k, v, k1, v1;
      tu_tensor_make(&k, dt, 1, 1, 3, D, &keys[0][0]);
      tu_tensor_make(&v, dt, 1, 1, 3, D, NULL);
      float next[D] = {0};
      tu_tensor_make(&k1, dt, 1, 1, 1, D, next);
      tu_tensor_make(&v1, dt, 1, 1, 1, D, NULL);
      int64_t shape[2] = {W, rot};
      kvc_tensor cos, sin;
      memset(&cos, 0, sizeof cos);
      cos.device.device_type = KVC_DEVICE_CPU;
      cos.ndim = 2;
      cos.dtype = tu_data_type(KVC_DTYPE_FLOAT32);
      cos.shape = shape;
      int64_t strides[2] = {D, 1}; /* rows of D floats, of which rot are used */
      cos.strides = strides;
      sin = cos;
      cos.data = &tc[0][0];
      sin.data = &ts[0][0];
      kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
      o.rope_cos = &cos;
      o.rope_sin = &sin;
      o.partial_rotation_size = rot == D ? 0 : rot;
      kvc_kv out;
      REQUIRE_OK(kvc_cache_update(c, 0, &k.t, &v.t, &o, NULL));
      REQUIRE_OK(kvc_cache_update(c, 0, &k1.t, &v1.t, &o, &out));
      /* kept tokens 1 and 2 move from slots SINKS+1+j to SINKS+j */
      int64_t half = rot / 2, upper = rot - half;
      for (int j = 0; j < ROWS; j++)
        for (int64_t d = 0; d < D; d++) {
          const float* x = keys[1 + j];
          float want = x[d];
          if (d < rot) {
            int p = SINKS + 1 + j, q = SINKS + j;
            float cc = tc[p][d] * tc[q][d], ss = ts[p][d] * ts[q][d];
            float ns = -ts[p][d] * tc[q][d], cs = tc[p][d] * ts[q][d];
            float rc = rounded(dt, cc + ss), rs = rounded(dt, ns + cs);
            float other = d < upper ? -x[half + d] : x[d - upper];
            float a = rounded(dt, x[d] * rc), b = rounded(dt, other * rs);
            want = rounded(dt, a + b);
          }
          float got = tu_get(&out.key, 0, 0, 1 + j, d);
          if (!CHECK_EQ_U64(tu_f32_bits(got), tu_f32_bits(want)))
            fprintf(stderr, "    dtype %d, rotary %lld, kept row %d, channel %lld\n", (int)dt, (long long)rot, j,
                    (long long)d);
        }
      tu_tensor_free(&k);
      tu_tensor_free(&v);
      tu_tensor_free(&k1);
      tu_tensor_free(&v1);
      kvc_cache_destroy(c);
    }
}

int main(void) {
  TU_RUN(test_rotation_matches_a_scalar_reference);
  TU_RUN(test_d6_first_shift_quirk);
  TU_RUN(test_d6_dtypes);
  TU_RUN(test_whole_table_form);
  TU_RUN(test_partial_rotation);
  TU_RUN(test_table_comes_from_the_first_sink_layer);
  TU_RUN(test_rerotation_is_computed_once_per_size);
  TU_RUN(test_failed_call_keeps_the_table);
  TU_RUN(test_clone_split_stack_carry_the_table);
  TU_RUN(test_reset_forgets_the_table);
  TU_RUN(test_reorder_then_shift);
  TU_RUN(test_steady_decoding_with_rope);
  return tu_finish();
}
