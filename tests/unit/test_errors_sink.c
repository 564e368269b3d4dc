/*
 * Bad input to sink layers: every refusal names the function, the argument,
 * the value and the rule, and leaves the cache exactly as it was (checked
 * with a snapshot), including the cases where transformers' SinkCache fails
 * part-way or silently produces a wrong cache.
 */
#include "test_errors.h"
#include "test_sink.h"

#define FN "kvc_cache_update"

static kvc_error* create_sink(int64_t window, int64_t sinks) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = KVC_PRESET_SINK;
  o.window_length = window;
  o.num_sink_tokens = sinks;
  kvc_cache* c = NULL;
  kvc_error* e = kvc_cache_create(&o, &c);
  kvc_cache_destroy(c);
  return e;
}

static void test_create(void) {
  EXPECT_ERR(create_sink(3, 3), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "options->window_length is 3",
             "num_sink_tokens + 1");
  EXPECT_ERR(create_sink(0, 0), KVC_ERROR_INVALID_ARGUMENT, "options->window_length is 0");
  EXPECT_ERR(create_sink(4, -1), KVC_ERROR_INVALID_ARGUMENT, "options->num_sink_tokens is -1");
  EXPECT_ERR(create_sink(INT64_C(1) << 31, 0), KVC_ERROR_INVALID_ARGUMENT, "options->window_length is 2147483648");
  kvc_layer_options l = tu_layer(KVC_LAYER_SINK, 2, 0);
  l.num_sink_tokens = 2;
  kvc_cache_options o = tu_custom_options(1, &l);
  kvc_cache* c = NULL;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "options->layers[0].window (window_length) is 2");
  CHECK(c == NULL);
}

/* A one-layer cache, window 6 and 2 sinks, head_dim 4, holding a full window and the quarter-turn table. */
static kvc_cache* full_cache(void) {
  kvc_cache* c = sk_cache(6, 2, 0);
  if (!c) return NULL;
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 3, 1, 0, 6, 4, 1);
  kvc_update_options o = sk_opts(&r, 0);
  CHECK_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 4, 2, TU_LIST(0, 1, 2, 3, 4, 5), 6, &o, NULL));
  sk_rope_free(&r);
  return c;
}

/* update(layer 0) of n tokens with options o. */
static kvc_error* upd(kvc_cache* c, uint32_t layer, int64_t n, const kvc_update_options* o) {
  int64_t toks[16];
  return sk_update(c, layer, KVC_DTYPE_FLOAT32, 1, 1, 4, 2, tu_range(toks, 100, 100 + n), n, o, NULL);
}

/*
 * upd() with a table of its own, made and freed around the one call: float32 cos/sin of ndim dims turning a
 * quarter per position, rows first..first+rows-1 of `dim` channels, and partial rotation size `partial`.
 */
static kvc_error* upd_rope(kvc_cache* c, uint32_t layer, int64_t n, int ndim, int64_t first, int64_t rows, int64_t dim,
                           int64_t partial) {
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, ndim, 1, first, rows, dim, 1);
  kvc_update_options o = sk_opts(&r, partial);
  kvc_error* e = upd(c, layer, n, &o);
  sk_rope_free(&r);
  return e;
}

/* full_cache() and a one-token table for position 6: what each bad option below is made from. */
typedef struct rope_fixture {
  kvc_cache* c;
  sk_rope r;
} rope_fixture;

static int rope_fixture_open(rope_fixture* f) {
  f->c = full_cache();
  if (!f->c) return 0;
  sk_rope_make(&f->r, KVC_DTYPE_FLOAT32, 3, 1, 6, 1, 4, 1);
  return 1;
}

static void rope_fixture_close(rope_fixture* f) {
  sk_rope_free(&f->r);
  kvc_cache_destroy(f->c);
}

static void test_rope_options(void) {
  static const struct {
    int64_t partial;
    int drop; /* 1: no rope_sin, 2: no rope_cos */
    kvc_code code;
    const char* needles[3];
  } cases[] = {
      {0, 1, KVC_ERROR_INVALID_ARGUMENT, {"options->rope_sin is NULL", "both RoPE tensors"}},
      {0, 2, KVC_ERROR_INVALID_ARGUMENT, {"options->rope_cos is NULL"}},
      {-1, 0, KVC_ERROR_INVALID_ARGUMENT, {"options->partial_rotation_size is -1"}},
      {5, 0, KVC_ERROR_INVALID_ARGUMENT, {"options->partial_rotation_size is 5", "head_dim 4", "[0, head_dim]"}},
      /* cos has 4 channels, 2 are rotary */
      {2, 0, KVC_ERROR_SHAPE_MISMATCH,
       {"options->rope_cos.shape[2] is 4", "rotates 2", "options->partial_rotation_size"}},
  };
  rope_fixture f;
  REQUIRE(rope_fixture_open(&f));
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    kvc_update_options o = sk_opts(&f.r, cases[i].partial);
    if (cases[i].drop == 1) o.rope_sin = NULL;
    if (cases[i].drop == 2) o.rope_cos = NULL;
    EXPECT_ERR_UNCHANGED(f.c, upd(f.c, 0, 1, &o), cases[i].code, FN, cases[i].needles[0], cases[i].needles[1],
                         cases[i].needles[2]);
  }
  rope_fixture_close(&f);
}

static void test_rope_tensors(void) {
  rope_fixture f;
  REQUIRE(rope_fixture_open(&f));
  kvc_cache* c = f.c;
  sk_rope* r = &f.r; /* broken and repaired in place, one field at a time */
  kvc_update_options o = sk_opts(r, 0);
  int64_t saved[3];
  memcpy(saved, r->shape, sizeof saved);

  r->cos.ndim = 1;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_SHAPE_MISMATCH, FN, "options->rope_cos.ndim is 1",
                       "[seq, dim]");
  r->cos.ndim = 3;
  r->sin.ndim = 2;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_SHAPE_MISMATCH, FN, "options->rope_sin.ndim is 2",
                       "options->rope_cos.ndim is 3");
  r->sin.ndim = 3;
  r->cos.dtype.code = KVC_TYPE_CODE_INT;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_DTYPE_MISMATCH, FN, "options->rope_cos.dtype", "float32");
  r->cos.dtype.code = KVC_TYPE_CODE_FLOAT;
  r->sin.device.device_type = KVC_DEVICE_CUDA;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_DEVICE_MISMATCH, FN, "options->rope_sin is on device 2:0");
  r->sin.device.device_type = KVC_DEVICE_CPU;
  r->cos.shape = NULL;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "options->rope_cos.shape is NULL");
  r->cos.shape = r->shape;
  r->cos.data = NULL;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "options->rope_cos.data is NULL",
                       "4 elements");
  r->cos.data = r->cbuf;
  int64_t other[3] = {1, 2, 4};
  r->sin.shape = other;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_SHAPE_MISMATCH, FN, "options->rope_sin.shape[1] is 2",
                       "options->rope_cos.shape[1] is 1");
  r->sin.shape = r->shape;
  r->shape[0] = 0;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_SHAPE_MISMATCH, FN, "options->rope_cos.shape[0] (batch) is 0");
  r->shape[0] = 1;
  r->shape[1] = -3;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_SHAPE_MISMATCH, FN, "options->rope_cos.shape[1] is -3");
  memcpy(r->shape, saved, sizeof saved);
  r->shape[2] = 3;
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 1, &o), KVC_ERROR_SHAPE_MISMATCH, FN, "options->rope_cos.shape[2] is 3",
                       "rotates 4", "head_dim");
  memcpy(r->shape, saved, sizeof saved);
  CHECK_OK(upd(c, 0, 1, &o)); /* the same options, repaired, are accepted */
  rope_fixture_close(&f);
}

/*
 * With RoPE a shift must keep a token to re-rotate: transformers fails with a
 * broadcast error (or, when the kept slice has one row or none, keeps a wrong
 * cache) once new tokens >= window - sinks, and also for 0 new tokens.
 */
static void test_rope_shift_sizes(void) {
  kvc_cache* c = full_cache();
  REQUIRE(c != NULL);
  for (int64_t n = 4; n <= 7; n++) {
    char value[48];
    snprintf(value, sizeof value, "key.shape[2] (new tokens) is %lld", (long long)n);
    EXPECT_ERR_UNCHANGED(c, upd_rope(c, 0, n, 3, 6, n, 4, 0), KVC_ERROR_INVALID_ARGUMENT, FN, value,
                         "holds 6 tokens", "window_length 6", "num_sink_tokens 2",
                         "[1, window_length - num_sink_tokens - 1]");
  }
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 2, 1, 0, 6, 4, 1);
  kvc_update_options o = sk_opts(&r, 0);
  EXPECT_ERR_UNCHANGED(c, upd(c, 0, 0, &o), KVC_ERROR_INVALID_ARGUMENT, FN, "key.shape[2] (new tokens) is 0");
  CHECK_OK(upd(c, 0, 3, &o)); /* 6 - 2 - 3 = 1 token kept */
  CHECK_OK(upd(c, 0, 0, NULL)); /* without RoPE nothing is re-rotated: allowed */
  sk_rope_free(&r);
  kvc_cache_destroy(c);
}

/* update_all names the layer's argument keys[i], and refuses the whole call. */
static void test_update_all_names_the_layer(void) {
  kvc_cache* c = sk_two_layers(8, 4);
  REQUIRE(c != NULL);
  CHECK_OK(sk_update_all(c, 2, 2, 2, TU_LIST(0, 1, 2, 3), 4, NULL, NULL));
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 2, 1, 0, 8, 2, 1);
  kvc_update_options o = sk_opts(&r, 0);
  /* 3 tokens: layer 0 grows (4 + 3 < 8), layer 1 would keep 4 - 1 - 3 = 0 */
  EXPECT_ERR_UNCHANGED(c, sk_update_all(c, 2, 2, 2, TU_LIST(4, 5, 6), 3, &o, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update_all", "keys[1].shape[2] (new tokens) is 3", "layer 1");
  sk_rope_free(&r);
  kvc_cache_destroy(c);
}

/* One upd_rope() call of a table-state scenario: accepted (KVC_OK), or refused naming the needles. */
typedef struct rope_step {
  uint32_t layer;
  int64_t n;
  int ndim;
  int64_t first, rows, dim, partial;
  kvc_code code;
  const char* needles[3];
} rope_step;

/* The step's update; ndim 0 updates without RoPE. */
static kvc_error* rope_step_run(kvc_cache* c, const rope_step* s) {
  if (!s->ndim) return upd(c, s->layer, s->n, NULL);
  return upd_rope(c, s->layer, s->n, s->ndim, s->first, s->rows, s->dim, s->partial);
}

/* Runs the steps in order on a fresh sk_cache(window, sinks, layers); a refused step must change nothing. */
static void run_rope_steps(int64_t window, int64_t sinks, uint32_t layers, const rope_step* steps, size_t n) {
  kvc_cache* c = sk_cache(window, sinks, layers);
  REQUIRE(c != NULL);
  for (const rope_step* s = steps; s < steps + n; s++) {
    if (s->code == KVC_OK)
      CHECK_OK(rope_step_run(c, s));
    else
      EXPECT_ERR_UNCHANGED(c, rope_step_run(c, s), s->code, FN, s->needles[0], s->needles[1], s->needles[2]);
  }
  kvc_cache_destroy(c);
}

/* The table: recorded from the first sink layer, long enough for the window, as wide as the rotation. */
static void test_table_state(void) {
  /* layer 0 never got cos/sin (ndim 0: no RoPE): layer 1 has no table to re-rotate with (transformers:
   * TypeError on None); then a table shorter than the window (a broadcast error, or a wrong cache for one row) */
  static const rope_step no_table[] = {
      {0, 4, 0, 0, 0, 0, 0, KVC_OK, {NULL}},
      {1, 4, 2, 0, 4, 4, 0, KVC_OK, {NULL}},
      {1, 1, 2, 0, 4, 4, 0, KVC_ERROR_INVALID_STATE,
       {"layer 1", "no cos/sin table has been recorded", "layer 0 (the first sink layer)"}},
      {0, 1, 2, 0, 3, 4, 0, KVC_ERROR_INVALID_STATE, {"layer 0", "the recorded cos/sin table has 3 rows",
                                                      "window_length of 4"}},
  };
  run_rope_steps(4, 1, 2, no_table, sizeof no_table / sizeof no_table[0]);
  /* [batch, seq, dim] rows extend the table only with rows of its width */
  static const rope_step narrow_rows[] = {
      {0, 2, 3, 0, 2, 2, 2, KVC_OK, {NULL}},
      {0, 1, 3, 2, 1, 4, 0, KVC_ERROR_SHAPE_MISMATCH,
       {"options->rope_cos.shape[2] is 4", "recorded so far has 2 channels"}},
  };
  run_rope_steps(6, 2, 0, narrow_rows, sizeof narrow_rows / sizeof narrow_rows[0]);
  /* a full table of 2 channels cannot rotate 4 (the new rows are not recorded: the table is full); a
   * re-rotation computed for 2 channels is kept for its number of new tokens, and two new tokens compute
   * it again, from the 4-channel table */
  static const rope_step full_narrow[] = {
      {0, 4, 3, 0, 4, 2, 2, KVC_OK, {NULL}},
      {0, 1, 3, 4, 1, 4, 0, KVC_ERROR_SHAPE_MISMATCH,
       {"layer 0 rotates 4 key channels", "the recorded cos/sin table has 2"}},
      {0, 1, 2, 0, 4, 2, 2, KVC_OK, {NULL}},
      {0, 1, 2, 0, 4, 4, 0, KVC_ERROR_SHAPE_MISMATCH,
       {"rotates 4 key channels", "re-rotation for 1 new tokens was computed for 2"}},
      {0, 2, 2, 0, 4, 4, 0, KVC_OK, {NULL}},
  };
  run_rope_steps(4, 1, 0, full_narrow, sizeof full_narrow / sizeof full_narrow[0]);
}

/* A lazy cache refusing a first update creates no layer. */
static void test_lazy_first_update(void) {
  kvc_cache* c = sk_cache(4, 1, 0);
  REQUIRE(c != NULL);
  EXPECT_ERR_UNCHANGED(c, upd_rope(c, 2, 2, 3, 0, 2, 2, 0), KVC_ERROR_SHAPE_MISMATCH, FN,
                       "options->rope_cos.shape[2] is 2", "layer 2 rotates 4");
  CHECK_EQ_I64(kvc_cache_num_layers(c), 0);
  kvc_cache_destroy(c);
}

/* SinkCache has no crop, batch_select_indices or batch_repeat_interleave (AttributeError in transformers). */
static void test_operations_sinkcache_lacks(void) {
  kvc_cache* c = full_cache();
  REQUIRE(c != NULL);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, -1), KVC_ERROR_UNSUPPORTED, "kvc_cache_crop", "layer 0 is a sink layer",
                       "tokens -1");
  const int64_t idx[1] = {0};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_select_indices(c, idx, 1), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_batch_select_indices", "layer 0 is a sink layer", "batch_select_indices");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_batch_repeat_interleave(c, 2), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_batch_repeat_interleave", "layer 0 is a sink layer", "batch_repeat_interleave");
  const int64_t bad[1] = {1};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_reorder(c, bad, 1), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_reorder", "beam_idx[0] is 1");
  kvc_cache_destroy(c);
}

/* Options of the 0.1 size have no RoPE fields: the update is one without RoPE. */
static void test_old_update_options(void) {
  kvc_cache* c = full_cache();
  REQUIRE(c != NULL);
  kvc_update_options o = KVC_UPDATE_OPTIONS_INIT;
  sk_rope r;
  sk_rope_make(&r, KVC_DTYPE_FLOAT32, 3, 1, 6, 5, 4, 1);
  o.rope_cos = &r.cos; /* beyond struct_size 24: must not be read */
  o.rope_sin = &r.sin;
  o.struct_size = 24;
  kvc_kv out;
  int64_t toks[5];
  CHECK_OK(sk_update(c, 0, KVC_DTYPE_FLOAT32, 1, 1, 4, 2, tu_range(toks, 6, 11), 5, &o, &out));
  CHECK_SINK_TOKENS(out, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10); /* 6 - 2 - 5 < 0 without RoPE: transformers' slice */
  sk_rope_free(&r);
  kvc_cache_destroy(c);
}

int main(void) {
  TU_RUN(test_create);
  TU_RUN(test_rope_options);
  TU_RUN(test_rope_tensors);
  TU_RUN(test_rope_shift_sizes);
  TU_RUN(test_update_all_names_the_layer);
  TU_RUN(test_table_state);
  TU_RUN(test_lazy_first_update);
  TU_RUN(test_operations_sinkcache_lacks);
  TU_RUN(test_old_update_options);
  return tu_finish();
}
