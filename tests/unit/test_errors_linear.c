/*
 * test_errors_linear.c: bad input to the recurrent-state entry points
 * (update_conv_state, update_recurrent_state, state_view,
 * has_previous_state) and to the cache-level rules on linear layers ('The cache as a whole':
 * sequence-length queries, K/V updates, views, crop, options). Each case
 * checks the exact code, that the message names the function, the argument
 * and the value, that out-parameters are untouched and that the cache is
 * unchanged (states included: snapshot() captures them).
 */
#include "test_errors.h"
#include "test_linear.h"

enum { B = 2, C = 3, NL = 5 };

/*
 * Layers: 0 LINEAR (2 pairs, K = 3; conv 0 float32 and recurrent 0 float16
 * allocated), 1 LINEAR_DYNAMIC (K from the first input: 4; K/V of 2 tokens),
 * 2 DYNAMIC (2 tokens), 3 LINEAR_STATIC (only a recurrent state), 4 LINEAR
 * (nothing allocated).
 */
static kvc_cache* make_cache(void) {
  const kvc_layer_kind kinds[NL] = {KVC_LAYER_LINEAR, KVC_LAYER_LINEAR_DYNAMIC, KVC_LAYER_DYNAMIC,
                                    KVC_LAYER_LINEAR_STATIC, KVC_LAYER_LINEAR};
  kvc_layer_options lo[NL];
  for (uint32_t i = 0; i < NL; i++) {
    kvc_layer_options_init(&lo[i]);
    lo[i].kind = kinds[i];
    lo[i].max_cache_len = 6;
    lo[i].num_states = i == 0 ? 2 : 1;
    lo[i].conv_kernel_size = i == 0 ? 3 : 0;
  }
  kvc_cache_options o = tu_custom_options(NL, lo);
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(&o, &c))) return NULL;
  const int64_t rec[3] = {B, 4, 2};
  tl_tensor s;
  tl_rec_input(&s, KVC_DTYPE_FLOAT16, 3, rec, 1.0f);
  int ok = CHECK_OK(tl_conv(c, 0, B, C, 0, 2, NULL, NULL)) &&
           CHECK_OK(kvc_cache_update_recurrent_state(c, 0, 0, &s.t, NULL)) &&
           CHECK_OK(tu_update_tokens(c, 1, B, 1, 2, 2, 2, 0, NULL, NULL)) &&
           CHECK_OK(tl_conv(c, 1, B, C, 0, 4, NULL, NULL)) &&
           CHECK_OK(tu_update_tokens(c, 2, B, 1, 2, 2, 2, 0, NULL, NULL)) &&
           CHECK_OK(kvc_cache_update_recurrent_state(c, 3, 0, &s.t, NULL));
  tl_free(&s);
  return tu_kept(c, ok);
}

#define OUT_FILL 0xA5
static int untouched(const void* p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char*)p)[i] != OUT_FILL) return 0;
  return 1;
}

/* A state write of one table case: builds the case's input, calls the entry point with out as its result, frees the
 * input and returns the entry point's error. */
typedef kvc_error* (*state_write_fn)(kvc_cache* c, const void* table_case, kvc_tensor* out);

/* One table case of a refused state write, reported under the case's name: the error is `code` and its message names
 * the function and the needles (the second may be NULL), out is untouched and the cache unchanged. */
static void expect_refused_write(kvc_cache* c, const char* fn, state_write_fn write, const void* table_case,
                                 const char* name, kvc_code code, const char* const* needles) {
  const char* test = tu_current_test;
  tu_current_test = name;
  kvc_tensor out;
  memset(&out, OUT_FILL, sizeof out);
  EXPECT_ERR_UNCHANGED(c, write(c, table_case, &out), code, fn, needles[0], needles[1] ? needles[1] : needles[0]);
  CHECK(untouched(&out, sizeof out));
  tu_current_test = test;
}

/* ------------------------------------------------------ update_conv_state */

typedef void (*spoil_fn)(tl_tensor* x, kvc_conv_update_options* o);

static int64_t shape4[4] = {B, C, 1, 1};
static int64_t pos1[1] = {0};
static void sp_ndim4(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.ndim = 4; x->t.shape = shape4; }
static void sp_ndim2(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.ndim = 2; }
static void sp_shape_null(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.shape = NULL; }
static void sp_int32(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.dtype = (kvc_data_type){KVC_TYPE_CODE_INT, 32, 1}; }
static void sp_lanes2(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 32, 2}; }
static void sp_cuda(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.device = (kvc_device){KVC_DEVICE_CUDA, 0}; }
static void sp_batch0(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->shape[0] = 0; }
static void sp_chan_huge(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->shape[1] = INT64_C(1) << 31; }
static void sp_neg_cols(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->shape[2] = -1; }
static void sp_numel(tl_tensor* x, kvc_conv_update_options* o) {
  (void)o;
  x->shape[0] = INT64_C(1) << 20;
  x->shape[1] = INT64_C(1) << 20;
  x->shape[2] = INT64_C(1) << 10;
}
static void sp_data_null(tl_tensor* x, kvc_conv_update_options* o) { (void)o; x->t.data = NULL; }
static void sp_struct_size(tl_tensor* x, kvc_conv_update_options* o) { (void)x; o->struct_size = 8; }
static void sp_state(tl_tensor* x, kvc_conv_update_options* o) { (void)x; o->state_index = 2; }
static void sp_kernel_neg(tl_tensor* x, kvc_conv_update_options* o) { (void)x; o->conv_kernel_size = -1; }
static void sp_kernel_huge(tl_tensor* x, kvc_conv_update_options* o) { (void)x; o->conv_kernel_size = INT64_C(1) << 31; }
static void sp_kernel_other(tl_tensor* x, kvc_conv_update_options* o) { (void)x; o->conv_kernel_size = 5; }
static void sp_kernel_unallocated(tl_tensor* x, kvc_conv_update_options* o) {
  (void)x;
  o->state_index = 1;
  o->conv_kernel_size = 5;
}
static void sp_pos_null(tl_tensor* x, kvc_conv_update_options* o) { (void)x; o->cache_position_length = 2; }
static void sp_pos_count(tl_tensor* x, kvc_conv_update_options* o) {
  (void)x;
  o->cache_position = pos1;
  o->cache_position_length = 1;
}

typedef struct conv_case {
  const char* name;
  uint32_t layer;
  kvc_dtype dtype;
  int64_t b, c, n;
  spoil_fn spoil;
  kvc_code code;
  const char* needles[3];
} conv_case;

static const conv_case CONV_CASES[] = {
    {"layer out of range", 9, KVC_DTYPE_FLOAT32, B, C, 1, NULL, KVC_ERROR_OUT_OF_RANGE, {"layer is 9", "5 layers", NULL}},
    {"not a linear layer", 2, KVC_DTYPE_FLOAT32, B, C, 1, NULL, KVC_ERROR_INVALID_ARGUMENT,
     {"layer 2", "non-LinearAttention", NULL}},
    {"options struct_size", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_struct_size, KVC_ERROR_INVALID_ARGUMENT,
     {"options.struct_size is 8", NULL, NULL}},
    {"state index", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_state, KVC_ERROR_OUT_OF_RANGE, {"state_index is 2", "2 state pairs", NULL}},
    {"negative kernel size", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_kernel_neg, KVC_ERROR_INVALID_ARGUMENT,
     {"conv_kernel_size is -1", NULL, NULL}},
    {"huge kernel size", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_kernel_huge, KVC_ERROR_INVALID_ARGUMENT,
     {"conv_kernel_size is 2147483648", NULL, NULL}},
    {"positions NULL", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_pos_null, KVC_ERROR_INVALID_ARGUMENT,
     {"cache_position is NULL", "cache_position_length is 2", NULL}},
    {"ndim 4", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_ndim4, KVC_ERROR_SHAPE_MISMATCH, {"x.ndim is 4", NULL, NULL}},
    {"ndim 2", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_ndim2, KVC_ERROR_SHAPE_MISMATCH, {"x.ndim is 2", NULL, NULL}},
    {"shape NULL", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_shape_null, KVC_ERROR_INVALID_ARGUMENT, {"x.shape is NULL", NULL, NULL}},
    {"int32", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_int32, KVC_ERROR_DTYPE_MISMATCH, {"x.dtype", "code 0, bits 32", NULL}},
    {"lanes 2", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_lanes2, KVC_ERROR_DTYPE_MISMATCH, {"x.dtype", "lanes 2", NULL}},
    {"device", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_cuda, KVC_ERROR_DEVICE_MISMATCH, {"x is on device 2:0", NULL, NULL}},
    {"batch 0", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_batch0, KVC_ERROR_SHAPE_MISMATCH, {"x.shape[0] is 0", NULL, NULL}},
    {"channels 2^31", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_chan_huge, KVC_ERROR_SHAPE_MISMATCH,
     {"x.shape[1] is 2147483648", NULL, NULL}},
    {"negative columns", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_neg_cols, KVC_ERROR_SHAPE_MISMATCH, {"x.shape[2] is -1", NULL, NULL}},
    {"2^50 elements", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_numel, KVC_ERROR_SHAPE_MISMATCH, {"x has more than 2^48", NULL, NULL}},
    {"data NULL", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_data_null, KVC_ERROR_INVALID_ARGUMENT, {"x.data is NULL", NULL, NULL}},
    {"position count", 0, KVC_DTYPE_FLOAT32, B, C, 2, sp_pos_count, KVC_ERROR_INVALID_ARGUMENT,
     {"cache_position_length is 1", "x has 2 columns", NULL}},
    {"dtype vs stored", 0, KVC_DTYPE_FLOAT16, B, C, 1, NULL, KVC_ERROR_DTYPE_MISMATCH, {"x.dtype is float16", "stores float32", NULL}},
    {"channels vs stored", 0, KVC_DTYPE_FLOAT32, B, C + 1, 1, NULL, KVC_ERROR_SHAPE_MISMATCH,
     {"x.shape[1] (channels) is 4", "has 3 channels", NULL}},
    {"batch vs stored", 0, KVC_DTYPE_FLOAT32, B + 1, C, 1, NULL, KVC_ERROR_SHAPE_MISMATCH,
     {"x.shape[0] (batch) is 3", "holds batch 2", NULL}},
    {"batch vs K/V", 1, KVC_DTYPE_FLOAT32, 1, C, 1, NULL, KVC_ERROR_SHAPE_MISMATCH, {"x.shape[0] (batch) is 1", "layer 1", NULL}},
    {"batch vs recurrent state", 3, KVC_DTYPE_FLOAT32, 3, C, 1, NULL, KVC_ERROR_SHAPE_MISMATCH,
     {"x.shape[0] (batch) is 3", "layer 3", NULL}},
    {"kernel vs configured", 0, KVC_DTYPE_FLOAT32, B, C, 1, sp_kernel_unallocated, KVC_ERROR_INVALID_ARGUMENT,
     {"conv state 1 of layer 0 is configured with K = 3", "conv_kernel_size is 5", NULL}},
    {"kernel vs allocated", 1, KVC_DTYPE_FLOAT32, B, C, 1, sp_kernel_other, KVC_ERROR_INVALID_ARGUMENT,
     {"conv state 0 of layer 1 was allocated with K = 4", "conv_kernel_size is 5", NULL}},
    {"no kernel size at all", 4, KVC_DTYPE_FLOAT32, B, C, 0, NULL, KVC_ERROR_INVALID_ARGUMENT,
     {"conv_kernel_size", "which is 0", NULL}},
};

static kvc_error* write_conv_case(kvc_cache* c, const void* table_case, kvc_tensor* out) {
  const conv_case* k = (const conv_case*)table_case;
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  tl_tensor x;
  tl_conv_input_ex(&x, k->dtype, k->b, k->c, 100, k->n, 0);
  if (k->spoil) k->spoil(&x, &o);
  kvc_error* e = kvc_cache_update_conv_state(c, k->layer, &x.t, &o, out);
  tl_free(&x);
  return e;
}

static void test_update_conv_state(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  for (size_t i = 0; i < sizeof CONV_CASES / sizeof CONV_CASES[0]; i++)
    expect_refused_write(c, "kvc_cache_update_conv_state", write_conv_case, &CONV_CASES[i], CONV_CASES[i].name,
                         CONV_CASES[i].code, CONV_CASES[i].needles);
  EXPECT_ERR(kvc_cache_update_conv_state(NULL, 0, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_update_conv_state", "cache is NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_conv_state(c, 0, NULL, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update_conv_state", "x is NULL");
  kvc_cache_destroy(c);
}

/* The cache_position protocol works on exactly K columns; a recorded longer state is refused. */
static void test_legacy_on_recorded_state(void) {
  kvc_cache* c = tl_linear(1, 2);
  REQUIRE(c != NULL);
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  REQUIRE_OK(tl_conv(c, 0, 1, 1, 0, 5, NULL, NULL));
  kvc_conv_update_options o = KVC_CONV_UPDATE_OPTIONS_INIT;
  o.cache_position = pos1;
  o.cache_position_length = 1;
  tl_tensor x;
  tl_conv_input(&x, 1, 1, 5, 1);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_conv_state(c, 0, &x.t, &o, NULL), KVC_ERROR_INVALID_STATE,
                       "kvc_cache_update_conv_state", "holds 5 recorded columns", "K = 2");
  /* After crop(0) the state is K columns again and the protocol works. */
  REQUIRE_OK(kvc_cache_crop(c, 0));
  CHECK_OK(kvc_cache_update_conv_state(c, 0, &x.t, &o, NULL));
  tl_free(&x);
  kvc_cache_destroy(c);
}

/* ------------------------------------------------- update_recurrent_state */

static void rs_ndim0(tl_tensor* x) { x->t.ndim = 0; }
static void rs_ndim7(tl_tensor* x) { x->t.ndim = 7; }
static void rs_shape_null(tl_tensor* x) { x->t.shape = NULL; }
static void rs_f64(tl_tensor* x) { x->t.dtype = (kvc_data_type){KVC_TYPE_CODE_FLOAT, 64, 1}; }
static void rs_rocm(tl_tensor* x) { x->t.device = (kvc_device){KVC_DEVICE_ROCM, 1}; }
static void rs_dim0(tl_tensor* x) { x->shape[2] = 0; }
static void rs_data_null(tl_tensor* x) { x->t.data = NULL; }

typedef struct rec_case {
  const char* name;
  uint32_t layer, state;
  kvc_dtype dtype;
  int ndim;
  int64_t shape[4];
  void (*spoil)(tl_tensor*);
  kvc_code code;
  const char* needles[2];
} rec_case;

static const rec_case REC_CASES[] = {
    {"layer out of range", 5, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, NULL, KVC_ERROR_OUT_OF_RANGE, {"layer is 5", NULL}},
    {"not linear", 2, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, NULL, KVC_ERROR_INVALID_ARGUMENT, {"layer 2", "non-LinearAttention"}},
    {"state index", 1, 1, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, NULL, KVC_ERROR_OUT_OF_RANGE, {"state_index is 1", "1 state pair"}},
    {"ndim 0", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_ndim0, KVC_ERROR_SHAPE_MISMATCH, {"state.ndim is 0", "[1, 6]"}},
    {"ndim 7", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_ndim7, KVC_ERROR_SHAPE_MISMATCH, {"state.ndim is 7", NULL}},
    {"shape NULL", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_shape_null, KVC_ERROR_INVALID_ARGUMENT, {"state.shape is NULL", NULL}},
    {"float64", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_f64, KVC_ERROR_DTYPE_MISMATCH, {"state.dtype", "bits 64"}},
    {"device", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_rocm, KVC_ERROR_DEVICE_MISMATCH, {"state is on device 10:1", NULL}},
    {"zero size", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_dim0, KVC_ERROR_SHAPE_MISMATCH, {"state.shape[2] is 0", NULL}},
    {"data NULL", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 2}, rs_data_null, KVC_ERROR_INVALID_ARGUMENT, {"state.data is NULL", NULL}},
    {"dtype vs stored", 0, 0, KVC_DTYPE_BFLOAT16, 3, {B, 4, 2}, NULL, KVC_ERROR_DTYPE_MISMATCH, {"bfloat16", "stores float16"}},
    {"ndim vs stored", 0, 0, KVC_DTYPE_FLOAT16, 4, {B, 4, 2, 1}, NULL, KVC_ERROR_SHAPE_MISMATCH, {"state.ndim is 4", "has 3"}},
    {"shape vs stored", 0, 0, KVC_DTYPE_FLOAT16, 3, {B, 4, 3}, NULL, KVC_ERROR_SHAPE_MISMATCH, {"state.shape[2] is 3", "has 2"}},
    {"batch vs stored", 0, 0, KVC_DTYPE_FLOAT16, 3, {1, 4, 2}, NULL, KVC_ERROR_SHAPE_MISMATCH, {"state.shape[0] (batch) is 1", NULL}},
    {"batch vs conv state", 0, 1, KVC_DTYPE_FLOAT16, 3, {3, 4, 2}, NULL, KVC_ERROR_SHAPE_MISMATCH, {"(batch) is 3", "batch 2"}},
    {"batch vs K/V", 1, 0, KVC_DTYPE_FLOAT32, 2, {1, 4}, NULL, KVC_ERROR_SHAPE_MISMATCH, {"(batch) is 1", "layer 1"}},
};

static kvc_error* write_rec_case(kvc_cache* c, const void* table_case, kvc_tensor* out) {
  const rec_case* k = (const rec_case*)table_case;
  tl_tensor x;
  tl_rec_input(&x, k->dtype, k->ndim, k->shape, 3.0f);
  if (k->spoil) k->spoil(&x);
  kvc_error* e = kvc_cache_update_recurrent_state(c, k->layer, k->state, &x.t, out);
  tl_free(&x);
  return e;
}

static void test_update_recurrent_state(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  for (size_t i = 0; i < sizeof REC_CASES / sizeof REC_CASES[0]; i++)
    expect_refused_write(c, "kvc_cache_update_recurrent_state", write_rec_case, &REC_CASES[i], REC_CASES[i].name,
                         REC_CASES[i].code, REC_CASES[i].needles);
  EXPECT_ERR(kvc_cache_update_recurrent_state(NULL, 0, 0, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_update_recurrent_state", "cache is NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_recurrent_state(c, 0, 0, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_update_recurrent_state", "state is NULL");
  kvc_cache_destroy(c);
}

/* ------------------------------------------------------- queries */

static void test_state_view(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  kvc_tensor a, b;
  memset(&a, OUT_FILL, sizeof a);
  memset(&b, OUT_FILL, sizeof b);
  EXPECT_ERR(kvc_cache_state_view(NULL, 0, 0, &a, &b), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_state_view", "cache is NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_state_view(c, 7, 0, &a, &b), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_state_view",
                       "layer is 7");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_state_view(c, 2, 0, &a, &b), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_state_view",
                       "layer 2 is a dynamic layer");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_state_view(c, 0, 2, &a, &b), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_state_view",
                       "state_index is 2");
  CHECK(untouched(&a, sizeof a) && untouched(&b, sizeof b));
  kvc_cache_destroy(c);
}

static void test_has_previous_state(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  int v = OUT_FILL;
  EXPECT_ERR(kvc_cache_has_previous_state(NULL, 0, 0, &v), KVC_ERROR_INVALID_ARGUMENT,
             "kvc_cache_has_previous_state", "cache is NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_has_previous_state(c, 0, 0, NULL), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_has_previous_state", "out is NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_has_previous_state(c, -2, 0, &v), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_has_previous_state", "layer is -2");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_has_previous_state(c, 0, -2, &v), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_has_previous_state", "state_index is -2");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_has_previous_state(c, 2, 0, &v), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_has_previous_state", "layer 2 is a dynamic layer");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_has_previous_state(c, 0, 2, &v), KVC_ERROR_OUT_OF_RANGE,
                       "kvc_cache_has_previous_state", "state_index is 2", "2 state pairs");
  CHECK_EQ_I64(v, OUT_FILL);
  kvc_layer_kind k = KVC_LAYER_DYNAMIC;
  kvc_cache* d = tl_cache(1, &k, 0, 0, 0, 0);
  REQUIRE(d != NULL);
  EXPECT_ERR_UNCHANGED(d, kvc_cache_has_previous_state(d, KVC_ALL_LAYERS, -1, &v), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_has_previous_state", "no linear");
  CHECK_EQ_I64(v, OUT_FILL);
  TU_DESTROY(d, c);
}

/* ---------------------------------------- cache-level rules on linear layers */

static void test_cache_rules(void) {
  kvc_cache* c = make_cache();
  REQUIRE(c != NULL);
  int64_t v = -7, off = -7;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_seq_length(c, 4, &v), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_seq_length",
                       "layer 4 is a linear");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_mask_sizes(c, 3, 4, &v, &off), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_mask_sizes", "layer 4 is a linear");
  CHECK_EQ_I64(v, -7);
  CHECK_EQ_I64(off, -7);
  CHECK_EQ_I64(tu_seq(c, 0), 2); /* layer 0 means the first attention layer: the hybrid, layer 1 */
  kvc_kv kv;
  memset(&kv, OUT_FILL, sizeof kv);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_layer_view(c, 4, &kv), KVC_ERROR_UNSUPPORTED, "kvc_cache_layer_view", "layer 4",
                       "kvc_cache_state_view");
  EXPECT_ERR_UNCHANGED(c, tu_update_tokens(c, 0, B, 1, 1, 2, 2, 5, NULL, &kv), KVC_ERROR_UNSUPPORTED,
                       "kvc_cache_update", "layer 0 is a linear", "kvc_cache_update_conv_state");
  /* Layer 3 holds a recurrent state of batch 2 but no K/V yet: K/V must come with the same batch. */
  EXPECT_ERR_UNCHANGED(c, tu_update_tokens(c, 3, 3, 1, 1, 2, 2, 5, NULL, &kv), KVC_ERROR_SHAPE_MISMATCH,
                       "kvc_cache_update", "key.shape[0] (batch) is 3", "states of batch 2");
  CHECK(untouched(&kv, sizeof kv));
  /* crop: not recording. */
  EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, -1), KVC_ERROR_INVALID_STATE, "kvc_cache_crop", "tokens -1",
                       "kvc_cache_activate_past_recording");
  REQUIRE_OK(kvc_cache_activate_past_recording(c));
  EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, 1), KVC_ERROR_INVALID_STATE, "kvc_cache_crop", "tokens is 1", "negative");
  kvc_cache_destroy(c);

  /* Only linear layers: sequence lengths do not exist. */
  c = tl_linear(1, 2);
  REQUIRE(c != NULL);
  EXPECT_ERR_UNCHANGED(c, kvc_cache_seq_length(c, 0, &v), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_seq_length",
                       "no attention layer");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_mask_sizes(c, 1, 0, &v, &off), KVC_ERROR_INVALID_ARGUMENT,
                       "kvc_cache_mask_sizes", "no attention layer");
  kvc_cache_destroy(c);
}

static void test_create_options(void) {
  kvc_layer_options lo = KVC_LAYER_OPTIONS_INIT;
  lo.kind = KVC_LAYER_LINEAR;
  lo.num_states = 65;
  kvc_cache_options o = tu_custom_options(1, &lo);
  kvc_cache* c = NULL;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "num_states is 65");
  lo.num_states = 1;
  lo.conv_kernel_size = -3;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "conv_kernel_size is -3");
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = 2;
  cfg.number_of_conv_states = 65;
  o.preset = KVC_PRESET_MAMBA;
  o.config = &cfg;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "number_of_conv_states is 65");
  cfg.number_of_conv_states = 0;
  cfg.conv_kernel = -1;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "conv_kernel is -1");
  o.config = NULL;
  EXPECT_ERR(kvc_cache_create(&o, &c), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_create", "KVC_PRESET_MAMBA");
  CHECK(c == NULL);
}

int main(void) {
  TU_RUN(test_update_conv_state);
  TU_RUN(test_legacy_on_recorded_state);
  TU_RUN(test_update_recurrent_state);
  TU_RUN(test_state_view);
  TU_RUN(test_has_previous_state);
  TU_RUN(test_cache_rules);
  TU_RUN(test_create_options);
  return tu_finish();
}
