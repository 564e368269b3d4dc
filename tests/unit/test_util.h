/*
 * test_util.h: the small harness every C unit test of kvcache includes.
 *
 * One test executable = one .c file that includes this header, defines
 * `static void test_x(void)` functions and ends with
 *
 *     int main(void) { TU_RUN(test_x); ...; return tu_finish(); }
 *
 * What it gives:
 *  - CHECK* macros: count the check, print file:line, the expression and
 *    both values on failure, and carry on. REQUIRE* do the same and then
 *    `return` from the (void) test function, for checks later code relies on.
 *  - CHECK_OK / CHECK_ERR: consume a kvc_error* (always destroyed).
 *  - tu_tensor: an owning 4-D tensor built from floats (float32, float16,
 *    bfloat16 with explicit bit conversion), from raw element bits, or with a
 *    non-contiguous layout (permuted dims, padding, inner stride, byte_offset).
 *  - Token-encoded tensors: element [b,h,s,d] of a tensor for token t holds a
 *    float32 value that names (t, b, h, d); tu_check_tokens reads a view back
 *    and checks which token sits at each position.
 *  - tu_read_view / tu_read_view_bytes: read any view (strides, byte_offset,
 *    dtype honoured) into a compact buffer.
 *  - snapshot / snapshot_equal: everything observable about a cache, to
 *    prove that a failed call changed nothing or that a clone is intact.
 *
 * The API is stable: other test files rely on it. Everything is static so the
 * header can be included by exactly one translation unit per test.
 */
#ifndef KVCACHE_TEST_UTIL_H
#define KVCACHE_TEST_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvcache.h"
#include "../common/xorshift.h"

#if defined(__GNUC__) || defined(__clang__)
#  define TU_UNUSED __attribute__((unused))
#else
#  define TU_UNUSED
#endif

/* TU_INSTRUMENTED is 1 in the sanitizer and coverage builds (tests/CMakeLists.txt), which run the same code
   10 to 50 times slower. Exhaustive sweeps (every float32 pattern, hundreds of decode steps) take a sample
   there and stay whole in the plain build, which checks exactness; the instrumented builds check memory and
   undefined behaviour, for which a sample over every branch is enough. */
#ifndef TU_INSTRUMENTED
#  define TU_INSTRUMENTED 0
#endif

/* ------------------------------------------------------------ counters */

/* Where failures are printed: stderr unless a test redirects it (to check that a check fails). */
static TU_UNUSED FILE* tu_log_stream = NULL;
#define TU_LOG (tu_log_stream ? tu_log_stream : stderr)

static TU_UNUSED long tu_checks_total = 0;
static TU_UNUSED long tu_failures_total = 0;
static TU_UNUSED const char* tu_current_test = "(none)";

static TU_UNUSED int tu_report(int ok, const char* file, int line, const char* what) {
  tu_checks_total++;
  if (!ok) {
    tu_failures_total++;
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s\n", file, line, tu_current_test, what);
  }
  return ok;
}

#define CHECK(cond) tu_report((cond) ? 1 : 0, __FILE__, __LINE__, #cond)
#define REQUIRE(cond) do { if (!CHECK(cond)) return; } while (0)

/* Counts one comparison check; on failure prints "ea op eb: values", the values formatted by the caller. */
static TU_UNUSED int tu_check_cmp(int ok, const char* file, int line, const char* ea, const char* op, const char* eb,
                                  const char* values) {
  tu_checks_total++;
  if (ok) return 1;
  tu_failures_total++;
  fprintf(TU_LOG, "%s:%d: FAILED in %s: %s %s %s: %s\n", file, line, tu_current_test, ea, op, eb, values);
  return 0;
}

static TU_UNUSED int tu_check_i64(int64_t a, int64_t b, const char* file, int line, const char* ea,
                                  const char* eb) {
  char v[64];
  snprintf(v, sizeof v, "%lld != %lld", (long long)a, (long long)b);
  return tu_check_cmp(a == b, file, line, ea, "==", eb, v);
}

static TU_UNUSED int tu_check_u64(uint64_t a, uint64_t b, const char* file, int line, const char* ea,
                                  const char* eb) {
  char v[112];
  snprintf(v, sizeof v, "%llu (0x%llx) != %llu (0x%llx)", (unsigned long long)a, (unsigned long long)a,
           (unsigned long long)b, (unsigned long long)b);
  return tu_check_cmp(a == b, file, line, ea, "==", eb, v);
}

static TU_UNUSED int tu_check_ptr(const void* a, const void* b, int want_equal, const char* file,
                                  int line, const char* ea, const char* eb) {
  char v[64];
  snprintf(v, sizeof v, "%p vs %p", a, b);
  return tu_check_cmp((a == b) == (want_equal != 0), file, line, ea, want_equal ? "==" : "!=", eb, v);
}

static TU_UNUSED int tu_check_f64(double a, double b, const char* file, int line, const char* ea,
                                  const char* eb) {
  char v[64];
  snprintf(v, sizeof v, "%.9g != %.9g", a, b);
  return tu_check_cmp(a == b, file, line, ea, "==", eb, v);
}

#define CHECK_EQ_I64(a, b) tu_check_i64((int64_t)(a), (int64_t)(b), __FILE__, __LINE__, #a, #b)
#define CHECK_EQ_U64(a, b) tu_check_u64((uint64_t)(a), (uint64_t)(b), __FILE__, __LINE__, #a, #b)
#define CHECK_EQ_F64(a, b) tu_check_f64((double)(a), (double)(b), __FILE__, __LINE__, #a, #b)
#define CHECK_EQ_PTR(a, b) tu_check_ptr((const void*)(a), (const void*)(b), 1, __FILE__, __LINE__, #a, #b)
#define CHECK_NE_PTR(a, b) tu_check_ptr((const void*)(a), (const void*)(b), 0, __FILE__, __LINE__, #a, #b)
#define REQUIRE_EQ_I64(a, b) do { if (!CHECK_EQ_I64(a, b)) return; } while (0)

/* An ok result: NULL. A non-NULL error is printed, destroyed and counted. */
static TU_UNUSED int tu_ok(kvc_error* err, const char* file, int line, const char* expr) {
  tu_checks_total++;
  if (err == NULL) return 1;
  tu_failures_total++;
  fprintf(TU_LOG, "%s:%d: FAILED in %s: %s returned %s: %s\n", file, line, tu_current_test, expr,
          kvc_code_name(kvc_error_code(err)), kvc_error_message(err));
  kvc_error_destroy(err);
  return 0;
}

/* An error of exactly `code` with a non-empty message; the error is destroyed. */
static TU_UNUSED int tu_err(kvc_error* err, kvc_code code, const char* file, int line,
                            const char* expr) {
  tu_checks_total++;
  if (err == NULL) {
    tu_failures_total++;
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s succeeded, expected %s\n", file, line, tu_current_test,
            expr, kvc_code_name(code));
    return 0;
  }
  kvc_code got = kvc_error_code(err);
  const char* msg = kvc_error_message(err);
  int ok = got == code && msg != NULL && msg[0] != '\0';
  if (!ok) {
    tu_failures_total++;
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s returned %s (\"%s\"), expected %s\n", file, line,
            tu_current_test, expr, kvc_code_name(got), msg ? msg : "(null)", kvc_code_name(code));
  }
  kvc_error_destroy(err);
  return ok;
}

/* Any error (the code is not checked); the error is destroyed. */
static TU_UNUSED int tu_fails(kvc_error* err, const char* file, int line, const char* expr) {
  tu_checks_total++;
  if (err != NULL) {
    kvc_error_destroy(err);
    return 1;
  }
  tu_failures_total++;
  fprintf(TU_LOG, "%s:%d: FAILED in %s: %s succeeded, expected an error\n", file, line, tu_current_test, expr);
  return 0;
}

#define CHECK_FAILS(expr) tu_fails((expr), __FILE__, __LINE__, #expr)
#define CHECK_OK(expr) tu_ok((expr), __FILE__, __LINE__, #expr)
#define REQUIRE_OK(expr) do { if (!CHECK_OK(expr)) return; } while (0)
#define CHECK_ERR(expr, code) tu_err((expr), (code), __FILE__, __LINE__, #expr)

/* ------------------------------------------------------------- runner */

#define TU_RUN(fn)                                                                  \
  do {                                                                              \
    long tu_before_ = tu_failures_total;                                            \
    tu_current_test = #fn;                                                          \
    fn();                                                                           \
    printf("%s %s\n", tu_failures_total == tu_before_ ? "[  OK  ]" : "[ FAIL ]", #fn); \
    fflush(stdout);                                                                 \
  } while (0)

/* Prints the summary; the exit status fails on any failure and on zero checks. */
static TU_UNUSED int tu_finish(void) {
  printf("%ld checks, %ld failures\n", tu_checks_total, tu_failures_total);
  if (tu_checks_total == 0) {
    printf("FAILED: no check ran\n");
    return 1;
  }
  return tu_failures_total == 0 ? 0 : 1;
}

/* ------------------------------------------------------ vector files */

/*
 * tests/conformance/vectors/NAME, found from `unit_file` (the __FILE__ of a
 * tests/unit source), so a test finds its checked-in vectors from any
 * working directory. Written into out[size]; returns out.
 */
static TU_UNUSED const char* tu_vector_path(char* out, size_t size, const char* unit_file, const char* name) {
  snprintf(out, size, "%s", unit_file);
  char* slash = strrchr(out, '/');
  if (slash) *slash = '\0';
  slash = strrchr(out, '/');
  if (slash) *slash = '\0';
  size_t len = strlen(out);
  snprintf(out + len, size - len, "%s/conformance/vectors/%s", slash ? "" : "..", name);
  return out;
}

/* ---------------------------------------------------- bit conversions */

static TU_UNUSED uint32_t tu_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

static TU_UNUSED float tu_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* IEEE binary16, round to nearest even; NaN payload's top bits kept, stays NaN. */
static TU_UNUSED uint16_t tu_f32_to_f16(float f) {
  uint32_t x = tu_f32_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xffu) {
    if (mant == 0) return (uint16_t)(sign | 0x7c00u);
    uint32_t m = mant >> 13;
    if (m == 0) m = 0x200u;
    return (uint16_t)(sign | 0x7c00u | m);
  }
  int32_t e = (int32_t)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    mant |= 0x800000u;
    uint32_t shift = (uint32_t)(14 - e);
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (h & 1u))) h++;
    return (uint16_t)(sign | h);
  }
  uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return (uint16_t)h;
}

static TU_UNUSED float tu_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      int32_t e = 127 - 15 + 1;
      while (!(mant & 0x400u)) {
        mant <<= 1;
        e--;
      }
      mant &= 0x3ffu;
      bits = sign | ((uint32_t)e << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  return tu_bits_f32(bits);
}

/* bfloat16, round to nearest even; NaN stays NaN. */
static TU_UNUSED uint16_t tu_f32_to_bf16(float f) {
  uint32_t x = tu_f32_bits(f);
  if ((x & 0x7f800000u) == 0x7f800000u && (x & 0x7fffffu)) {
    uint32_t r = x >> 16;
    if ((r & 0x7fu) == 0) r |= 0x40u;
    return (uint16_t)r;
  }
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return (uint16_t)(x >> 16);
}

static TU_UNUSED float tu_bf16_to_f32(uint16_t b) { return tu_bits_f32((uint32_t)b << 16); }

/* ---------------------------------------------------- element access */

static TU_UNUSED kvc_dtype tu_tensor_dtype(const kvc_tensor* t) {
  return kvc_dtype_from_data_type(t->dtype);
}

/* Element size in bytes from the DLPack triple (not from the library). */
static TU_UNUSED size_t tu_elem_size(const kvc_tensor* t) { return (size_t)t->dtype.bits / 8u; }

static TU_UNUSED int64_t tu_numel(const kvc_tensor* t) {
  int64_t n = 1;
  for (int32_t i = 0; i < t->ndim; i++) n *= t->shape[i];
  return n;
}

/* Byte address of element `idx` (ndim entries), honouring strides and byte_offset. */
static TU_UNUSED const unsigned char* tu_elem_ptr(const kvc_tensor* t, const int64_t* idx) {
  int64_t off = 0;
  if (t->strides) {
    for (int32_t i = 0; i < t->ndim; i++) off += idx[i] * t->strides[i];
  } else {
    int64_t stride = 1;
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
      off += idx[i] * stride;
      stride *= t->shape[i];
    }
  }
  return (const unsigned char*)t->data + t->byte_offset + (size_t)off * tu_elem_size(t);
}

static TU_UNUSED float tu_load_float(const kvc_tensor* t, const unsigned char* p) {
  if (t->dtype.code == KVC_TYPE_CODE_FLOAT && t->dtype.bits == 32) {
    float f;
    memcpy(&f, p, sizeof f);
    return f;
  }
  uint16_t h;
  memcpy(&h, p, sizeof h);
  if (t->dtype.code == KVC_TYPE_CODE_FLOAT && t->dtype.bits == 16) return tu_f16_to_f32(h);
  return tu_bf16_to_f32(h);
}

/* Element [b,h,s,d] of a 4-D tensor as float. */
static TU_UNUSED float tu_get(const kvc_tensor* t, int64_t b, int64_t h, int64_t s, int64_t d) {
  int64_t idx[4] = {b, h, s, d};
  return tu_load_float(t, tu_elem_ptr(t, idx));
}

/* 1 when every element of a 4-D view at sequence positions `from` and later is zero (a static layer's unwritten
   slots). */
static TU_UNUSED int tu_zero_from(const kvc_tensor* t, int64_t from) {
  for (int64_t b = 0; b < t->shape[0]; b++)
    for (int64_t h = 0; h < t->shape[1]; h++)
      for (int64_t s = from; s < t->shape[2]; s++)
        for (int64_t d = 0; d < t->shape[3]; d++)
          if (tu_get(t, b, h, s, d) != 0.0f) return 0;
  return 1;
}

/* Calls fn for each element in row-major logical order. */
static TU_UNUSED void tu_for_each_index(const kvc_tensor* t, int64_t* idx,
                                        void (*fn)(const kvc_tensor*, const int64_t*, int64_t, void*),
                                        void* ctx) {
  int64_t n = tu_numel(t);
  for (int32_t i = 0; i < t->ndim; i++) idx[i] = 0;
  for (int64_t k = 0; k < n; k++) {
    fn(t, idx, k, ctx);
    for (int32_t i = t->ndim - 1; i >= 0; i--) {
      if (++idx[i] < t->shape[i]) break;
      idx[i] = 0;
    }
  }
}

static TU_UNUSED void tu_read_float_cb(const kvc_tensor* t, const int64_t* idx, int64_t k, void* ctx) {
  ((float*)ctx)[k] = tu_load_float(t, tu_elem_ptr(t, idx));
}

static TU_UNUSED void tu_read_bytes_cb(const kvc_tensor* t, const int64_t* idx, int64_t k, void* ctx) {
  size_t es = tu_elem_size(t);
  memcpy((unsigned char*)ctx + (size_t)k * es, tu_elem_ptr(t, idx), es);
}

/* Reads a view into `out` (numel floats, row-major); returns numel. */
static TU_UNUSED int64_t tu_read_view(const kvc_tensor* t, float* out) {
  int64_t idx[8];
  if (t->ndim > 8) return -1;
  tu_for_each_index(t, idx, tu_read_float_cb, out);
  return tu_numel(t);
}

/* Reads a view's raw element bytes into `out` (numel * element size, row-major); returns bytes. */
static TU_UNUSED size_t tu_read_view_bytes(const kvc_tensor* t, void* out) {
  int64_t idx[8];
  if (t->ndim > 8) return 0;
  tu_for_each_index(t, idx, tu_read_bytes_cb, out);
  return (size_t)tu_numel(t) * tu_elem_size(t);
}

/* Same, into a malloc'ed buffer (free it); *nbytes gets the size. */
static TU_UNUSED unsigned char* tu_view_bytes_alloc(const kvc_tensor* t, size_t* nbytes) {
  size_t n = (size_t)tu_numel(t) * tu_elem_size(t);
  unsigned char* buf = (unsigned char*)malloc(n ? n : 1);
  if (!buf) abort();
  *nbytes = tu_read_view_bytes(t, buf);
  return buf;
}

/* ------------------------------------------------------- owned tensors */

/*
 * An owning 4-D tensor. `t` points at the struct's own shape/strides arrays,
 * so a tu_tensor must not be copied or moved after it is made; pass &x.t.
 */
typedef struct tu_tensor {
  kvc_tensor t;
  int64_t shape[4];
  int64_t strides[4];
  void* alloc;
} tu_tensor;

/*
 * A physical layout. order[0..3] lists the logical dims from outermost to
 * innermost in memory; the innermost has stride inner_stride (>= 1), each
 * next one the previous stride * extent + pad; byte_offset bytes precede
 * element 0 (data points to the allocation start). TU_LAYOUT_COMPACT is the
 * row-major layout with NULL strides.
 */
typedef struct tu_layout {
  int order[4];
  int64_t inner_stride;
  int64_t pad;
  uint64_t byte_offset;
  int explicit_strides; /* 0: NULL strides (only valid for the compact layout) */
} tu_layout;

#define TU_LAYOUT_COMPACT {{0, 1, 2, 3}, 1, 0, 0, 0}

static TU_UNUSED size_t tu_dtype_bytes(kvc_dtype dt) {
  return dt == KVC_DTYPE_FLOAT32 ? 4u : (dt == KVC_DTYPE_FLOAT16 || dt == KVC_DTYPE_BFLOAT16) ? 2u : 0u;
}

static TU_UNUSED kvc_data_type tu_data_type(kvc_dtype dt) {
  kvc_data_type r = {KVC_TYPE_CODE_FLOAT, 32, 1};
  if (dt == KVC_DTYPE_FLOAT16) r.bits = 16;
  if (dt == KVC_DTYPE_BFLOAT16) {
    r.code = KVC_TYPE_CODE_BFLOAT;
    r.bits = 16;
  }
  return r;
}

/* A compact float32 view of `data` with the 4-D `shape` (both borrowed). */
static TU_UNUSED kvc_tensor tu_f32_view(float* data, int64_t* shape) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = KVC_DEVICE_CPU;
  t.ndim = 4;
  t.dtype = tu_data_type(KVC_DTYPE_FLOAT32);
  t.shape = shape;
  return t;
}

static TU_UNUSED void tu_store_float(kvc_dtype dt, unsigned char* p, float f) {
  if (dt == KVC_DTYPE_FLOAT32) {
    memcpy(p, &f, 4);
  } else {
    uint16_t h = dt == KVC_DTYPE_FLOAT16 ? tu_f32_to_f16(f) : tu_f32_to_bf16(f);
    memcpy(p, &h, 2);
  }
}

/*
 * Makes a [b, h, s, d] tensor of dtype `dt` with layout `lay` (NULL =
 * compact). Element values come from `src_f` (floats, converted to the
 * dtype) or `src_bits` (raw elements of the dtype, copied bit for bit),
 * row-major logical order; both NULL leaves zeros.
 */
static TU_UNUSED void tu_tensor_make_ex(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s,
                                        int64_t d, const tu_layout* lay, const float* src_f,
                                        const void* src_bits) {
  static const tu_layout compact = TU_LAYOUT_COMPACT;
  if (!lay) lay = &compact;
  memset(x, 0, sizeof *x);
  x->shape[0] = b;
  x->shape[1] = h;
  x->shape[2] = s;
  x->shape[3] = d;
  int64_t stride = lay->inner_stride < 1 ? 1 : lay->inner_stride;
  for (int i = 3; i >= 0; i--) {
    int dim = lay->order[i];
    x->strides[dim] = stride;
    stride = stride * (x->shape[dim] ? x->shape[dim] : 1) + lay->pad;
  }
  size_t es = tu_dtype_bytes(dt);
  size_t span = 1;
  for (int i = 0; i < 4; i++)
    if (x->shape[i] > 0) span += (size_t)((x->shape[i] - 1) * x->strides[i]);
  size_t bytes = (size_t)lay->byte_offset + span * es + 16;
  x->alloc = calloc(1, bytes);
  if (!x->alloc) abort();
  x->t.data = x->alloc;
  x->t.device.device_type = KVC_DEVICE_CPU;
  x->t.device.device_id = 0;
  x->t.ndim = 4;
  x->t.dtype = tu_data_type(dt);
  x->t.shape = x->shape;
  x->t.strides = lay->explicit_strides ? x->strides : NULL;
  x->t.byte_offset = lay->byte_offset;
  if (!lay->explicit_strides) {
    /* compact: recompute row-major strides for tu_elem_ptr's sake */
    x->strides[3] = 1;
    for (int i = 2; i >= 0; i--) x->strides[i] = x->strides[i + 1] * x->shape[i + 1];
  }
  int64_t k = 0;
  for (int64_t i0 = 0; i0 < b; i0++)
    for (int64_t i1 = 0; i1 < h; i1++)
      for (int64_t i2 = 0; i2 < s; i2++)
        for (int64_t i3 = 0; i3 < d; i3++, k++) {
          int64_t idx[4] = {i0, i1, i2, i3};
          unsigned char* p = (unsigned char*)tu_elem_ptr(&x->t, idx);
          if (src_bits)
            memcpy(p, (const unsigned char*)src_bits + (size_t)k * es, es);
          else if (src_f)
            tu_store_float(dt, p, src_f[k]);
        }
}

/* Compact tensor from floats (NULL = zeros). */
static TU_UNUSED void tu_tensor_make(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s,
                                     int64_t d, const float* src) {
  tu_tensor_make_ex(x, dt, b, h, s, d, NULL, src, NULL);
}

/* Compact tensor from raw element bits (uint32 for float32, uint16 for 16-bit dtypes). */
static TU_UNUSED void tu_tensor_make_bits(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s,
                                          int64_t d, const void* bits) {
  tu_tensor_make_ex(x, dt, b, h, s, d, NULL, NULL, bits);
}

static TU_UNUSED void tu_tensor_free(tu_tensor* x) {
  free(x->alloc);
  x->alloc = NULL;
  x->t.data = NULL;
}

/* ------------------------------------------------ token-encoded values */

/*
 * Token encoding (float32 exact): key element [b,h,s,d] of token t is
 * (t+1)*4096 + (b%16)*256 + (h%16)*16 + (d%16); the value element is its
 * negation. An all-zero position (unwritten static slot) decodes as -1.
 * Tokens up to 4000 are exact in float32.
 */
static TU_UNUSED float tu_token_value(int64_t token, int64_t b, int64_t h, int64_t d, int is_value) {
  float v = (float)((token + 1) * 4096 + (b % 16) * 256 + (h % 16) * 16 + (d % 16));
  return is_value ? -v : v;
}

/* Fills x ([b,h,s,d] of dt, layout lay) with tokens[i] at seq position i, or first_token + i where tokens is NULL
 * (the same token for every batch row). */
static TU_UNUSED void tu_tensor_fill_tokens(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s, int64_t d,
                                            const int64_t* tokens, int64_t first_token, int is_value,
                                            const tu_layout* lay) {
  size_t n = (size_t)(b * h * s * d);
  float* f = (float*)malloc((n ? n : 1) * sizeof(float));
  if (!f) abort();
  size_t k = 0;
  for (int64_t i0 = 0; i0 < b; i0++)
    for (int64_t i1 = 0; i1 < h; i1++)
      for (int64_t i2 = 0; i2 < s; i2++)
        for (int64_t i3 = 0; i3 < d; i3++)
          f[k++] = tu_token_value(tokens ? tokens[i2] : first_token + i2, i0, i1, i3, is_value);
  tu_tensor_make_ex(x, dt, b, h, s, d, lay, f, NULL);
  free(f);
}

/* Fills x with tokens first_token .. first_token+s-1. */
static TU_UNUSED void tu_tensor_tokens_ex(tu_tensor* x, kvc_dtype dt, int64_t b, int64_t h, int64_t s,
                                          int64_t d, int64_t first_token, int is_value,
                                          const tu_layout* lay) {
  tu_tensor_fill_tokens(x, dt, b, h, s, d, NULL, first_token, is_value, lay);
}

static TU_UNUSED void tu_tensor_tokens(tu_tensor* x, int64_t b, int64_t h, int64_t s, int64_t d,
                                       int64_t first_token, int is_value) {
  tu_tensor_tokens_ex(x, KVC_DTYPE_FLOAT32, b, h, s, d, first_token, is_value, NULL);
}

/* Fills x with the given tokens along seq (tokens[i] at position i). */
static TU_UNUSED void tu_tensor_token_list(tu_tensor* x, int64_t b, int64_t h, int64_t d, const int64_t* tokens,
                                           int64_t s, int is_value) {
  tu_tensor_fill_tokens(x, KVC_DTYPE_FLOAT32, b, h, s, d, tokens, 0, is_value, NULL);
}

/*
 * Decodes element [b,h,s,*] of a token-encoded view: returns the token, -1 for
 * all zeros, -2 if the row is inconsistent. *src_b gets the batch row the
 * values came from (mod 16), -1 for zeros.
 */
static TU_UNUSED int64_t tu_decode_token(const kvc_tensor* t, int64_t b, int64_t h, int64_t s,
                                         int is_value, int64_t* src_b) {
  int64_t token = -3, row = -3;
  int all_zero = 1;
  for (int64_t d = 0; d < t->shape[3]; d++) {
    float f = tu_get(t, b, h, s, d);
    if (f != 0.0f) all_zero = 0;
    double v = is_value ? -(double)f : (double)f;
    if (v < 4096.0) {
      if (f == 0.0f) continue;
      token = -2;
      break;
    }
    int64_t iv = (int64_t)v;
    if ((double)iv != v) {
      token = -2;
      break;
    }
    int64_t tk = iv / 4096 - 1;
    int64_t rb = (iv % 4096) / 256;
    int64_t rh = (iv % 256) / 16;
    int64_t rd = iv % 16;
    if (rh != h % 16 || rd != d % 16 || (token != -3 && (tk != token || rb != row))) {
      token = -2;
      break;
    }
    token = tk;
    row = rb;
  }
  if (token == -3 && all_zero) {
    if (src_b) *src_b = -1;
    return -1;
  }
  if (token >= 0 && !all_zero) {
    /* a row mixing zero and non-zero elements is corrupt */
    for (int64_t d = 0; d < t->shape[3]; d++)
      if (tu_get(t, b, h, s, d) == 0.0f) token = -2;
  }
  if (src_b) *src_b = token >= 0 ? row : -2;
  return token >= 0 ? token : -2;
}

/*
 * Checks a token-encoded view: 4-D, seq length n, position i holds token
 * tokens[i] (-1: a zero slot) for every batch row, head and dim. rows (NULL
 * = identity) gives per result batch row the source row (its value mod 16 is
 * compared). Prints the first mismatch.
 */
static TU_UNUSED int tu_check_tokens_impl(const char* file, int line, const char* expr,
                                          const kvc_tensor* t, int is_value, const int64_t* tokens,
                                          int64_t n, const int64_t* rows) {
  tu_checks_total++;
  char why[256] = "";
  if (t->ndim != 4) {
    snprintf(why, sizeof why, "ndim %d != 4", (int)t->ndim);
  } else if (t->shape[2] != n) {
    snprintf(why, sizeof why, "seq length %lld != expected %lld", (long long)t->shape[2], (long long)n);
  } else if (t->data == NULL && tu_numel(t) > 0) {
    snprintf(why, sizeof why, "data is NULL");
  } else {
    for (int64_t b = 0; b < t->shape[0] && !why[0]; b++)
      for (int64_t h = 0; h < t->shape[1] && !why[0]; h++)
        for (int64_t s = 0; s < n && !why[0]; s++) {
          int64_t src = -1;
          int64_t tk = tu_decode_token(t, b, h, s, is_value, &src);
          int64_t want_row = (rows ? rows[b] : b) % 16;
          if (tk != tokens[s] || (tk >= 0 && src != want_row))
            snprintf(why, sizeof why,
                     "at [b=%lld,h=%lld,s=%lld]: token %lld from row %lld, expected token %lld from row %lld",
                     (long long)b, (long long)h, (long long)s, (long long)tk, (long long)src,
                     (long long)tokens[s], (long long)want_row);
        }
  }
  if (why[0]) {
    tu_failures_total++;
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s (%s): %s\n", file, line, tu_current_test, expr,
            is_value ? "value" : "key", why);
    fprintf(TU_LOG, "    got tokens:");
    if (t->ndim == 4 && t->shape[0] > 0 && t->shape[1] > 0)
      for (int64_t s = 0; s < t->shape[2] && s < 64; s++)
        fprintf(TU_LOG, " %lld", (long long)tu_decode_token(t, 0, 0, s, is_value, NULL));
    fprintf(TU_LOG, "\n    expected:  ");
    for (int64_t s = 0; s < n && s < 64; s++) fprintf(TU_LOG, " %lld", (long long)tokens[s]);
    fprintf(TU_LOG, "\n");
    return 0;
  }
  return 1;
}

/* Keys and values of a kvc_kv, both checked. */
static TU_UNUSED int tu_check_kv_tokens(const char* file, int line, const char* expr, const kvc_kv* kv,
                                        const int64_t* tokens, int64_t n, const int64_t* rows) {
  int ok = tu_check_tokens_impl(file, line, expr, &kv->key, 0, tokens, n, rows);
  ok &= tu_check_tokens_impl(file, line, expr, &kv->value, 1, tokens, n, rows);
  return ok;
}

/* CHECK_TOKENS(view_kv, ((int64_t[]){0, 1, 2}), 3): keys and values of a kvc_kv. */
#define CHECK_TOKENS(kv, toks, n) tu_check_kv_tokens(__FILE__, __LINE__, #kv, &(kv), (toks), (n), NULL)
#define CHECK_TOKENS_ROWS(kv, toks, n, rows) \
  tu_check_kv_tokens(__FILE__, __LINE__, #kv, &(kv), (toks), (n), (rows))

/* CHECK_KV_SEQ(kv, 1, 2, -1): the view holds exactly these tokens (-1 = zero slot). */
#define TU_LIST(...) ((const int64_t[]){__VA_ARGS__})
#define TU_COUNT(...) ((int64_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define CHECK_KV_SEQ(kv, ...) CHECK_TOKENS(kv, TU_LIST(__VA_ARGS__), TU_COUNT(__VA_ARGS__))
#define CHECK_KV_EMPTY(kv) CHECK_TOKENS(kv, NULL, 0)
/* CHECK_KV_SEQ of the stored view of c's layer (a one-element array makes it an lvalue). */
#define CHECK_LAYER_SEQ(c, layer, ...) CHECK_KV_SEQ((kvc_kv[1]){tu_view((c), (layer))}[0], __VA_ARGS__)

/* Tokens lo..hi-1 into buf (returns buf) for CHECK_TOKENS. */
static TU_UNUSED int64_t* tu_range(int64_t* buf, int64_t lo, int64_t hi) {
  for (int64_t i = lo; i < hi; i++) buf[i - lo] = i;
  return buf;
}

/* Checks a view's shape: [b, h, s, d]. */
static TU_UNUSED int tu_check_shape_impl(const char* file, int line, const char* expr,
                                         const kvc_tensor* t, int64_t b, int64_t h, int64_t s,
                                         int64_t d) {
  tu_checks_total++;
  if (t->ndim == 4 && t->shape[0] == b && t->shape[1] == h && t->shape[2] == s && t->shape[3] == d)
    return 1;
  tu_failures_total++;
  if (t->ndim == 4)
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s shape [%lld,%lld,%lld,%lld], expected [%lld,%lld,%lld,%lld]\n",
            file, line, tu_current_test, expr, (long long)t->shape[0], (long long)t->shape[1],
            (long long)t->shape[2], (long long)t->shape[3], (long long)b, (long long)h, (long long)s,
            (long long)d);
  else
    fprintf(TU_LOG, "%s:%d: FAILED in %s: %s ndim %d\n", file, line, tu_current_test, expr, (int)t->ndim);
  return 0;
}
#define CHECK_SHAPE(tensor, b, h, s, d) tu_check_shape_impl(__FILE__, __LINE__, #tensor, &(tensor), b, h, s, d)

/* ------------------------------------------------------------ random */

/* One xorshift64 step of *state, the upper bits returned: the tests' reproducible pseudo-random inputs (each file
 * keeps its own state and seed, so its inputs do not depend on the other files). */
static TU_UNUSED uint32_t tu_xorshift32(uint64_t* state) { return (uint32_t)(xs64_next(state) >> 16); }

/* ------------------------------------------------------ cache helpers */

static TU_UNUSED kvc_layer_options tu_layer(kvc_layer_kind kind, int64_t window, int64_t max_cache_len) {
  kvc_layer_options o = KVC_LAYER_OPTIONS_INIT;
  o.kind = kind;
  o.window = window;
  o.max_cache_len = max_cache_len;
  return o;
}

/* l[0..n-1] of the kinds `kinds` names, layer i with window wm[i][0] and
 * max_cache_len wm[i][1]: one line of sizes per test, since each test picks
 * the sizes that reach the branches it is about. Returns l. */
static TU_UNUSED const kvc_layer_options* tu_layers(kvc_layer_options* l, uint32_t n, const kvc_layer_kind* kinds,
                                                    const int64_t (*wm)[2]) {
  for (uint32_t i = 0; i < n; i++) l[i] = tu_layer(kinds[i], wm[i][0], wm[i][1]);
  return l;
}

/* The six attention kinds, in the order the tests' every-kind caches use. */
static const kvc_layer_kind TU_SIX_KINDS[6] = {KVC_LAYER_DYNAMIC, KVC_LAYER_DYNAMIC_SLIDING, KVC_LAYER_DYNAMIC_CHUNKED,
                                               KVC_LAYER_STATIC,  KVC_LAYER_STATIC_SLIDING,  KVC_LAYER_STATIC_CHUNKED};

/* Early-initialization options: a batch of `batch`, `heads` KV heads, key
 * and value head dims `k_dim` and `v_dim` (0: the same as k_dim), `dtype`. */
static TU_UNUSED kvc_init_options tu_init_options(int64_t batch, int64_t heads, int64_t k_dim, int64_t v_dim,
                                                  kvc_dtype dtype) {
  /* the fields KVC_INIT_OPTIONS_INIT leaves at zero, named; the per-layer lists stay NULL */
  const kvc_init_options io = {.struct_size = sizeof(kvc_init_options), .batch_size = batch, .num_kv_heads = heads,
                               .k_head_dim = k_dim, .v_head_dim = v_dim, .dtype = dtype};
  return io;
}

/* A model config of n layers of `types`, sliding window `window` and chunk
 * size `chunk` (0: none); the other fields keep their defaults. */
static TU_UNUSED kvc_model_config tu_config(uint32_t n, const kvc_layer_type* types, int64_t window, int64_t chunk) {
  kvc_model_config cfg = KVC_MODEL_CONFIG_INIT;
  cfg.num_hidden_layers = n;
  cfg.layer_types = types;
  cfg.sliding_window = window;
  cfg.attention_chunk_size = chunk;
  return cfg;
}

/* Options of a `preset` cache over `cfg` (NULL: none) and max_cache_len, offloading as `offload` says; the other
 * fields keep their defaults. What tu_preset_cache creates, and what the bad-input tests start from. */
static TU_UNUSED kvc_cache_options tu_preset_options(kvc_preset preset, const kvc_model_config* cfg,
                                                     int64_t max_cache_len, kvc_offload offload) {
  kvc_cache_options o = KVC_CACHE_OPTIONS_INIT;
  o.preset = preset;
  o.config = cfg;
  o.max_cache_len = max_cache_len;
  o.offload = offload;
  return o;
}

/* The cache `o` describes, or NULL when creation fails (printed and counted). */
static TU_UNUSED kvc_cache* tu_create(const kvc_cache_options* o) {
  kvc_cache* c = NULL;
  if (!CHECK_OK(kvc_cache_create(o, &c))) return NULL;
  return c;
}

/* A `preset` cache over `cfg` (NULL: none) and max_cache_len, offloading as
 * `offload` says; NULL when creation fails (printed and counted). */
static TU_UNUSED kvc_cache* tu_preset_cache(kvc_preset preset, const kvc_model_config* cfg, int64_t max_cache_len,
                                            kvc_offload offload) {
  kvc_cache_options o = tu_preset_options(preset, cfg, max_cache_len, offload);
  return tu_create(&o);
}

/* Options of a custom cache of n layers; the bad-input tests start from these and break one field. */
static TU_UNUSED kvc_cache_options tu_custom_options(uint32_t n, const kvc_layer_options* layers) {
  kvc_cache_options o = tu_preset_options(KVC_PRESET_CUSTOM, NULL, 0, KVC_OFFLOAD_DEFAULT);
  o.num_layers = n;
  o.layers = layers;
  return o;
}

/* A custom cache of n layers offloading the layers `offload` names, or NULL (the error is printed and counted). */
static TU_UNUSED kvc_cache* tu_custom_offload_cache(uint32_t n, const kvc_layer_options* layers,
                                                    kvc_offload offload) {
  kvc_cache_options o = tu_custom_options(n, layers);
  o.offload = offload;
  return tu_create(&o);
}

/* The same, nothing offloaded. */
static TU_UNUSED kvc_cache* tu_custom_cache(uint32_t n, const kvc_layer_options* layers) {
  const kvc_cache_options defaults = KVC_CACHE_OPTIONS_INIT;
  return tu_custom_offload_cache(n, layers, defaults.offload);
}

/* A DynamicCache created without options (layers appear as they are updated), or NULL (counted). */
static TU_UNUSED kvc_cache* tu_lazy_cache(void) { return tu_create(NULL); }

/* Points update options (kvc_update_options or kvc_conv_update_options) at
 * the listed cache positions; the list is a compound literal, alive to the
 * end of the enclosing block. */
#define TU_POSITIONS(opts, ...)                             \
  ((opts).cache_position = (const int64_t[]){__VA_ARGS__}, \
   (opts).cache_position_length = (uint32_t)(sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))

/* A custom cache of the listed kvc_layer_options (tu_layer() values), or NULL (counted). */
#define TU_CUSTOM_CACHE(...)                                                                            \
  tu_custom_cache((uint32_t)(sizeof((kvc_layer_options[]){__VA_ARGS__}) / sizeof(kvc_layer_options)), \
                  (kvc_layer_options[]){__VA_ARGS__})

/* A one-layer custom cache of one kind. */
static TU_UNUSED kvc_cache* tu_one_layer_cache(kvc_layer_kind kind, int64_t window, int64_t max_cache_len) {
  kvc_layer_options l = tu_layer(kind, window, max_cache_len);
  return tu_custom_cache(1, &l);
}

/* update(layer) with float32 token-encoded key [b,h,s,dk] and value [b,h,s,dv] holding tokens[i] at position i, or
 * first + i where tokens is NULL. Returns the library's result. */
static TU_UNUSED kvc_error* tu_update_kv_dt(kvc_cache* c, uint32_t layer, kvc_dtype dt, int64_t b, int64_t h,
                                            int64_t s, int64_t dk, int64_t dv, const int64_t* tokens, int64_t first,
                                            const kvc_update_options* opts, kvc_kv* out) {
  tu_tensor k, v;
  tu_tensor_fill_tokens(&k, dt, b, h, s, dk, tokens, first, 0, NULL);
  tu_tensor_fill_tokens(&v, dt, b, h, s, dv, tokens, first, 1, NULL);
  kvc_error* e = kvc_cache_update(c, layer, &k.t, &v.t, opts, out);
  tu_tensor_free(&k);
  tu_tensor_free(&v);
  return e;
}

static TU_UNUSED kvc_error* tu_update_kv(kvc_cache* c, uint32_t layer, int64_t b, int64_t h, int64_t s, int64_t dk,
                                         int64_t dv, const int64_t* tokens, int64_t first,
                                         const kvc_update_options* opts, kvc_kv* out) {
  return tu_update_kv_dt(c, layer, KVC_DTYPE_FLOAT32, b, h, s, dk, dv, tokens, first, opts, out);
}

/* Frees the key and value tensors of n layers (as update_all takes them). */
static TU_UNUSED void tu_tensors_free(tu_tensor* k, tu_tensor* v, size_t n) {
  for (size_t i = 0; i < n; i++) {
    tu_tensor_free(&k[i]);
    tu_tensor_free(&v[i]);
  }
}

/* The end of a set-up: the cache when every step went well (ok), else NULL with the cache destroyed. */
static TU_UNUSED kvc_cache* tu_kept(kvc_cache* c, int ok) {
  if (ok) return c;
  kvc_cache_destroy(c);
  return NULL;
}

/* update(layer) of tokens first..first+s-1. */
static TU_UNUSED kvc_error* tu_update_tokens(kvc_cache* c, uint32_t layer, int64_t b, int64_t h,
                                             int64_t s, int64_t dk, int64_t dv, int64_t first,
                                             const kvc_update_options* opts, kvc_kv* out) {
  return tu_update_kv(c, layer, b, h, s, dk, dv, NULL, first, opts, out);
}

/* c once layer `layer` got tokens 0..n-1 (keys [b, h, n, dk], values [b, h, n, dv]): the set-up of a test that starts
 * from a cache holding something. NULL when c is NULL or the update fails (counted; c is destroyed). */
static TU_UNUSED kvc_cache* tu_holding_tokens(kvc_cache* c, uint32_t layer, int64_t b, int64_t h, int64_t n,
                                              int64_t dk, int64_t dv) {
  if (!CHECK(c != NULL)) return NULL;
  return tu_kept(c, CHECK_OK(tu_update_tokens(c, layer, b, h, n, dk, dv, 0, NULL, NULL)));
}

/* A one-layer cache of one kind holding tokens 0..n-1 (keys and values [b, h, n, d]), recording its past if
 * record_past: the set-up of most single-layer tests. NULL (the failing step counted) when a step fails. */
static TU_UNUSED kvc_cache* tu_filled_layer_cache(kvc_layer_kind kind, int64_t window, int64_t max_cache_len,
                                                  int record_past, int64_t b, int64_t h, int64_t n, int64_t d) {
  kvc_cache* c = tu_one_layer_cache(kind, window, max_cache_len);
  if (!CHECK(c != NULL)) return NULL;
  if (record_past && !CHECK_OK(kvc_cache_activate_past_recording(c))) return tu_kept(c, 0);
  return tu_holding_tokens(c, 0, b, h, n, d, d);
}

/* update(layer) with the listed tokens along seq. */
static TU_UNUSED kvc_error* tu_update_list(kvc_cache* c, uint32_t layer, int64_t b, int64_t h, int64_t dk,
                                           int64_t dv, const int64_t* tokens, int64_t s,
                                           const kvc_update_options* opts, kvc_kv* out) {
  return tu_update_kv(c, layer, b, h, s, dk, dv, tokens, 0, opts, out);
}

/* The stored view of a layer (an all-zero kvc_kv, counted as a failure, on error). */
static TU_UNUSED kvc_kv tu_view(const kvc_cache* c, uint32_t layer) {
  kvc_kv kv;
  memset(&kv, 0, sizeof kv);
  CHECK_OK(kvc_cache_layer_view(c, layer, &kv));
  return kv;
}

static TU_UNUSED int64_t tu_seq(const kvc_cache* c, uint32_t layer) {
  int64_t v = -999;
  CHECK_OK(kvc_cache_seq_length(c, layer, &v));
  return v;
}

static TU_UNUSED int64_t tu_max_len(const kvc_cache* c, int32_t layer) {
  int64_t v = -999;
  CHECK_OK(kvc_cache_max_length(c, layer, &v));
  return v;
}

/* Checks mask_sizes(q, layer) == (len, off). */
static TU_UNUSED int tu_check_mask_impl(const char* file, int line, const kvc_cache* c, int64_t q,
                                        uint32_t layer, int64_t len, int64_t off) {
  int64_t l = -999, o = -999;
  kvc_error* e = kvc_cache_mask_sizes(c, q, layer, &l, &o);
  if (!tu_ok(e, file, line, "kvc_cache_mask_sizes")) return 0;
  int ok = tu_check_i64(l, len, file, line, "mask kv_length", "expected");
  ok &= tu_check_i64(o, off, file, line, "mask kv_offset", "expected");
  return ok;
}
#define CHECK_MASK(c, q, layer, len, off) tu_check_mask_impl(__FILE__, __LINE__, (c), (q), (layer), (len), (off))

/* Zeroes the output struct `s` and sets its struct_size to this build's, as a query wants it. */
#define TU_SIZED(s) (memset(&(s), 0, sizeof(s)), (s).struct_size = sizeof(s))

static TU_UNUSED kvc_layer_info tu_info(const kvc_cache* c, uint32_t layer) {
  kvc_layer_info li;
  TU_SIZED(li);
  CHECK_OK(kvc_cache_layer_info(c, layer, &li));
  return li;
}

/* An initialized layer's geometry as kvc_layer_info reports it: dtype, batch, KV heads, key and value head dims and
 * seq_length, each its own check (the line of the failing field is the caller's). */
static TU_UNUSED int tu_check_geometry(const char* file, int line, const kvc_layer_info* li, kvc_dtype dtype,
                                       int64_t batch, int64_t heads, int64_t k_dim, int64_t v_dim, int64_t seq) {
  const int64_t got[7] = {li->is_initialized, li->dtype, li->batch_size, li->num_kv_heads,
                          li->k_head_dim, li->v_head_dim, li->seq_length};
  const int64_t want[7] = {1, dtype, batch, heads, k_dim, v_dim, seq};
  static const char* const names[7] = {"is_initialized", "dtype", "batch_size", "num_kv_heads",
                                       "k_head_dim", "v_head_dim", "seq_length"};
  int ok = 1;
  for (int i = 0; i < 7; i++) ok &= tu_check_i64(got[i], want[i], file, line, names[i], "expected");
  return ok;
}
#define CHECK_GEOMETRY(li, dtype, batch, heads, k_dim, v_dim, seq) \
  tu_check_geometry(__FILE__, __LINE__, &(li), (dtype), (batch), (heads), (k_dim), (v_dim), (seq))

static TU_UNUSED kvc_memory_info tu_memory(const kvc_cache* c) {
  kvc_memory_info m;
  TU_SIZED(m);
  CHECK_OK(kvc_cache_memory(c, &m));
  return m;
}

/* ------------------------------------------------------------ snapshots */

/* One snapshot implementation for every test: ../common/cache_snapshot.h. A unit test is one source, so the
 * implementation is part of it. */
#include "../common/cache_snapshot.c"

typedef cache_snap tu_snapshot;
typedef snap_tensor tu_tensor_snap;

/* Captures everything observable about `c` (free with snapshot_free). */
static TU_UNUSED void snapshot(const kvc_cache* c, tu_snapshot* s) { snap_take(c, s); }
static TU_UNUSED void snapshot_free(tu_snapshot* s) { snap_free(s); }

/* A view's descriptor and compact bytes (free its .bytes). */
static TU_UNUSED void tu_tensor_snap_take(const kvc_tensor* t, tu_tensor_snap* s) { snap_tensor_take(t, s, NULL); }

static TU_UNUSED int tu_tensor_snap_equal(const tu_tensor_snap* a, const tu_tensor_snap* b, uint32_t layer,
                                          const char* which) {
  char why[160];
  if (snap_tensor_equal(a, b, 0, why, sizeof why)) return 1;
  fprintf(TU_LOG, "  snapshot: layer %u %s: %s\n", layer, which, why);
  return 0;
}

/* Layer i's kvc_layer_info of two caches, tiers aside; prints the first difference. */
static TU_UNUSED int tu_layer_info_equal(const kvc_layer_info* a, const kvc_layer_info* b, uint32_t i) {
  char why[160];
  if (snap_info_equal(a, b, i, SNAP_IGNORE_TIERS, why, sizeof why)) return 1;
  fprintf(TU_LOG, "  snapshot: %s differs\n", why);
  return 0;
}

#define TU_SNAP_FIELD(fa, fb, label)                                                           \
  do {                                                                                         \
    if ((int64_t)(fa) != (int64_t)(fb)) {                                                      \
      fprintf(TU_LOG, "  snapshot: %s differs: %lld vs %lld\n", label, (long long)(fa), (long long)(fb)); \
      return 0;                                                                                \
    }                                                                                          \
  } while (0)

/*
 * 1 if the two snapshots agree on everything, else 0 after printing the
 * first difference to stderr. Does not count as a check (see CHECK_SNAPSHOT_EQUAL).
 * Tiers (is_offloaded, bytes on the device and the host) are the offload
 * tests' own checks; ignore_reserved also skips memory.bytes_reserved.
 */
static TU_UNUSED int snapshot_equal_ex(const tu_snapshot* a, const tu_snapshot* b, int ignore_reserved) {
  char why[256];
  if (snap_equal(a, b, SNAP_IGNORE_TIERS | (ignore_reserved ? SNAP_IGNORE_RESERVED : 0u), why, sizeof why)) return 1;
  fprintf(TU_LOG, "  snapshot: %s differs\n", why);
  return 0;
}

static TU_UNUSED int snapshot_equal(const tu_snapshot* a, const tu_snapshot* b) {
  return snapshot_equal_ex(a, b, 0);
}

/* The same, except memory.bytes_reserved (storage capacity may legitimately differ). */
static TU_UNUSED int snapshot_equal_contents(const tu_snapshot* a, const tu_snapshot* b) {
  return snapshot_equal_ex(a, b, 1);
}

#define CHECK_SNAPSHOT_EQUAL_CONTENTS(a, b) \
  tu_report(snapshot_equal_contents((a), (b)), __FILE__, __LINE__, "snapshot_equal_contents(" #a ", " #b ")")
#define CHECK_SNAPSHOT_EQUAL(a, b) tu_report(snapshot_equal((a), (b)), __FILE__, __LINE__, "snapshot_equal(" #a ", " #b ")")

/* Runs the statements (with their own checks) around two snapshots of `obj` of type snap_type, taken and freed
 * by take and release, and compares them with the check macro `check`. */
#define TU_UNCHANGED_BY(snap_type, take, release, check, obj, ...) \
  do {                                                             \
    snap_type before_, after_;                                     \
    take((obj), &before_);                                         \
    __VA_ARGS__;                                                   \
    take((obj), &after_);                                          \
    check(&before_, &after_);                                      \
    release(&before_);                                             \
    release(&after_);                                              \
  } while (0)

/* Runs the statements and checks that `cache` is observably unchanged afterwards. */
#define CHECK_UNCHANGED_BY(cache, ...) \
  TU_UNCHANGED_BY(tu_snapshot, snapshot, snapshot_free, CHECK_SNAPSHOT_EQUAL, cache, __VA_ARGS__)

/* Destroys every cache listed, in order (NULL ones too): the end of a test that made several. */
static TU_UNUSED void tu_destroy_caches(kvc_cache* const* caches, size_t n) {
  for (size_t i = 0; i < n; i++) kvc_cache_destroy(caches[i]);
}
#define TU_DESTROY(...) \
  tu_destroy_caches((kvc_cache* const[]){__VA_ARGS__}, sizeof((kvc_cache* const[]){__VA_ARGS__}) / sizeof(kvc_cache*))

/* Defines `name(x, y, ignore_reserved)`: whether two handles agree on everything observable (all but reserved
 * capacity with ignore_reserved), by the snapshots that take/release/equal_ex make and compare. */
#define TU_DEFINE_EQUAL(name, handle, snap_type, take, release, equal_ex) \
  static TU_UNUSED int name(handle x, handle y, int ignore_reserved) {  \
    snap_type a, b;                                                     \
    take(x, &a);                                                        \
    take(y, &b);                                                        \
    int same = equal_ex(&a, &b, ignore_reserved);                       \
    release(&a);                                                        \
    release(&b);                                                        \
    return same;                                                        \
  }

TU_DEFINE_EQUAL(tu_caches_equal, const kvc_cache*, tu_snapshot, snapshot, snapshot_free, snapshot_equal_ex)

#define CHECK_CACHES_EQUAL(x, y) tu_report(tu_caches_equal((x), (y), 0), __FILE__, __LINE__, "caches_equal(" #x ", " #y ")")
#define CHECK_CACHES_EQUAL_CONTENTS(x, y) \
  tu_report(tu_caches_equal((x), (y), 1), __FILE__, __LINE__, "caches_equal_contents(" #x ", " #y ")")

/* Encoder-decoder: both caches plus the is_updated flags. */
#define TU_ED_MAX_FLAGS 64
typedef struct tu_ed_snapshot {
  tu_snapshot self_attention;
  tu_snapshot cross_attention;
  uint32_t num_flags;
  int32_t is_updated[TU_ED_MAX_FLAGS];
} tu_ed_snapshot;

static TU_UNUSED void snapshot_ed(kvc_encoder_decoder_cache* c, tu_ed_snapshot* s) {
  memset(s, 0, sizeof *s);
  kvc_cache* sa = kvc_encoder_decoder_cache_self_attention(c);
  kvc_cache* ca = kvc_encoder_decoder_cache_cross_attention(c);
  snapshot(sa, &s->self_attention);
  snapshot(ca, &s->cross_attention);
  uint32_t n = s->cross_attention.num_layers > s->self_attention.num_layers
                   ? s->cross_attention.num_layers
                   : s->self_attention.num_layers;
  n += 2;
  if (n > TU_ED_MAX_FLAGS) n = TU_ED_MAX_FLAGS;
  s->num_flags = n;
  for (uint32_t i = 0; i < n; i++) {
    s->is_updated[i] = -999;
    kvc_error_destroy(kvc_encoder_decoder_cache_is_updated(c, i, &s->is_updated[i]));
  }
}

static TU_UNUSED void snapshot_ed_free(tu_ed_snapshot* s) {
  snapshot_free(&s->self_attention);
  snapshot_free(&s->cross_attention);
}

static TU_UNUSED int snapshot_ed_equal_ex(const tu_ed_snapshot* a, const tu_ed_snapshot* b, int ignore_reserved) {
  if (!snapshot_equal_ex(&a->self_attention, &b->self_attention, ignore_reserved)) {
    fprintf(TU_LOG, "  (in the self-attention cache)\n");
    return 0;
  }
  if (!snapshot_equal_ex(&a->cross_attention, &b->cross_attention, ignore_reserved)) {
    fprintf(TU_LOG, "  (in the cross-attention cache)\n");
    return 0;
  }
  TU_SNAP_FIELD(a->num_flags, b->num_flags, "is_updated count");
  for (uint32_t i = 0; i < a->num_flags; i++) {
    char label[48];
    snprintf(label, sizeof label, "is_updated[%u]", i);
    TU_SNAP_FIELD(a->is_updated[i], b->is_updated[i], label);
  }
  return 1;
}

/* The _CONTENTS form skips memory.bytes_reserved of both caches. */
#define CHECK_ED_SNAPSHOT_EQUAL_CONTENTS(a, b) \
  tu_report(snapshot_ed_equal_ex((a), (b), 1), __FILE__, __LINE__, "snapshot_ed_equal_contents(" #a ", " #b ")")
#define CHECK_ED_SNAPSHOT_EQUAL(a, b) \
  tu_report(snapshot_ed_equal_ex((a), (b), 0), __FILE__, __LINE__, "snapshot_ed_equal(" #a ", " #b ")")

/* tu_caches_equal for encoder-decoder caches: both caches and the is_updated flags. */
TU_DEFINE_EQUAL(tu_eds_equal, kvc_encoder_decoder_cache*, tu_ed_snapshot, snapshot_ed, snapshot_ed_free,
                snapshot_ed_equal_ex)
#define CHECK_EDS_EQUAL_CONTENTS(x, y) \
  tu_report(tu_eds_equal((x), (y), 1), __FILE__, __LINE__, "eds_equal_contents(" #x ", " #y ")")

/* CHECK_UNCHANGED_BY for an encoder-decoder cache: both caches and the is_updated flags. */
#define CHECK_ED_UNCHANGED_BY(ed, ...) \
  TU_UNCHANGED_BY(tu_ed_snapshot, snapshot_ed, snapshot_ed_free, CHECK_ED_SNAPSHOT_EQUAL, ed, __VA_ARGS__)

#endif /* KVCACHE_TEST_UTIL_H */
