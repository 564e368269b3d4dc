/*
 * Copies are bit-exact for float32, float16 and bfloat16 on every layer kind
 * (NaN payloads, signed zeros, subnormals, infinities survive every update
 * branch), inputs may have any strides and a byte_offset, and keys and
 * values may have different head dims.
 */
#include "test_util.h"
#include "test_model.h"

#define NB 2
#define NH 2
#define DK 3
#define DV 5
#define NPOS 12

static const uint32_t F32_SPECIAL[] = {0x7fc00001u, 0xffbadbadu, 0x7f800001u, 0x80000000u, 0x00000001u,
                                       0x807fffffu, 0x7f800000u, 0xff800000u, 0x7f7fffffu, 0x00000000u};
static const uint16_t F16_SPECIAL[] = {0x7e01u, 0xfc01u, 0x7c01u, 0x8000u, 0x0001u,
                                       0x83ffu, 0x7c00u, 0xfc00u, 0x7bffu, 0x0000u};
static const uint16_t BF16_SPECIAL[] = {0x7fc1u, 0xff81u, 0x7f81u, 0x8000u, 0x0001u,
                                        0x807fu, 0x7f80u, 0xff80u, 0x7f7fu, 0x0000u};
#define NSPECIAL 10

/*
 * Element bits of position p, [b, h, p, d] of keys (which 0) or values (1):
 * every third element a special value, the others unique so that a
 * misplaced element is noticed.
 */
static uint32_t elem_bits(kvc_dtype dt, int which, int64_t b, int64_t h, int64_t p, int64_t d) {
  uint32_t k = (uint32_t)(((((which * NB + b) * NH + h) * NPOS + p) * 8) + d);
  if (k % 3 == 0) {
    uint32_t i = (k / 3) % NSPECIAL;
    return dt == KVC_DTYPE_FLOAT32 ? F32_SPECIAL[i] : dt == KVC_DTYPE_FLOAT16 ? F16_SPECIAL[i] : BF16_SPECIAL[i];
  }
  return dt == KVC_DTYPE_FLOAT32 ? 0x3f800000u + k : 0x3c00u + (k & 0x3ffu);
}

static void make_input(tu_tensor* x, kvc_dtype dt, int which, int64_t first, int64_t n, const tu_layout* lay) {
  int64_t d = which ? DV : DK;
  size_t es = tu_dtype_bytes(dt);
  unsigned char* raw = (unsigned char*)malloc((size_t)(NB * NH * n * d) * es);
  if (!raw) abort();
  size_t k = 0;
  for (int64_t b = 0; b < NB; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t s = 0; s < n; s++)
        for (int64_t e = 0; e < d; e++, k++) {
          uint32_t bits = elem_bits(dt, which, b, h, first + s, e);
          if (es == 4) {
            memcpy(raw + k * 4, &bits, 4);
          } else {
            uint16_t h16 = (uint16_t)bits;
            memcpy(raw + k * 2, &h16, 2);
          }
        }
  tu_tensor_make_ex(x, dt, NB, NH, n, d, lay, NULL, raw);
  free(raw);
}

/* The view holds exactly the bits of the listed positions (-1: all-zero bits). */
static int check_bits(const kvc_tensor* t, kvc_dtype dt, int which, const int64_t* pos, int64_t n,
                      const char* what) {
  int64_t d = which ? DV : DK;
  int ok = CHECK_SHAPE(*t, NB, NH, n, d);
  if (!ok) return 0;
  CHECK_EQ_I64(kvc_dtype_from_data_type(t->dtype), dt);
  for (int64_t b = 0; b < NB; b++)
    for (int64_t h = 0; h < NH; h++)
      for (int64_t s = 0; s < n; s++)
        for (int64_t e = 0; e < d; e++) {
          int64_t idx[4] = {b, h, s, e};
          uint32_t got = 0;
          memcpy(&got, tu_elem_ptr(t, idx), tu_dtype_bytes(dt));
          uint32_t want = pos[s] < 0 ? 0u : elem_bits(dt, which, b, h, pos[s], e);
          if (tu_dtype_bytes(dt) == 2) want &= 0xffffu;
          if (got != want) {
            tu_report(0, __FILE__, __LINE__, what);
            fprintf(stderr, "    dtype %d %s [%lld,%lld,%lld,%lld] (position %lld): bits 0x%x, expected 0x%x\n",
                    (int)dt, which ? "value" : "key", (long long)b, (long long)h, (long long)s, (long long)e,
                    (long long)pos[s], got, want);
            return 0;
          }
        }
  tu_report(1, __FILE__, __LINE__, what);
  return 1;
}

static const kvc_layer_options* all_kinds(void) {
  static kvc_layer_options l[6];
  static const int64_t wm[6][2] = {{0, 0}, {3, 0}, {5, 0}, {0, NPOS}, {4, NPOS}, {3, NPOS}}; /* window, max_cache_len */
  return tu_layers(l, 6, TU_SIX_KINDS, wm);
}

/* Steps that go through every update branch of every kind. */
static const int64_t STEPS[] = {5, 1, 1, 3, 2};
#define NSTEPS 5

static void bit_exact(kvc_dtype dt, const tu_layout* lay) {
  const kvc_layer_options* l = all_kinds();
  kvc_cache* c = tu_custom_cache(6, l);
  REQUIRE(c != NULL);
  model m[6];
  for (int i = 0; i < 6; i++) m[i] = model_new(l[i].kind, l[i].window, l[i].max_cache_len);
  int64_t first = 0;
  for (int s = 0; s < NSTEPS; s++) {
    tu_tensor k, v;
    make_input(&k, dt, 0, first, STEPS[s], lay);
    make_input(&v, dt, 1, first, STEPS[s], lay);
    for (uint32_t i = 0; i < 6; i++) {
      int64_t ret[32], st[32];
      int64_t nret = model_returned(&m[i], STEPS[s], ret);
      kvc_kv out;
      if (!CHECK_OK(kvc_cache_update(c, i, &k.t, &v.t, NULL, &out))) continue;
      check_bits(&out.key, dt, 0, ret, nret, "returned key bits");
      check_bits(&out.value, dt, 1, ret, nret, "returned value bits");
      m[i].cum += STEPS[s];
      int64_t nst = model_stored(&m[i], m[i].cum, st);
      kvc_kv view = tu_view(c, i);
      if (!check_bits(&view.key, dt, 0, st, nst, "stored key bits") ||
          !check_bits(&view.value, dt, 1, st, nst, "stored value bits"))
        fprintf(stderr, "    (layer %u, step %d)\n", i, s);
    }
    tu_tensor_free(&k);
    tu_tensor_free(&v);
    first += STEPS[s];
  }
  /* a clone, a reorder and a split copy bits as exactly */
  kvc_cache* d = NULL;
  REQUIRE_OK(kvc_cache_clone(c, &d));
  const int64_t id[NB] = {0, 1};
  REQUIRE_OK(kvc_cache_reorder(d, id, NB));
  for (uint32_t i = 0; i < 6; i++) {
    int64_t st[32];
    int64_t nst = model_stored(&m[i], m[i].cum, st);
    kvc_kv view = tu_view(d, i);
    check_bits(&view.key, dt, 0, st, nst, "cloned key bits");
    check_bits(&view.value, dt, 1, st, nst, "cloned value bits");
  }
  TU_DESTROY(d, c);
}

static void test_bit_exact_float32(void) { bit_exact(KVC_DTYPE_FLOAT32, NULL); }
static void test_bit_exact_float16(void) { bit_exact(KVC_DTYPE_FLOAT16, NULL); }
static void test_bit_exact_bfloat16(void) { bit_exact(KVC_DTYPE_BFLOAT16, NULL); }

/* Non-contiguous inputs: [b, s, h, d] memory order with padding and an offset. */
static void test_bit_exact_strided(void) {
  const tu_layout lays[4] = {
      {{0, 2, 1, 3}, 1, 1, 8, 1},  /* the transpose of a projection output, padded */
      {{0, 1, 2, 3}, 2, 0, 0, 1},  /* head_dim stride 2 */
      {{3, 2, 1, 0}, 1, 3, 4, 1},  /* every dim reversed */
      {{1, 0, 2, 3}, 1, 0, 24, 1}, /* heads outermost, byte_offset only */
  };
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 3; j++) bit_exact(dts[j], &lays[i]);
}

/* A zero batch stride (broadcast) repeats row 0 into every row. */
static void test_broadcast_batch_stride(void) {
  kvc_cache* c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  const tu_layout lay = {{0, 1, 2, 3}, 1, 0, 0, 1};
  tu_tensor k, v;
  tu_tensor_tokens_ex(&k, KVC_DTYPE_FLOAT32, 3, NH, 4, DK, 0, 0, &lay);
  tu_tensor_tokens_ex(&v, KVC_DTYPE_FLOAT32, 3, NH, 4, DV, 0, 1, &lay);
  k.strides[0] = 0;
  v.strides[0] = 0;
  const int64_t rows[3] = {0, 0, 0};
  for (uint32_t i = 0; i < 6; i++) {
    kvc_kv out;
    REQUIRE_OK(kvc_cache_update(c, i, &k.t, &v.t, NULL, &out));
    CHECK_EQ_I64(out.key.shape[0], 3);
    CHECK_TOKENS_ROWS(out, out.key.shape[2] == 4 ? TU_LIST(0, 1, 2, 3) : TU_LIST(0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1),
                      out.key.shape[2], rows);
  }
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  kvc_cache_destroy(c);
}

/* Once float16, always float16: no silent conversion. */
static void test_dtype_fixed_by_first_update(void) {
  kvc_cache* c = tu_custom_cache(6, all_kinds());
  REQUIRE(c != NULL);
  for (uint32_t i = 0; i < 6; i++) {
    tu_tensor k, v;
    make_input(&k, KVC_DTYPE_FLOAT16, 0, 0, 2, NULL);
    make_input(&v, KVC_DTYPE_FLOAT16, 1, 0, 2, NULL);
    REQUIRE_OK(kvc_cache_update(c, i, &k.t, &v.t, NULL, NULL));
    tu_tensor_free(&k);
    tu_tensor_free(&v);
    make_input(&k, KVC_DTYPE_BFLOAT16, 0, 2, 1, NULL);
    make_input(&v, KVC_DTYPE_BFLOAT16, 1, 2, 1, NULL);
    CHECK_ERR(kvc_cache_update(c, i, &k.t, &v.t, NULL, NULL), KVC_ERROR_DTYPE_MISMATCH);
    tu_tensor_free(&k);
    tu_tensor_free(&v);
    CHECK_EQ_I64(tu_info(c, i).dtype, KVC_DTYPE_FLOAT16);
    CHECK_EQ_I64(tu_seq(c, i), 2);
  }
  kvc_cache_destroy(c);
}

/* The harness's own conversions agree with the library's dtype table. */
static void test_dtype_table(void) {
  CHECK_EQ_I64(kvc_dtype_size(KVC_DTYPE_FLOAT32), 4);
  CHECK_EQ_I64(kvc_dtype_size(KVC_DTYPE_FLOAT16), 2);
  CHECK_EQ_I64(kvc_dtype_size(KVC_DTYPE_BFLOAT16), 2);
  CHECK_EQ_I64(kvc_dtype_size(KVC_DTYPE_UNSET), 0);
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  for (int i = 0; i < 3; i++) {
    kvc_data_type a = kvc_dtype_to_data_type(dts[i]), b = tu_data_type(dts[i]);
    CHECK(a.code == b.code && a.bits == b.bits && a.lanes == b.lanes);
    CHECK_EQ_I64(kvc_dtype_from_data_type(a), dts[i]);
  }
  kvc_data_type i32 = {KVC_TYPE_CODE_INT, 32, 1}, f64 = {KVC_TYPE_CODE_FLOAT, 64, 1}, f32x2 = {KVC_TYPE_CODE_FLOAT, 32, 2};
  CHECK_EQ_I64(kvc_dtype_from_data_type(i32), KVC_DTYPE_UNSET);
  CHECK_EQ_I64(kvc_dtype_from_data_type(f64), KVC_DTYPE_UNSET);
  CHECK_EQ_I64(kvc_dtype_from_data_type(f32x2), KVC_DTYPE_UNSET);
  kvc_data_type z = kvc_dtype_to_data_type(99);
  CHECK(z.code == 0 && z.bits == 0 && z.lanes == 0);
}

int main(void) {
  TU_RUN(test_bit_exact_float32);
  TU_RUN(test_bit_exact_float16);
  TU_RUN(test_bit_exact_bfloat16);
  TU_RUN(test_bit_exact_strided);
  TU_RUN(test_broadcast_batch_stride);
  TU_RUN(test_dtype_fixed_by_first_update);
  TU_RUN(test_dtype_table);
  return tu_finish();
}
