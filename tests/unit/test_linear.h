/*
 * test_linear.h: what the recurrent-state tests share (test_linear*.c,
 * test_errors_linear.c): N-D input tensors, column-labelled conv inputs and
 * a checker that reads a conv state or return view back column by column.
 *
 * Column encoding (float32, exact): element [b, c, j] of conv input column
 * "time t" is (t + 1) * 1024 + (b % 16) * 64 + (c % 64); a zero column
 * decodes as -1. Rows keep their source row in the label, so batch
 * operations can be checked row by row.
 */
#ifndef KVCACHE_TEST_LINEAR_H
#define KVCACHE_TEST_LINEAR_H

#include "test_util.h"

/* An owning tensor of up to 6 dimensions; `t` points at the struct's own arrays: do not copy it. */
typedef struct tl_tensor {
  kvc_tensor t;
  int64_t shape[6];
  int64_t strides[6];
  unsigned char* alloc;
} tl_tensor;

static TU_UNUSED int64_t tl_numel(int ndim, const int64_t* shape) {
  int64_t n = 1;
  for (int i = 0; i < ndim; i++) n *= shape[i];
  return n;
}

/*
 * A tensor of `ndim` dims filled from vals (row-major floats converted to dt;
 * NULL = zeros). transposed != 0 stores it with the last two dims swapped in
 * memory and explicit strides (a non-contiguous input).
 */
static TU_UNUSED void tl_make(tl_tensor* x, kvc_dtype dt, int ndim, const int64_t* shape, const float* vals,
                              int transposed) {
  memset(x, 0, sizeof *x);
  for (int i = 0; i < ndim; i++) x->shape[i] = shape[i];
  int64_t order[6];
  for (int i = 0; i < ndim; i++) order[i] = i;
  if (transposed && ndim >= 2) {
    order[ndim - 2] = ndim - 1;
    order[ndim - 1] = ndim - 2;
  }
  int64_t st = 1;
  for (int i = ndim - 1; i >= 0; i--) {
    x->strides[order[i]] = st;
    st *= shape[order[i]] ? shape[order[i]] : 1;
  }
  size_t es = tu_dtype_bytes(dt);
  int64_t n = tl_numel(ndim, shape);
  x->alloc = (unsigned char*)calloc(1, (size_t)(n ? n : 1) * es + 16);
  if (!x->alloc) abort();
  x->t.data = x->alloc;
  x->t.device.device_type = KVC_DEVICE_CPU;
  x->t.ndim = ndim;
  x->t.dtype = tu_data_type(dt);
  x->t.shape = x->shape;
  x->t.strides = transposed ? x->strides : NULL;
  int64_t idx[6] = {0, 0, 0, 0, 0, 0};
  for (int64_t k = 0; k < n; k++) {
    int64_t off = 0;
    for (int i = 0; i < ndim; i++) off += idx[i] * x->strides[i];
    if (vals) tu_store_float(dt, x->alloc + (size_t)off * es, vals[k]);
    for (int i = ndim - 1; i >= 0; i--) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
}

static TU_UNUSED void tl_free(tl_tensor* x) {
  free(x->alloc);
  x->alloc = NULL;
}

static TU_UNUSED float tl_label(int64_t t, int64_t b, int64_t c) {
  return (float)((t + 1) * 1024 + (b % 16) * 64 + (c % 64));
}

/* A conv input [B, C, n] whose column j is time first + j, rows labelled with their own index. */
static TU_UNUSED void tl_conv_input_ex(tl_tensor* x, kvc_dtype dt, int64_t B, int64_t C, int64_t first, int64_t n,
                                       int transposed) {
  int64_t shape[3] = {B, C, n};
  float* v = (float*)malloc(sizeof(float) * (size_t)(B * C * n + 1));
  if (!v) abort();
  int64_t k = 0;
  for (int64_t b = 0; b < B; b++)
    for (int64_t c = 0; c < C; c++)
      for (int64_t j = 0; j < n; j++) v[k++] = tl_label(first + j, b, c);
  tl_make(x, dt, 3, shape, v, transposed);
  free(v);
}

static TU_UNUSED void tl_conv_input(tl_tensor* x, int64_t B, int64_t C, int64_t first, int64_t n) {
  tl_conv_input_ex(x, KVC_DTYPE_FLOAT32, B, C, first, n, 0);
}

/* update_conv_state with columns first..first+n-1 (state 0, default options unless given). */
static TU_UNUSED kvc_error* tl_conv(kvc_cache* c, uint32_t layer, int64_t B, int64_t C, int64_t first, int64_t n,
                                    const kvc_conv_update_options* o, kvc_tensor* out) {
  tl_tensor x;
  tl_conv_input(&x, B, C, first, n);
  kvc_error* e = kvc_cache_update_conv_state(c, layer, &x.t, o, out);
  tl_free(&x);
  return e;
}

/* A recurrent state of the given shape whose element k is base + k (exact in float32 for small tensors). */
static TU_UNUSED void tl_rec_input(tl_tensor* x, kvc_dtype dt, int ndim, const int64_t* shape, float base) {
  int64_t n = tl_numel(ndim, shape);
  float* v = (float*)malloc(sizeof(float) * (size_t)(n + 1));
  if (!v) abort();
  for (int64_t k = 0; k < n; k++) v[k] = base + (float)k;
  tl_make(x, dt, ndim, shape, v, 0);
  free(v);
}

/*
 * Checks a conv view: 3-D [B, C, n], column j holds time tokens[j] (-1: a zero
 * column) for every channel, row b coming from source row rows[b] (NULL =
 * identity).
 */
static TU_UNUSED int tl_check_conv_impl(const char* file, int line, const char* expr, const kvc_tensor* t,
                                        int64_t B, int64_t C, const int64_t* tokens, int64_t n, const int64_t* rows) {
  tu_checks_total++;
  char why[256] = "";
  if (t->ndim != 3) {
    snprintf(why, sizeof why, "ndim %d != 3", (int)t->ndim);
  } else if (t->shape[0] != B || t->shape[1] != C || t->shape[2] != n) {
    snprintf(why, sizeof why, "shape [%lld,%lld,%lld] != [%lld,%lld,%lld]", (long long)t->shape[0],
             (long long)t->shape[1], (long long)t->shape[2], (long long)B, (long long)C, (long long)n);
  } else {
    for (int64_t b = 0; b < B && !why[0]; b++)
      for (int64_t j = 0; j < n && !why[0]; j++)
        for (int64_t c = 0; c < C && !why[0]; c++) {
          int64_t idx[3] = {b, c, j};
          float got = tu_load_float(t, tu_elem_ptr(t, idx));
          int64_t src = rows ? rows[b] : b;
          float want = tokens[j] < 0 ? 0.0f : tl_label(tokens[j], src, c);
          if (got != want)
            snprintf(why, sizeof why, "at [b=%lld,c=%lld,j=%lld]: %.1f, expected %.1f (time %lld of row %lld)",
                     (long long)b, (long long)c, (long long)j, (double)got, (double)want, (long long)tokens[j],
                     (long long)src);
        }
  }
  if (!why[0]) return 1;
  tu_failures_total++;
  fprintf(TU_LOG, "%s:%d: FAILED in %s: %s: %s\n", file, line, tu_current_test, expr, why);
  return 0;
}
#define CHECK_CONV(t, B, C, tokens, n, rows) \
  tl_check_conv_impl(__FILE__, __LINE__, #t, (t), (B), (C), (tokens), (n), (rows))
/* CHECK_CONV of the listed times, rows in order: one line a check where the times are read nowhere else. */
#define CHECK_CONV_IS(t, B, C, ...)                                                                         \
  tl_check_conv_impl(__FILE__, __LINE__, #t, (t), (B), (C), (const int64_t[]){__VA_ARGS__},                \
                     (int64_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), NULL)

/* The conv and recurrent views of state `s` of `layer` (a failed call counts as a failure). */
static TU_UNUSED kvc_tensor tl_conv_view(const kvc_cache* c, uint32_t layer, uint32_t s) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  CHECK_OK(kvc_cache_state_view(c, layer, s, &t, NULL));
  return t;
}

/* CHECK_CONV of conv state s of `layer` as its view shows it now. */
static TU_UNUSED int tl_check_conv_state_impl(const char* file, int line, const kvc_cache* c, uint32_t layer, uint32_t s,
                                              int64_t B, int64_t C, const int64_t* tokens, int64_t n) {
  char label[64];
  snprintf(label, sizeof label, "conv state %u of layer %u", (unsigned)s, (unsigned)layer);
  kvc_tensor t = tl_conv_view(c, layer, s);
  return tl_check_conv_impl(file, line, label, &t, B, C, tokens, n, NULL);
}
#define CHECK_CONV_STATE(c, layer, s, B, C, tokens, n) \
  tl_check_conv_state_impl(__FILE__, __LINE__, (c), (layer), (s), (B), (C), (tokens), (n))
/* CHECK_CONV_STATE of the listed times: one line a check where the times are read nowhere else. */
#define CHECK_CONV_STATE_IS(c, layer, s, B, C, ...) \
  CHECK_CONV_STATE(c, layer, s, B, C, TU_LIST(__VA_ARGS__), TU_COUNT(__VA_ARGS__))

static TU_UNUSED kvc_tensor tl_rec_view(const kvc_cache* c, uint32_t layer, uint32_t s) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  CHECK_OK(kvc_cache_state_view(c, layer, s, NULL, &t));
  return t;
}

static TU_UNUSED int tl_has_prev(const kvc_cache* c, int32_t layer, int32_t s) {
  int v = -1;
  CHECK_OK(kvc_cache_has_previous_state(c, layer, s, &v));
  return v;
}

/* A cache of custom layers of one kind each (window / max_cache_len where the kind needs them). */
static TU_UNUSED kvc_cache* tl_cache(uint32_t n, const kvc_layer_kind* kinds, int64_t window, int64_t max_len,
                                     uint32_t num_states, int64_t conv_kernel) {
  kvc_layer_options lo[16];
  for (uint32_t i = 0; i < n && i < 16; i++) {
    kvc_layer_options_init(&lo[i]);
    lo[i].kind = kinds[i];
    lo[i].window = window;
    lo[i].max_cache_len = max_len;
    lo[i].num_states = num_states;
    lo[i].conv_kernel_size = conv_kernel;
  }
  return tu_custom_cache(n, lo);
}

/* One LINEAR layer. */
static TU_UNUSED kvc_cache* tl_linear(uint32_t num_states, int64_t conv_kernel) {
  kvc_layer_kind k = KVC_LAYER_LINEAR;
  return tl_cache(1, &k, 0, 0, num_states, conv_kernel);
}

/* tl_linear(num_states, conv_kernel) after its first conv update, columns 0..n-1 of [B, C] into state 0 (the returned
 * window in *ret): where several conv tests start. NULL (the failing step counted) when a step fails. */
static TU_UNUSED kvc_cache* tl_linear_fed(uint32_t num_states, int64_t conv_kernel, int64_t B, int64_t C, int64_t n,
                                          kvc_tensor* ret) {
  kvc_cache* c = tl_linear(num_states, conv_kernel);
  if (!CHECK(c != NULL)) return NULL;
  return tu_kept(c, CHECK_OK(tl_conv(c, 0, B, C, 0, n, NULL, ret)));
}

#endif /* KVCACHE_TEST_LINEAR_H */
