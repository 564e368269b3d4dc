/*
 * KVC_LAYER_DYNAMIC_INDEXED and KVC_LAYER_STATIC_INDEXED, transformers'
 * DynamicIndexedLayer (5.11) and StaticIndexedLayer (5.24), with
 * kvc_cache_update_indexer and kvc_cache_indexer_view (docs/indexed-layers.md;
 * the expected values follow transformers 5.24's cache_utils.py): the
 * indexer keys next to the K/V, every operation on them, and errors that
 * leave the cache as it was.
 */
#include "test_errors.h"
#include "test_linear.h"

#define B 2
#define H 1
#define D 2  /* K/V head dim */
#define W 3  /* index_head_dim */

/* Element (b, t, w) of indexer token t: distinct for every row, token and column. */
static float ix_value(int64_t b, int64_t t, int64_t w) { return (float)(1000 * b + 10 * t + w + 1); }

/* update_indexer of tokens first..first+n-1 (float32 [batch, n, W]). */
static kvc_error* ix_update(kvc_cache* c, uint32_t layer, int64_t batch, int64_t first, int64_t n, kvc_tensor* out) {
  float* data = (float*)calloc((size_t)(batch * (n ? n : 1) * W), sizeof(float));
  for (int64_t b = 0; b < batch; b++)
    for (int64_t t = 0; t < n; t++)
      for (int64_t w = 0; w < W; w++) data[(b * n + t) * W + w] = ix_value(b, first + t, w);
  int64_t shape[3] = {batch, n, W};
  kvc_tensor x = {data, {KVC_DEVICE_CPU, 0}, 3, {KVC_TYPE_CODE_FLOAT, 32, 1}, shape, NULL, 0};
  kvc_error* e = kvc_cache_update_indexer(c, layer, &x, out);
  free(data);
  return e;
}

static kvc_tensor ix_view(const kvc_cache* c, uint32_t layer) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  CHECK_OK(kvc_cache_indexer_view(c, layer, &t));
  return t;
}

static float ix_at(const kvc_tensor* t, int64_t b, int64_t s, int64_t w) {
  return ((const float*)t->data)[b * t->strides[0] + s * t->strides[1] + w * t->strides[2]];
}

/* The view holds, in row r, the tokens tokens[r][0..n) (a token < 0: a zero slot). */
static int ix_check(const char* file, int line, const kvc_tensor* t, int64_t rows, int64_t n, const int64_t* tokens,
                    const int64_t* row_of) {
  int ok = tu_check_i64(t->ndim, 3, file, line, "ndim", "3");
  ok &= tu_check_i64(t->shape ? t->shape[0] : -1, rows, file, line, "shape[0]", "rows");
  ok &= tu_check_i64(t->shape ? t->shape[1] : -1, n, file, line, "shape[1]", "n");
  ok &= tu_check_i64(t->shape ? t->shape[2] : -1, W, file, line, "shape[2]", "W");
  if (!ok) return 0;
  for (int64_t r = 0; r < rows; r++)
    for (int64_t s = 0; s < n; s++)
      for (int64_t w = 0; w < W; w++) {
        float want = tokens[s] < 0 ? 0.0f : ix_value(row_of ? row_of[r] : r, tokens[s], w);
        if (!tu_check_f64(ix_at(t, r, s, w), want, file, line, "indexer element", "expected")) return 0;
      }
  return 1;
}
#define CHECK_IX(t, rows, row_of, ...) \
  ix_check(__FILE__, __LINE__, (kvc_tensor[1]){(t)}, (rows), TU_COUNT(__VA_ARGS__), TU_LIST(__VA_ARGS__), (row_of))

static void test_dynamic_update_appends(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_DYNAMIC_INDEXED, 0, 0);
  REQUIRE(c != NULL);
  kvc_tensor v = ix_view(c, 0);
  CHECK_EQ_PTR(v.data, NULL); /* indexer_keys is None before the first update_indexer */
  CHECK_EQ_I64(v.ndim, 0);
  kvc_tensor out;
  REQUIRE_OK(ix_update(c, 0, B, 0, 3, &out));
  CHECK_IX(out, B, NULL, 0, 1, 2);
  REQUIRE_OK(ix_update(c, 0, B, 3, 2, &out));
  CHECK_IX(out, B, NULL, 0, 1, 2, 3, 4); /* torch.cat along dim 1: the whole store */
  v = ix_view(c, 0);
  CHECK_IX(v, B, NULL, 0, 1, 2, 3, 4);
  CHECK_EQ_PTR(v.data, out.data);
  REQUIRE_OK(ix_update(c, 0, B, 5, 0, &out)); /* no new tokens */
  CHECK_IX(out, B, NULL, 0, 1, 2, 3, 4);
  /* The indexer counts in no length: the K/V is still uninitialized. */
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 0);
  CHECK_EQ_I64(tu_seq(c, 0), 0);
  REQUIRE_OK(tu_update_tokens(c, 0, B, H, 4, D, D, 0, NULL, NULL));
  CHECK_EQ_I64(tu_seq(c, 0), 4);
  CHECK_MASK(c, 1, 0, 5, 0);
  CHECK_EQ_I64(tu_max_len(c, 0), -1);
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1, 2, 3, 4);
  /* Growth past the first 64 slots keeps every token. */
  REQUIRE_OK(ix_update(c, 0, B, 5, 70, &out));
  CHECK_EQ_I64(out.shape[1], 75);
  CHECK_EQ_F64(ix_at(&out, 1, 74, 2), ix_value(1, 74, 2));
  CHECK_EQ_F64(ix_at(&out, 0, 4, 0), ix_value(0, 4, 0));
  kvc_cache_destroy(c);
}

static void test_static_update_writes_at_its_counter(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_STATIC_INDEXED, 0, 6);
  REQUIRE(c != NULL);
  CHECK_EQ_PTR(ix_view(c, 0).data, NULL);
  kvc_tensor out;
  REQUIRE_OK(ix_update(c, 0, B, 0, 2, &out));
  CHECK_IX(out, B, NULL, 0, 1, -1, -1, -1, -1); /* zeros [B, max_cache_len, W], the first 2 written */
  const void* addr = out.data;
  REQUIRE_OK(ix_update(c, 0, B, 2, 3, &out));
  CHECK_IX(out, B, NULL, 0, 1, 2, 3, 4, -1);
  CHECK_EQ_PTR(out.data, addr); /* a static address (cudagraphs) */
  /* Its own counter: the K/V counter is independent. */
  REQUIRE_OK(tu_update_tokens(c, 0, B, H, 1, D, D, 0, NULL, NULL));
  CHECK_EQ_I64(tu_seq(c, 0), 1);
  CHECK_EQ_I64(tu_max_len(c, 0), 6);
  EXPECT_ERR_UNCHANGED(c, ix_update(c, 0, B, 5, 2, NULL), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_update_indexer",
                       "holds 5 of max_cache_len 6", "2 more");
  REQUIRE_OK(ix_update(c, 0, B, 5, 1, &out));
  CHECK_IX(out, B, NULL, 0, 1, 2, 3, 4, 5);
  kvc_cache_destroy(c);
}

/* crop: the K/V as their kind, the indexer by the same tokens (transformers 5.24's crop(tokens_to_remove)). */
static void test_crop(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_INDEXED, 0, 0, 0, B, H, 5, D);
  REQUIRE(c != NULL);
  REQUIRE_OK(ix_update(c, 0, B, 0, 6, NULL));
  CHECK_OK(kvc_cache_crop(c, 0));
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1, 2, 3, 4, 5);
  CHECK_OK(kvc_cache_crop(c, -2));
  CHECK_EQ_I64(tu_seq(c, 0), 3);
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1, 2, 3);
  CHECK_OK(kvc_cache_crop(c, 2)); /* positive: the legacy absolute length, for both stores */
  CHECK_EQ_I64(tu_seq(c, 0), 2);
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1);
  REQUIRE_OK(ix_update(c, 0, B, 7, 1, NULL));
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1, 7);
  CHECK_OK(kvc_cache_crop(c, -10));
  kvc_tensor v = ix_view(c, 0);
  CHECK_EQ_I64(v.shape[1], 0); /* indexer_keys[:, :-10]: empty, still initialized */
  CHECK_NE_PTR(v.data, NULL);
  kvc_cache_destroy(c);

  c = tu_one_layer_cache(KVC_LAYER_STATIC_INDEXED, 0, 8);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 0, B, H, 3, D, D, 0, NULL, NULL));
  REQUIRE_OK(ix_update(c, 0, B, 0, 5, NULL));
  CHECK_OK(kvc_cache_crop(c, -2)); /* counter 5 -> 3, the slots stay */
  CHECK_EQ_I64(tu_seq(c, 0), 1);
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1, 2, 3, 4, -1, -1, -1);
  REQUIRE_OK(ix_update(c, 0, B, 9, 1, NULL)); /* overwrites slot 3 */
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1, 2, 9, 4, -1, -1, -1);
  CHECK_OK(kvc_cache_crop(c, -10)); /* clamped at 0 (transformers goes negative) */
  REQUIRE_OK(ix_update(c, 0, B, 20, 1, NULL));
  CHECK_IX(ix_view(c, 0), B, NULL, 20, 1, 2, 9, 4, -1, -1, -1);
  kvc_cache_destroy(c);

  /* transformers 5.23 had no StaticIndexedLayer crop (StaticLayer had none): refused as for every static kind. */
  kvc_layer_options l = tu_layer(KVC_LAYER_STATIC_INDEXED, 0, 8);
  kvc_cache_options o = tu_custom_options(1, &l);
  o.transformers_release = 52300;
  REQUIRE_OK(kvc_cache_create(&o, &c));
  REQUIRE_OK(ix_update(c, 0, B, 0, 2, NULL));
  EXPECT_ERR_UNCHANGED(c, kvc_cache_crop(c, -1), KVC_ERROR_UNSUPPORTED, "static indexed");
  kvc_cache_destroy(c);
}

static void test_reset(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC_INDEXED, 0, 0), tu_layer(KVC_LAYER_STATIC_INDEXED, 0, 4));
  REQUIRE(c != NULL);
  REQUIRE_OK(ix_update(c, 0, B, 0, 3, NULL));
  REQUIRE_OK(ix_update(c, 1, B, 0, 3, NULL));
  const void* addr = ix_view(c, 1).data;
  CHECK_OK(kvc_cache_reset(c));
  kvc_tensor v = ix_view(c, 0);
  CHECK_EQ_PTR(v.data, NULL); /* dynamic: dropped, uninitialized */
  CHECK_EQ_I64(v.ndim, 0);
  v = ix_view(c, 1);
  CHECK_EQ_PTR(v.data, addr); /* static: zeroed in place, counter 0 */
  CHECK_IX(v, B, NULL, -1, -1, -1, -1);
  REQUIRE_OK(ix_update(c, 1, B, 5, 1, NULL));
  CHECK_IX(ix_view(c, 1), B, NULL, 5, -1, -1, -1);
  /* After the reset a dynamic indexer takes a new batch, dtype and width. */
  uint16_t half[4 * 5] = {0};
  int64_t shape[3] = {4, 1, 5};
  kvc_tensor x = {half, {KVC_DEVICE_CPU, 0}, 3, {KVC_TYPE_CODE_FLOAT, 16, 1}, shape, NULL, 0};
  CHECK_OK(kvc_cache_update_indexer(c, 0, &x, &v));
  CHECK_EQ_I64(v.shape[0], 4);
  CHECK_EQ_I64(v.shape[2], 5);
  CHECK_EQ_I64(v.dtype.bits, 16);
  kvc_cache_destroy(c);
}

static void test_batch_operations(void) {
  kvc_cache* c = tu_filled_layer_cache(KVC_LAYER_DYNAMIC_INDEXED, 0, 0, 0, B, H, 2, D);
  REQUIRE(c != NULL);
  REQUIRE_OK(ix_update(c, 0, B, 0, 2, NULL));
  CHECK_OK(kvc_cache_reorder(c, TU_LIST(1, 0), 2));
  CHECK_IX(ix_view(c, 0), 2, TU_LIST(1, 0), 0, 1);
  CHECK_OK(kvc_cache_batch_repeat_interleave(c, 2));
  CHECK_IX(ix_view(c, 0), 4, TU_LIST(1, 1, 0, 0), 0, 1);
  CHECK_OK(kvc_cache_batch_select_indices(c, TU_LIST(3, 0), 2));
  CHECK_IX(ix_view(c, 0), 2, TU_LIST(0, 1), 0, 1);
  EXPECT_ERR_UNCHANGED(c, ix_update(c, 0, 3, 2, 1, NULL), KVC_ERROR_SHAPE_MISMATCH, "x.shape[0] (batch) is 3",
                       "holds batch 2");
  /* An indexer alone (K/V not initialized yet) moves as well. */
  kvc_cache* d = tu_one_layer_cache(KVC_LAYER_DYNAMIC_INDEXED, 0, 0);
  REQUIRE_OK(ix_update(d, 0, B, 0, 1, NULL));
  CHECK_OK(kvc_cache_reorder(d, TU_LIST(1, 1), 2));
  CHECK_IX(ix_view(d, 0), 2, TU_LIST(1, 1), 0);
  TU_DESTROY(d, c);

  /* Static: reorder moves the indexer; select and repeat stay refused as for every static kind. */
  c = tu_one_layer_cache(KVC_LAYER_STATIC_INDEXED, 0, 3);
  REQUIRE(c != NULL);
  REQUIRE_OK(tu_update_tokens(c, 0, B, H, 1, D, D, 0, NULL, NULL));
  REQUIRE_OK(ix_update(c, 0, B, 0, 2, NULL));
  CHECK_OK(kvc_cache_reorder(c, TU_LIST(1, 0), 2));
  CHECK_IX(ix_view(c, 0), 2, TU_LIST(1, 0), 0, 1, -1);
  CHECK_FAILS(kvc_cache_batch_repeat_interleave(c, 2));
  kvc_cache_destroy(c);
}

static void test_split_stack_clone(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC_INDEXED, 0, 0), tu_layer(KVC_LAYER_STATIC_INDEXED, 0, 4));
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 2; i++) {
    REQUIRE_OK(tu_update_tokens(c, i, B, H, 2, D, D, 0, NULL, NULL));
    REQUIRE_OK(ix_update(c, i, B, 0, 3, NULL));
  }
  kvc_cache* parts[2] = {NULL, NULL};
  size_t n = 0;
  REQUIRE_OK(kvc_cache_batch_split(c, B, 1, parts, 2, &n));
  REQUIRE_EQ_I64(n, 2);
  CHECK_IX(ix_view(parts[1], 0), 1, TU_LIST(1), 0, 1, 2);
  CHECK_IX(ix_view(parts[1], 1), 1, TU_LIST(1), 0, 1, 2, -1);
  kvc_cache* back = NULL;
  REQUIRE_OK(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &back));
  CHECK_IX(ix_view(back, 0), 2, NULL, 0, 1, 2);
  CHECK_IX(ix_view(back, 1), 2, NULL, 0, 1, 2, -1);
  /* Splits whose indexers differ do not stack. */
  REQUIRE_OK(ix_update(parts[1], 0, 1, 3, 1, NULL));
  kvc_cache* bad = NULL;
  EXPECT_ERR(kvc_cache_from_batch_splits((const kvc_cache* const*)parts, 2, &bad), KVC_ERROR_INVALID_STATE,
             "layer 0 of splits[1] has indexer length 4 but splits[0] has 3");
  kvc_cache* clone = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &clone));
  CHECK_IX(ix_view(clone, 0), 2, NULL, 0, 1, 2);
  REQUIRE_OK(ix_update(clone, 0, B, 3, 1, NULL)); /* independent of the original */
  CHECK_IX(ix_view(c, 0), 2, NULL, 0, 1, 2);
  CHECK_NE_PTR(ix_view(clone, 1).data, ix_view(c, 1).data);
  TU_DESTROY(clone, back, parts[0], parts[1], c);
}

/* The indexer counts in bytes_reserved and bytes_device, nowhere else; offloading leaves it on the device. */
static void test_memory_and_offload(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_DYNAMIC_INDEXED, 0, 0);
  REQUIRE(c != NULL);
  kvc_memory_info m;
  TU_SIZED(m);
  REQUIRE_OK(ix_update(c, 0, B, 0, 1, NULL));
  CHECK_OK(kvc_cache_memory(c, &m));
  CHECK_EQ_U64(m.bytes_reserved, (uint64_t)B * 64 * W * 4); /* 64 slots at first, float32 */
  CHECK_EQ_U64(m.bytes_device, m.bytes_reserved);
  CHECK_EQ_U64(m.bytes_used, 0);
  CHECK_EQ_U64(m.bytes_state, 0);
  kvc_cache_destroy(c);

  const kvc_layer_type types[2] = {KVC_LAYER_TYPE_INDEXED_ATTENTION, KVC_LAYER_TYPE_INDEXED_ATTENTION};
  kvc_model_config cfg = tu_config(2, types, 0, 0);
  c = tu_preset_cache(KVC_PRESET_OFFLOADED, &cfg, 0, KVC_OFFLOAD_DEFAULT);
  REQUIRE(c != NULL);
  REQUIRE_OK(ix_update(c, 0, B, 0, 2, NULL));
  REQUIRE_OK(tu_update_tokens(c, 0, B, H, 2, D, D, 0, NULL, NULL));
  CHECK_EQ_I64(tu_info(c, 0).is_offloaded, 1); /* the K/V of layer 0 went to the host tier */
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1); /* still readable where it was */
  CHECK_OK(kvc_cache_memory(c, &m));
  CHECK(m.bytes_device >= (uint64_t)B * 64 * W * 4);
  kvc_cache_destroy(c);
}

/* An input that is a view of the indexer itself is read before the store grows or is written. */
static void test_input_aliasing_the_store(void) {
  kvc_cache* c = tu_one_layer_cache(KVC_LAYER_DYNAMIC_INDEXED, 0, 0);
  REQUIRE(c != NULL);
  kvc_tensor v;
  REQUIRE_OK(ix_update(c, 0, B, 0, 40, &v));
  kvc_tensor self = v; /* 40 + 40 > 64: the store grows */
  int64_t shape[3] = {v.shape[0], v.shape[1], v.shape[2]}, st[3] = {v.strides[0], v.strides[1], v.strides[2]};
  self.shape = shape;
  self.strides = st;
  REQUIRE_OK(kvc_cache_update_indexer(c, 0, &self, &v));
  REQUIRE_EQ_I64(v.shape[1], 80);
  for (int64_t b = 0; b < B; b++)
    for (int64_t s = 0; s < 80; s++) CHECK_EQ_F64(ix_at(&v, b, s, 1), ix_value(b, s % 40, 1));
  kvc_cache_destroy(c);

  c = tu_one_layer_cache(KVC_LAYER_STATIC_INDEXED, 0, 6);
  REQUIRE(c != NULL);
  REQUIRE_OK(ix_update(c, 0, B, 0, 3, &v));
  int64_t s3[3] = {B, 3, W}, t3[3] = {v.strides[0], v.strides[1], v.strides[2]};
  self = v; /* slots 1..3 written at 3..5: slot 3 would be read after it was written */
  self.shape = s3;
  self.strides = t3;
  self.byte_offset = (uint64_t)(1 * W) * 4;
  REQUIRE_OK(kvc_cache_update_indexer(c, 0, &self, &v));
  CHECK_IX(v, B, NULL, 0, 1, 2, 1, 2, -1);
  kvc_cache_destroy(c);
}

static void test_errors_leave_the_cache_unchanged(void) {
  kvc_cache* c = TU_CUSTOM_CACHE(tu_layer(KVC_LAYER_DYNAMIC_INDEXED, 0, 0), tu_layer(KVC_LAYER_DYNAMIC, 0, 0));
  REQUIRE(c != NULL);
  REQUIRE_OK(ix_update(c, 0, B, 0, 2, NULL));
  kvc_tensor v;
  EXPECT_ERR_UNCHANGED(c, ix_update(c, 1, B, 0, 1, NULL), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_update_indexer",
                       "layer 1 is a dynamic layer", "no indexer key cache");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_indexer_view(c, 1, &v), KVC_ERROR_INVALID_ARGUMENT, "kvc_cache_indexer_view",
                       "layer 1 is a dynamic layer");
  EXPECT_ERR_UNCHANGED(c, ix_update(c, 2, B, 0, 1, NULL), KVC_ERROR_OUT_OF_RANGE, "kvc_cache_update_indexer");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_indexer(c, 0, NULL, NULL), KVC_ERROR_INVALID_ARGUMENT, "x is NULL");
  EXPECT_ERR_UNCHANGED(c, kvc_cache_indexer_view(c, 0, NULL), KVC_ERROR_INVALID_ARGUMENT, "out is NULL");
  float data[B * 1 * 4] = {0};
  int64_t shape4[3] = {B, 1, 4}, shape2[2] = {B, W}, shape_b[3] = {3, 1, W};
  kvc_tensor x = {data, {KVC_DEVICE_CPU, 0}, 3, {KVC_TYPE_CODE_FLOAT, 32, 1}, shape4, NULL, 0};
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_indexer(c, 0, &x, NULL), KVC_ERROR_SHAPE_MISMATCH,
                       "x.shape[2] (index_head_dim) is 4 but the indexer of layer 0 has 3");
  x.ndim = 2;
  x.shape = shape2;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_indexer(c, 0, &x, NULL), KVC_ERROR_SHAPE_MISMATCH, "x.ndim is 2",
                       "[batch, n, index_head_dim]");
  x.ndim = 3;
  x.shape = shape_b;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_indexer(c, 0, &x, NULL), KVC_ERROR_SHAPE_MISMATCH,
                       "x.shape[0] (batch) is 3 but layer 0 holds batch 2");
  x.shape = (int64_t[3]){B, 1, W};
  x.dtype.bits = 16;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_indexer(c, 0, &x, NULL), KVC_ERROR_DTYPE_MISMATCH,
                       "x.dtype is float16 but the indexer of layer 0 stores float32");
  x.dtype.bits = 32;
  x.device.device_type = KVC_DEVICE_CUDA;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_update_indexer(c, 0, &x, NULL), KVC_ERROR_DEVICE_MISMATCH, "x is on device");
  /* The K/V's first update must take the indexer's batch, and so must an early initialization (whose K/V of
   * another batch would leave the layer's rows and its batch disagreeing). */
  EXPECT_ERR_UNCHANGED(c, tu_update_tokens(c, 0, 3, H, 1, D, D, 0, NULL, NULL), KVC_ERROR_SHAPE_MISMATCH,
                       "batch) is 3", "share one batch");
  kvc_init_options io;
  kvc_init_options_init(&io);
  io.batch_size = 3;
  io.num_kv_heads = H;
  io.k_head_dim = D;
  io.dtype = KVC_DTYPE_FLOAT32;
  EXPECT_ERR_UNCHANGED(c, kvc_cache_early_initialization(c, &io), KVC_ERROR_SHAPE_MISMATCH,
                       "kvc_cache_early_initialization", "options->batch_size is 3",
                       "layer 0 already holds rows of batch 2");
  io.batch_size = B;
  REQUIRE_OK(kvc_cache_early_initialization(c, &io));
  CHECK_EQ_I64(tu_info(c, 0).batch_size, B);
  CHECK_EQ_I64(tu_info(c, 0).is_initialized, 1);
  CHECK_IX(ix_view(c, 0), B, NULL, 0, 1);
  kvc_cache_destroy(c);
}

static void test_presets(void) {
  const kvc_layer_type types[3] = {KVC_LAYER_TYPE_FULL_ATTENTION, KVC_LAYER_TYPE_INDEXED_ATTENTION,
                                   KVC_LAYER_TYPE_INDEXED_ATTENTION};
  kvc_model_config cfg = tu_config(3, types, 0, 0);
  const kvc_preset presets[2] = {KVC_PRESET_DYNAMIC, KVC_PRESET_STATIC};
  const kvc_layer_kind want[2][3] = {{KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_INDEXED, KVC_LAYER_DYNAMIC_INDEXED},
                                     {KVC_LAYER_STATIC, KVC_LAYER_STATIC_INDEXED, KVC_LAYER_STATIC_INDEXED}};
  for (int p = 0; p < 2; p++) {
    kvc_cache* c = tu_preset_cache(presets[p], &cfg, 8, KVC_OFFLOAD_DEFAULT);
    if (!c) continue;
    for (uint32_t i = 0; i < 3; i++) CHECK_EQ_I64(tu_info(c, i).kind, want[p][i]);
    CHECK_EQ_I64(tu_info(c, 2).is_compileable, p == 1);
    kvc_cache_destroy(c);
  }
  kvc_cache_options o = tu_preset_options(KVC_PRESET_QUANTIZED, &cfg, 0, KVC_OFFLOAD_DEFAULT);
  kvc_cache* q = NULL;
  EXPECT_ERR(kvc_cache_create(&o, &q), KVC_ERROR_INVALID_ARGUMENT, "layer 1 is not full attention (type 8)");
  kvc_layer_type bad = 9;
  cfg = tu_config(1, &bad, 0, 0);
  o.preset = KVC_PRESET_DYNAMIC;
  EXPECT_ERR(kvc_cache_create(&o, &q), KVC_ERROR_INVALID_ARGUMENT, "KVC_LAYER_TYPE_INDEXED_ATTENTION (8)");
}

int main(void) {
  TU_RUN(test_dynamic_update_appends);
  TU_RUN(test_static_update_writes_at_its_counter);
  TU_RUN(test_crop);
  TU_RUN(test_reset);
  TU_RUN(test_batch_operations);
  TU_RUN(test_split_stack_clone);
  TU_RUN(test_memory_and_offload);
  TU_RUN(test_input_aliasing_the_store);
  TU_RUN(test_errors_leave_the_cache_unchanged);
  TU_RUN(test_presets);
  return tu_finish();
}
