/*
 * The quantizer arithmetic of backends/cpu/quantize.h against optimum-quanto and hqq
 * themselves: tests/conformance/vectors/quant_math.qv (written by
 * tests/conformance/generate_quant_math.py, format described there) holds
 * inputs with the codes, scales, zero points and dequantized values the
 * libraries produced, called as transformers calls them. Every case goes
 * through the layout, gather, quantize, dequantize and scatter path and
 * must agree bit for bit. Then properties that need no library: bit packing
 * round trips, quanto's error bound, HQQ against plain min/max rounding.
 *
 * Usage: test_internal_quantizers [VECTORS] [--measure]
 * (VECTORS defaults to the file next to this source; --measure prints the
 * dequantization error and speed on a [1, 8, 1024, 128] float16 tensor).
 */
#include <math.h>
#include <time.h>

#include "half.h"
#include "cpu/quantize.h"
#include "quant_layout.h"
#include "test_util.h"

/* ------------------------------------------------------------ the vector file */

typedef struct qv_tensor {
  kvc_dtype dtype;
  int64_t shape[4], numel;
  uint32_t* bits; /* raw element bits (16-bit dtypes in the low half) */
} qv_tensor;

typedef struct qv_case {
  char name[128];
  kvc_quantizer quantizer;
  int nbits, axis;
  int64_t group;
  qv_tensor in;
  int64_t refused; /* transformers' N when it refuses the group size, else -1 */
  int64_t ngroups, group_len;
  uint8_t* codes;
  qv_tensor scale, zero, deq;
} qv_case;

typedef struct qv_file {
  char* text;
  char* at;
  qv_case* cases;
  size_t ncases;
  char meta[256];
} qv_file;

static const char* token(qv_file* f) {
  char* p = f->at;
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
  if (!*p) return NULL;
  char* start = p;
  while (*p && *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') p++;
  if (*p) *p++ = '\0';
  f->at = p;
  return start;
}

static int expect_token(qv_file* f, const char* want) {
  const char* t = token(f);
  if (t && strcmp(t, want) == 0) return 1;
  fprintf(stderr, "quant_math.qv: expected '%s', read '%s'\n", want, t ? t : "(end)");
  return 0;
}

static int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

/* `len` bytes from a hex token; 0 if it does not hold exactly that. */
static int read_hex(qv_file* f, unsigned char* out, size_t len) {
  const char* t = token(f);
  if (!t || strlen(t) != 2 * len) return 0;
  for (size_t i = 0; i < len; i++) {
    int hi = hex_value(t[2 * i]), lo = hex_value(t[2 * i + 1]);
    if (hi < 0 || lo < 0) return 0;
    out[i] = (unsigned char)(hi << 4 | lo);
  }
  return 1;
}

static size_t dtype_bytes(kvc_dtype dt) { return dt == KVC_DTYPE_FLOAT32 ? 4 : 2; }

/* A generate.py tensor record: x DT B H S D HEX. */
static int read_tensor(qv_file* f, qv_tensor* t) {
  if (!expect_token(f, "x")) return 0;
  const char* dt = token(f);
  if (!dt) return 0;
  t->dtype = strcmp(dt, "f32") == 0 ? KVC_DTYPE_FLOAT32 : strcmp(dt, "f16") == 0 ? KVC_DTYPE_FLOAT16 : KVC_DTYPE_BFLOAT16;
  t->numel = 1;
  for (int i = 0; i < 4; i++) {
    const char* s = token(f);
    if (!s) return 0;
    t->shape[i] = atoll(s);
    t->numel *= t->shape[i];
  }
  size_t eb = dtype_bytes(t->dtype);
  unsigned char* raw = (unsigned char*)malloc((size_t)t->numel * eb);
  t->bits = (uint32_t*)malloc((size_t)t->numel * sizeof *t->bits);
  if (!raw || !t->bits || !read_hex(f, raw, (size_t)t->numel * eb)) {
    free(raw);
    return 0;
  }
  for (int64_t i = 0; i < t->numel; i++) {
    const unsigned char* p = raw + (size_t)i * eb;
    t->bits[i] = eb == 4 ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
                         : (uint32_t)p[0] | (uint32_t)p[1] << 8;
  }
  free(raw);
  return 1;
}

static float bits_to_f32(kvc_dtype dt, uint32_t b) {
  if (dt == KVC_DTYPE_FLOAT16) return kvci_f16_to_f32((uint16_t)b);
  if (dt == KVC_DTYPE_BFLOAT16) return kvci_bf16_to_f32((uint16_t)b);
  return kvci_f32_from_bits(b);
}

static uint32_t f32_to_bits(kvc_dtype dt, float f) {
  if (dt == KVC_DTYPE_FLOAT16) return kvci_f32_to_f16(f);
  if (dt == KVC_DTYPE_BFLOAT16) return kvci_f32_to_bf16(f);
  return kvci_f32_bits(f);
}

static int read_case(qv_file* f, qv_case* c) {
  const char* t;
  memset(c, 0, sizeof *c);
  c->refused = -1;
  if (!(t = token(f))) return 0;
  snprintf(c->name, sizeof c->name, "%s", t);
  if (!(t = token(f))) return 0;
  c->quantizer = strcmp(t, "hqq") == 0 ? KVC_QUANTIZER_HQQ : KVC_QUANTIZER_QUANTO;
  if (!(t = token(f))) return 0;
  c->nbits = atoi(t);
  if (!(t = token(f))) return 0;
  c->axis = atoi(t);
  if (!(t = token(f))) return 0;
  c->group = atoll(t);
  if (!token(f)) return 0; /* how the library was called: documentation */
  if (!expect_token(f, "in") || !read_tensor(f, &c->in)) return 0;
  if (!(t = token(f))) return 0;
  if (strcmp(t, "refused") == 0) {
    if (!(t = token(f))) return 0;
    c->refused = atoll(t);
    return 1;
  }
  if (strcmp(t, "groups") != 0) return 0;
  if (!(t = token(f))) return 0;
  c->ngroups = atoll(t);
  if (!(t = token(f))) return 0;
  c->group_len = atoll(t);
  if (c->ngroups * c->group_len != c->in.numel) return 0;
  c->codes = (uint8_t*)malloc((size_t)c->in.numel);
  if (!c->codes || !expect_token(f, "codes") || !read_hex(f, c->codes, (size_t)c->in.numel)) return 0;
  return expect_token(f, "scale") && read_tensor(f, &c->scale) && expect_token(f, "zero") &&
         read_tensor(f, &c->zero) && expect_token(f, "deq") && read_tensor(f, &c->deq);
}

static void free_tensor(qv_tensor* t) { free(t->bits); }

static void free_file(qv_file* f) {
  for (size_t i = 0; i < f->ncases; i++) {
    qv_case* c = &f->cases[i];
    free_tensor(&c->in);
    free(c->codes);
    free_tensor(&c->scale);
    free_tensor(&c->zero);
    free_tensor(&c->deq);
  }
  free(f->cases);
  free(f->text);
}

static int load_file(const char* path, qv_file* f) {
  memset(f, 0, sizeof *f);
  FILE* fp = fopen(path, "rb");
  if (!fp) {
    fprintf(stderr, "cannot open %s\n", path);
    return 0;
  }
  fseek(fp, 0, SEEK_END);
  long size = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  f->text = (char*)malloc((size_t)size + 1);
  size_t got = f->text ? fread(f->text, 1, (size_t)size, fp) : 0;
  fclose(fp);
  if (got != (size_t)size) return 0;
  f->text[size] = '\0';
  f->at = f->text;
  if (!expect_token(f, "QUANTMATH") || !expect_token(f, "1") || !expect_token(f, "meta")) return 0;
  char* eol = strchr(f->at, '\n');
  if (!eol) return 0;
  *eol = '\0';
  snprintf(f->meta, sizeof f->meta, "%s", f->at);
  f->at = eol + 1;
  size_t cap = 0;
  for (;;) {
    const char* t = token(f);
    if (!t) return 0;
    if (strcmp(t, "end") == 0) return 1;
    if (strcmp(t, "case") != 0) return 0;
    if (f->ncases == cap) {
      cap = cap ? 2 * cap : 64;
      qv_case* grown = (qv_case*)realloc(f->cases, cap * sizeof *grown);
      if (!grown) return 0;
      f->cases = grown;
    }
    if (!read_case(f, &f->cases[f->ncases++])) {
      fprintf(stderr, "quant_math.qv: case %zu (%s) is malformed\n", f->ncases, f->cases[f->ncases - 1].name);
      return 0;
    }
  }
}

/* ------------------------------------------------------------ replaying one case */

static int64_t first_bits_mismatch(const qv_tensor* want, const float* got, int64_t n) {
  for (int64_t i = 0; i < n; i++)
    if (f32_to_bits(want->dtype, got[i]) != want->bits[i]) return i;
  return -1;
}

/*
 * Runs case `c` through the quantize.h path and returns the number of
 * quantities (layout, codes, scales, zeros, dequantized values, round trips)
 * that disagree with the file; `log` (may be NULL) gets the first difference
 * of each.
 */
static int case_mismatches(const qv_case* c, FILE* log) {
  int bad = 0;
  kvc_quant_layout lay;
  int rc = kvci_quant_layout_init(&lay, c->quantizer, c->axis, c->group, c->in.shape);
  if (c->refused >= 0) {
    if (rc != -1 || lay.axis_numel != c->refused) {
      if (log) fprintf(log, "%s: layout rc %d N %lld, transformers refuses with N %lld\n", c->name, rc,
                       (long long)lay.axis_numel, (long long)c->refused);
      return 1;
    }
    return 0;
  }
  if (rc != 0 || lay.ngroups != c->ngroups || lay.group != c->group_len) {
    if (log) fprintf(log, "%s: layout rc %d, %lld groups of %lld; expected %lld of %lld\n", c->name, rc,
                     (long long)lay.ngroups, (long long)lay.group, (long long)c->ngroups, (long long)c->group_len);
    return 1;
  }
  const int64_t n = c->in.numel, ng = c->ngroups;
  float* x = (float*)malloc((size_t)n * sizeof *x);
  float* grouped = (float*)malloc((size_t)n * sizeof *grouped);
  float* back = (float*)malloc((size_t)n * sizeof *back);
  uint8_t* codes = (uint8_t*)malloc((size_t)n);
  uint8_t* packed = (uint8_t*)malloc(kvci_packed_bytes(n, c->nbits) + 1);
  float* scale = (float*)malloc((size_t)ng * sizeof *scale);
  float* zero = (float*)malloc((size_t)ng * sizeof *zero);
  if (!x || !grouped || !back || !codes || !packed || !scale || !zero) {
    if (log) fprintf(log, "%s: out of memory\n", c->name);
    bad = 1;
    goto done;
  }
  for (int64_t i = 0; i < n; i++) x[i] = bits_to_f32(c->in.dtype, c->in.bits[i]);
  kvci_quant_gather(&lay, x, grouped);
  kvci_quant_scatter(&lay, grouped, back);
  if (memcmp(x, back, (size_t)n * sizeof *x) != 0) {
    if (log) fprintf(log, "%s: scatter(gather(x)) != x\n", c->name);
    bad++;
  }
  kvc_quantizer_spec spec = {c->quantizer, c->nbits, c->in.dtype, c->axis};
  if (kvci_quantize_groups(&spec, grouped, ng, lay.group, codes, scale, zero) != 0) {
    if (log) fprintf(log, "%s: kvci_quantize_groups failed\n", c->name);
    bad++;
    goto done;
  }
  for (int64_t i = 0; i < n; i++)
    if (codes[i] != c->codes[i]) {
      if (log) fprintf(log, "%s: code %lld (group %lld) is %u, the library's %u\n", c->name, (long long)i,
                       (long long)(i / lay.group), codes[i], c->codes[i]);
      bad++;
      break;
    }
  int64_t at;
  if ((at = first_bits_mismatch(&c->scale, scale, ng)) >= 0) {
    if (log) fprintf(log, "%s: scale %lld is %.9g (0x%x), the library's 0x%x\n", c->name, (long long)at,
                     scale[at], f32_to_bits(c->scale.dtype, scale[at]), c->scale.bits[at]);
    bad++;
  }
  if ((at = first_bits_mismatch(&c->zero, zero, ng)) >= 0) {
    if (log) fprintf(log, "%s: zero %lld is %.9g (0x%x), the library's 0x%x\n", c->name, (long long)at, zero[at],
                     f32_to_bits(c->zero.dtype, zero[at]), c->zero.bits[at]);
    bad++;
  }
  /* dequantize what the library stored, so a code difference above is not counted twice */
  float* scale_lib = scale;
  float* zero_lib = zero;
  for (int64_t k = 0; k < ng; k++) {
    scale_lib[k] = bits_to_f32(c->scale.dtype, c->scale.bits[k]);
    zero_lib[k] = bits_to_f32(c->zero.dtype, c->zero.bits[k]);
  }
  packed[kvci_packed_bytes(n, c->nbits)] = 0xA5;
  kvci_pack_codes(c->codes, n, c->nbits, packed);
  kvci_unpack_codes(packed, n, c->nbits, codes);
  if (memcmp(codes, c->codes, (size_t)n) != 0 || packed[kvci_packed_bytes(n, c->nbits)] != 0xA5) {
    if (log) fprintf(log, "%s: packing the codes does not round-trip\n", c->name);
    bad++;
  }
  kvci_dequantize_groups(&spec, codes, scale_lib, zero_lib, ng, lay.group, grouped);
  kvci_quant_scatter(&lay, grouped, back);
  if ((at = first_bits_mismatch(&c->deq, back, n)) >= 0) {
    if (log) fprintf(log, "%s: dequantized %lld is %.9g (0x%x), the library's 0x%x\n", c->name, (long long)at,
                     back[at], f32_to_bits(c->deq.dtype, back[at]), c->deq.bits[at]);
    bad++;
  }
done:
  free(x);
  free(grouped);
  free(back);
  free(codes);
  free(packed);
  free(scale);
  free(zero);
  return bad;
}

static const char* vectors_path = NULL;
static qv_file vectors;
static int vectors_loaded = 0;

static void test_vectors_agree_with_the_libraries(void) {
  REQUIRE(vectors_loaded);
  printf("vectors: %zu cases from %s\n", vectors.ncases, vectors.meta);
  REQUIRE(vectors.ncases >= 100);
  size_t failed = 0, refused = 0, per_quantizer[3] = {0, 0, 0};
  for (size_t i = 0; i < vectors.ncases; i++) {
    const qv_case* c = &vectors.cases[i];
    int bad = case_mismatches(c, TU_LOG);
    failed += bad != 0;
    refused += c->refused >= 0;
    per_quantizer[c->quantizer] += c->refused < 0;
    tu_report(bad == 0, __FILE__, __LINE__, c->name);
  }
  printf("vectors: %zu quanto and %zu hqq cases bit-exact, %zu refusals, %zu failed\n", per_quantizer[1],
         per_quantizer[2], refused, failed);
}

/* The comparison above can fail: change one expected quantity at a time and require a mismatch. */
static void test_a_wrong_expectation_is_caught(void) {
  REQUIRE(vectors_loaded);
  qv_case* c = NULL;
  for (size_t i = 0; i < vectors.ncases && !c; i++)
    if (vectors.cases[i].refused < 0 && vectors.cases[i].in.numel > 1) c = &vectors.cases[i];
  REQUIRE(c != NULL);
  REQUIRE(case_mismatches(c, NULL) == 0);
  uint8_t code = c->codes[1];
  c->codes[1] = (uint8_t)(code == 0 ? 1 : code - 1);
  CHECK(case_mismatches(c, NULL) > 0);
  c->codes[1] = code;
  uint32_t s = c->scale.bits[0];
  c->scale.bits[0] ^= 1u;
  CHECK(case_mismatches(c, NULL) > 0);
  c->scale.bits[0] = s;
  uint32_t z = c->zero.bits[0];
  c->zero.bits[0] ^= 1u;
  CHECK(case_mismatches(c, NULL) > 0);
  c->zero.bits[0] = z;
  uint32_t d = c->deq.bits[c->deq.numel - 1];
  c->deq.bits[c->deq.numel - 1] ^= 1u;
  CHECK(case_mismatches(c, NULL) > 0);
  c->deq.bits[c->deq.numel - 1] = d;
  CHECK(case_mismatches(c, NULL) == 0);
}

/* ------------------------------------------------------------ layouts by hand */

static void test_layouts(void) {
  /* [1, 1, 4, 2] holding 0..7: quanto axis -1, G 2: group d * 2 + j = channel d at positions 2j, 2j + 1 */
  const int64_t shape[4] = {1, 1, 4, 2};
  float x[8], g[8], back[8];
  for (int i = 0; i < 8; i++) x[i] = (float)i;
  kvc_quant_layout l;
  REQUIRE(kvci_quant_layout_init(&l, KVC_QUANTIZER_QUANTO, -1, 2, shape) == 0);
  CHECK_EQ_I64(l.ngroups, 4);
  CHECK_EQ_I64(l.group, 2);
  kvci_quant_gather(&l, x, g);
  const float per_channel[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  CHECK(memcmp(g, per_channel, sizeof g) == 0);
  kvci_quant_scatter(&l, g, back);
  CHECK(memcmp(back, x, sizeof x) == 0);
  /* HQQ axis 0, G 2: reshape(2, -1), group j = {x[j], x[j + 4]} */
  REQUIRE(kvci_quant_layout_init(&l, KVC_QUANTIZER_HQQ, 0, 2, shape) == 0);
  CHECK_EQ_I64(l.ngroups, 4);
  kvci_quant_gather(&l, x, g);
  const float strided[8] = {0, 4, 1, 5, 2, 6, 3, 7};
  CHECK(memcmp(g, strided, sizeof g) == 0);
  /* consecutive layouts are plain copies */
  REQUIRE(kvci_quant_layout_init(&l, KVC_QUANTIZER_HQQ, 1, 4, shape) == 0);
  CHECK_EQ_I64(l.ngroups, 2);
  kvci_quant_gather(&l, x, g);
  CHECK(memcmp(g, x, sizeof x) == 0);
  /* quanto axis 0 over the whole tensor: one scale per element */
  REQUIRE(kvci_quant_layout_init(&l, KVC_QUANTIZER_QUANTO, 0, 8, shape) == 0);
  CHECK_EQ_I64(l.ngroups, 8);
  CHECK_EQ_I64(l.group, 1);
  /* refusals, with transformers' N */
  CHECK(kvci_quant_layout_init(&l, KVC_QUANTIZER_QUANTO, 0, 16, shape) == -1);
  CHECK_EQ_I64(l.axis_numel, 8);
  CHECK(kvci_quant_layout_init(&l, KVC_QUANTIZER_QUANTO, -1, 3, shape) == -1);
  CHECK_EQ_I64(l.axis_numel, 4);
  CHECK(kvci_quant_layout_init(&l, KVC_QUANTIZER_HQQ, 1, 3, shape) == -1);
  CHECK_EQ_I64(l.axis_numel, 8);
  const int64_t empty[4] = {1, 1, 0, 2};
  CHECK(kvci_quant_layout_init(&l, KVC_QUANTIZER_HQQ, 1, 2, empty) == -1);
  CHECK(kvci_quant_layout_init(&l, KVC_QUANTIZER_QUANTO, 0, 2, empty) == -1);
}

/* ------------------------------------------------------------ properties */

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint32_t rng_u32(void) { return tu_xorshift32(&rng_state); }
static float rng_normal(void) {
  double u1 = ((double)rng_u32() + 1.0) / 4294967297.0, u2 = (double)rng_u32() / 4294967296.0;
  return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

static void test_pack_round_trip(void) {
  const int64_t counts[] = {0, 1, 2, 3, 5, 7, 8, 9, 10, 15, 16, 17, 31, 33, 63, 64, 65, 127, 129, 1001};
  uint8_t codes[1001], back[1001], packed[1001 + 8];
  for (int nbits = 1; nbits <= 8; nbits++) {
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++) {
      const int64_t n = counts[ci];
      const size_t bytes = kvci_packed_bytes(n, nbits);
      CHECK_EQ_U64(bytes, (uint64_t)((n * nbits + 7) / 8));
      for (int64_t i = 0; i < n; i++) codes[i] = (uint8_t)(rng_u32() & ((1u << nbits) - 1u));
      memset(packed, 0xA5, sizeof packed);
      kvci_pack_codes(codes, n, nbits, packed);
      int untouched = 1;
      for (size_t i = bytes; i < sizeof packed; i++) untouched &= packed[i] == 0xA5;
      CHECK(untouched);
      memset(back, 0xFF, sizeof back);
      kvci_unpack_codes(packed, n, nbits, back);
      int same = memcmp(back, codes, (size_t)n) == 0, rest = 1;
      for (size_t i = (size_t)n; i < sizeof back; i++) rest &= back[i] == 0xFF;
      if (!tu_report(same && rest, __FILE__, __LINE__, "unpack(pack(codes)) == codes, nothing else written"))
        fprintf(TU_LOG, "    nbits %d, %lld codes\n", nbits, (long long)n);
    }
  }
}

static float eps_of(kvc_dtype dt) {
  return dt == KVC_DTYPE_FLOAT16 ? 0x1p-11f : dt == KVC_DTYPE_BFLOAT16 ? 0x1p-8f : 0x1p-24f;
}

static void fill_normal(float* x, int64_t n, kvc_dtype dt, float scale) {
  for (int64_t i = 0; i < n; i++) x[i] = kvci_round_to(dt, rng_normal() * scale);
}

/* quanto: |x^ - x| <= scale / 2, plus the rounding of the dtype's arithmetic. */
static void test_quanto_error_bound(void) {
  const kvc_dtype dts[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};
  enum { N = 4096 };
  static float x[N], deq[N], scale[N], zero[N];
  static uint8_t codes[N];
  for (int di = 0; di < 3; di++)
    for (int nbits = 2; nbits <= 4; nbits += 2)
      for (int64_t group = 32; group <= 128; group *= 2) {
        const kvc_dtype dt = dts[di];
        const kvc_quantizer_spec spec = {KVC_QUANTIZER_QUANTO, nbits, dt, 0};
        fill_normal(x, N, dt, 3.0f);
        for (int64_t i = 0; i < group; i++) x[i] = x[0]; /* a constant group dequantizes exactly */
        kvci_quantize_groups(&spec, x, N / group, group, codes, scale, zero);
        kvci_dequantize_groups(&spec, codes, scale, zero, N / group, group, deq);
        int ok = 1;
        const float eps = eps_of(dt);
        for (int64_t i = 0; i < N && ok; i++) {
          const int64_t k = i / group;
          float big = fabsf(zero[k]) + fabsf(scale[k]) * (float)((1 << nbits) - 1);
          float bound = scale[k] * (0.5f + (float)(1 << nbits) * eps) + 4.0f * 2.0f * eps * big;
          ok = fabsf(deq[i] - x[i]) <= bound;
          if (!ok)
            fprintf(TU_LOG, "    dtype %d nbits %d group %lld: x %g dequantized %g, scale %g, bound %g\n", (int)dt,
                    nbits, (long long)group, x[i], deq[i], scale[k], bound);
        }
        tu_report(ok, __FILE__, __LINE__, "quanto error <= scale / 2 + rounding");
        CHECK(scale[0] == 0.0f && memcmp(deq, x, (size_t)group * sizeof *x) == 0);
      }
}

/* HQQ's refined zero points do at least as well as plain min/max rounding, on average over calls. */
static void test_hqq_beats_min_max(void) {
  enum { N = 2048, CALLS = 8 };
  static float x[N], deq[N], scale[N], zero[N];
  static uint8_t codes[N];
  const int bits[5] = {1, 2, 3, 4, 8};
  for (int bi = 0; bi < 5; bi++)
    for (int axis = 0; axis <= 1; axis++) {
      const int nbits = bits[bi];
      const int64_t group = 64, ng = N / group;
      const kvc_quantizer_spec spec = {KVC_QUANTIZER_HQQ, nbits, KVC_DTYPE_FLOAT32, axis};
      const float max_code = kvci_quant_max_code(nbits);
      double hqq_err = 0, minmax_err = 0;
      for (int call = 0; call < CALLS; call++) {
        fill_normal(x, N, KVC_DTYPE_FLOAT32, 1.0f);
        REQUIRE(kvci_quantize_groups(&spec, x, ng, group, codes, scale, zero) == 0);
        kvci_dequantize_groups(&spec, codes, scale, zero, ng, group, deq);
        for (int64_t k = 0; k < ng; k++) {
          float lo = x[k * group], hi = lo;
          for (int64_t i = 0; i < group; i++) {
            lo = fminf(lo, x[k * group + i]);
            hi = fmaxf(hi, x[k * group + i]);
          }
          const float s = max_code / (hi - lo), z = -lo * s;
          for (int64_t i = 0; i < group; i++) {
            const float v = x[k * group + i];
            const float q = fminf(fmaxf(kvci_round_half_even(v * s + z), 0.0f), max_code);
            minmax_err += fabs((double)((q - z) / s) - v);
            hqq_err += fabs((double)deq[k * group + i] - v);
          }
        }
      }
      if (!tu_report(hqq_err <= minmax_err, __FILE__, __LINE__, "hqq mean error <= min/max rounding's"))
        fprintf(TU_LOG, "    nbits %d axis %d: hqq %g, min/max %g\n", nbits, axis, hqq_err / (N * CALLS),
                minmax_err / (N * CALLS));
    }
}

/* ------------------------------------------------------------ measurement (--measure) */

static double seconds(void) {
  struct timespec t;
  timespec_get(&t, TIME_UTC);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static void measure(kvc_quantizer q, int axis, int nbits) {
  const int64_t shape[4] = {1, 8, 1024, 128}, n = 8 * 1024 * 128, group = 64;
  float* x = (float*)malloc((size_t)n * sizeof *x);
  float* g = (float*)malloc((size_t)n * sizeof *g);
  float* d = (float*)malloc((size_t)n * sizeof *d);
  uint8_t* codes = (uint8_t*)malloc((size_t)n);
  float* scale = (float*)malloc((size_t)(n / group) * sizeof *scale);
  float* zero = (float*)malloc((size_t)(n / group) * sizeof *zero);
  if (!x || !g || !d || !codes || !scale || !zero) return;
  rng_state = 42;
  fill_normal(x, n, KVC_DTYPE_FLOAT16, 1.0f);
  kvc_quant_layout l;
  kvci_quant_layout_init(&l, q, axis, group, shape);
  const kvc_quantizer_spec spec = {q, nbits, KVC_DTYPE_FLOAT16, axis};
  double t0 = seconds();
  kvci_quant_gather(&l, x, g);
  kvci_quantize_groups(&spec, g, l.ngroups, l.group, codes, scale, zero);
  double t1 = seconds();
  kvci_dequantize_groups(&spec, codes, scale, zero, l.ngroups, l.group, g);
  kvci_quant_scatter(&l, g, d);
  double t2 = seconds();
  double sum_err = 0, sum_abs = 0, max_err = 0, max_abs = 0, sum_rel = 0;
  int64_t rel_n = 0;
  for (int64_t i = 0; i < n; i++) {
    double e = fabs((double)d[i] - x[i]), a = fabs((double)x[i]);
    sum_err += e;
    sum_abs += a;
    if (e > max_err) max_err = e;
    if (a > max_abs) max_abs = a;
    if (a >= 0.1) {
      sum_rel += e / a;
      rel_n++;
    }
  }
  printf("%s %d-bit axis %d group 64, float16 [1, 8, 1024, 128]: mean|err|/mean|x| %.5f, max|err|/max|x| %.5f, "
         "mean |err|/|x| over |x| >= 0.1 %.5f, mean|err| %.5f, max|err| %.5f; quantize %.3f s, dequantize %.3f s\n",
         q == KVC_QUANTIZER_HQQ ? "hqq" : "quanto", nbits, axis, sum_err / sum_abs, max_err / max_abs,
         sum_rel / (double)rel_n, sum_err / (double)n, max_err, t1 - t0, t2 - t1);
  free(x);
  free(g);
  free(d);
  free(codes);
  free(scale);
  free(zero);
}

int main(int argc, char** argv) {
  int measuring = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--measure") == 0)
      measuring = 1;
    else
      vectors_path = argv[i];
  }
  char path[4096];
  if (!vectors_path) vectors_path = tu_vector_path(path, sizeof path, __FILE__, "quant_math.qv");
  vectors_loaded = load_file(vectors_path, &vectors);
  if (!vectors_loaded) fprintf(stderr, "could not read the vectors %s\n", vectors_path);
  TU_RUN(test_vectors_agree_with_the_libraries);
  TU_RUN(test_a_wrong_expectation_is_caught);
  TU_RUN(test_layouts);
  TU_RUN(test_pack_round_trip);
  TU_RUN(test_quanto_error_bound);
  TU_RUN(test_hqq_beats_min_max);
  if (measuring) {
    measure(KVC_QUANTIZER_QUANTO, 0, 4);
    measure(KVC_QUANTIZER_QUANTO, -1, 4);
    measure(KVC_QUANTIZER_HQQ, 1, 4);
    measure(KVC_QUANTIZER_HQQ, 0, 4);
  }
  free_file(&vectors);
  return tu_finish();
}
