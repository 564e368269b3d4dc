/*
 * backends/cpu/quant_fp8.c against torch: tests/conformance/vectors/fp8_e4m3fn.tbl
 * (written by tests/conformance/generate_fp8_table.py with torch 2.15; the
 * format is described there) holds what torch computed:
 *   - the float32 value of all 256 e4m3fn codes (exact bits, NaN included);
 *   - the code torch gives every one of the 2^32 float32 bit patterns,
 *     run-length encoded: checked here exhaustively, pattern by pattern;
 *   - transformers' scale calibration, (x / scale).to(e4m3fn) and
 *     (code.float() * scale).to(dtype) on samples, in every cache dtype.
 * Then a few facts, written out (ties, saturation, NaN, clamp).
 *
 * Usage: test_internal_quant_fp8 [TABLE] (defaults to the file next to this source's tests/conformance/vectors).
 */
#include <float.h>
#include <math.h>

#include "half.h"
#include "cpu/quant_fp8.h"
#include "test_util.h"

typedef struct fp8_table {
  char* text;
  uint32_t decode[256];
  uint32_t* run_start;
  uint8_t* run_code;
  size_t nruns;
  char** scale;   /* the lines of each sample section, tokens split by the reader */
  size_t nscale;
  char** quant;
  size_t nquant;
  char** dequant;
  size_t ndequant;
  int loaded;
} fp8_table;

static fp8_table table;

static char* next_token(char** at) {
  char* p = *at;
  while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t') p++;
  if (!*p) return NULL;
  char* start = p;
  while (*p && *p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') p++;
  if (*p) *p++ = '\0';
  *at = p;
  return start;
}

static int hex_u32(char** at, uint32_t* v) {
  char* t = next_token(at);
  if (!t) return 0;
  char* end = NULL;
  unsigned long x = strtoul(t, &end, 16);
  if (*end || x > 0xfffffffful) return 0;
  *v = (uint32_t)x;
  return 1;
}

static int dtype_of(const char* s, kvc_dtype* dt) {
  if (strcmp(s, "f32") == 0)
    *dt = KVC_DTYPE_FLOAT32;
  else if (strcmp(s, "f16") == 0)
    *dt = KVC_DTYPE_FLOAT16;
  else if (strcmp(s, "bf16") == 0)
    *dt = KVC_DTYPE_BFLOAT16;
  else
    return 0;
  return 1;
}

/* A sample section: `NAME N` then N lines; keeps a pointer to each line's first token (lines stay intact). */
static int read_section(char** at, const char* name, char*** lines, size_t* n) {
  char* t = next_token(at);
  uint32_t count = 0;
  if (!t || strcmp(t, name) != 0) return 0;
  char* c = next_token(at);
  if (!c) return 0;
  count = (uint32_t)strtoul(c, NULL, 10);
  *lines = calloc(count ? count : 1, sizeof(char*));
  if (!*lines) return 0;
  char* p = *at;
  while (*p == '\n' || *p == '\r') p++;
  for (uint32_t i = 0; i < count; i++) {
    if (!*p) return 0;
    (*lines)[i] = p;
    char* nl = strchr(p, '\n');
    if (!nl) return 0;
    *nl = '\0';
    p = nl + 1;
  }
  *at = p;
  *n = count;
  return 1;
}

static int load_table(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  fseek(f, 0, SEEK_SET);
  table.text = malloc((size_t)len + 1);
  if (!table.text || fread(table.text, 1, (size_t)len, f) != (size_t)len) {
    fclose(f);
    return 0;
  }
  fclose(f);
  table.text[len] = '\0';
  char* at = table.text;
  char* t = next_token(&at);
  char* v = next_token(&at);
  if (!t || !v || strcmp(t, "KVFP8") != 0 || strcmp(v, "1") != 0) return 0;
  t = next_token(&at);
  if (!t || strcmp(t, "meta") != 0) return 0;
  char* nl = strchr(at, '\n');
  if (!nl) return 0;
  printf("table: %.*s\n", (int)(nl - at), at);
  at = nl + 1;
  t = next_token(&at);
  v = next_token(&at);
  if (!t || !v || strcmp(t, "decode") != 0 || strcmp(v, "256") != 0) return 0;
  for (int i = 0; i < 256; i++) {
    uint32_t code, bits;
    if (!hex_u32(&at, &code) || !hex_u32(&at, &bits) || code != (uint32_t)i) return 0;
    table.decode[i] = bits;
  }
  t = next_token(&at);
  v = next_token(&at);
  if (!t || !v || strcmp(t, "encode") != 0) return 0;
  table.nruns = (size_t)strtoul(v, NULL, 10);
  table.run_start = malloc(table.nruns * sizeof(uint32_t));
  table.run_code = malloc(table.nruns);
  if (!table.nruns || !table.run_start || !table.run_code) return 0;
  for (size_t i = 0; i < table.nruns; i++) {
    uint32_t s, c;
    if (!hex_u32(&at, &s) || !hex_u32(&at, &c) || c > 255) return 0;
    if ((i == 0 && s != 0) || (i > 0 && s <= table.run_start[i - 1])) return 0;
    table.run_start[i] = s;
    table.run_code[i] = (uint8_t)c;
  }
  return read_section(&at, "scale", &table.scale, &table.nscale) &&
         read_section(&at, "quant", &table.quant, &table.nquant) &&
         read_section(&at, "dequant", &table.dequant, &table.ndequant);
}

static void test_table_loaded(void) {
  REQUIRE(table.loaded);
  CHECK(table.nscale > 0 && table.nquant > 0 && table.ndequant > 0);
}

static void test_decode_all_256(void) {
  REQUIRE(table.loaded);
  int bad = 0;
  for (int c = 0; c < 256; c++) {
    uint32_t got = kvci_f32_bits(kvci_fp8_e4m3fn_to_f32((uint8_t)c));
    if (got != table.decode[c] && bad++ < 10)
      fprintf(stderr, "  decode 0x%02x: got 0x%08x, torch 0x%08x\n", c, (unsigned)got, (unsigned)table.decode[c]);
  }
  tu_report(bad == 0, __FILE__, __LINE__, "all 256 e4m3fn codes decode to torch's float32 bits");
}

/* Every float32 bit pattern, against the run-length encoded table of torch's codes. Instrumented builds
   check every pattern within 64 of a run's edges (where rounding changes code) and every 251st in between. */
static void test_encode_every_float32(void) {
  REQUIRE(table.loaded);
  uint64_t bad = 0;
  for (size_t r = 0; r < table.nruns; r++) {
    uint64_t lo = table.run_start[r], hi = r + 1 < table.nruns ? table.run_start[r + 1] : (uint64_t)1 << 32;
    uint8_t want = table.run_code[r];
    for (uint64_t u = lo; u < hi; u += (!TU_INSTRUMENTED || u - lo < 64 || hi - u <= 64 + 251) ? 1 : 251) {
      uint8_t got = kvci_fp8_e4m3fn_from_f32(kvci_f32_from_bits((uint32_t)u));
      if (got != want && bad++ < 10)
        fprintf(stderr, "  encode 0x%08x: got 0x%02x, torch 0x%02x\n", (unsigned)u, got, want);
    }
  }
  if (bad) fprintf(stderr, "  %llu float32 patterns encode differently\n", (unsigned long long)bad);
  tu_report(bad == 0, __FILE__, __LINE__,
            TU_INSTRUMENTED ? "float32 patterns (edges and a sample) encode to torch's e4m3fn codes"
                            : "all 2^32 float32 patterns encode to torch's e4m3fn codes");
}

static float load_bits(kvc_dtype dt, uint32_t bits) {
  if (dt == KVC_DTYPE_FLOAT16) return kvci_f16_to_f32((uint16_t)bits);
  if (dt == KVC_DTYPE_BFLOAT16) return kvci_bf16_to_f32((uint16_t)bits);
  return kvci_f32_from_bits(bits);
}

/* One sample row of the table: its dtype (name: its name, for messages) and
 * then n hex words; 0 when the row does not read so. */
typedef struct sample {
  char name[16];
  kvc_dtype dt;
  uint32_t v[3];
} sample;

static int read_sample(const char* row, int n, sample* out) {
  char line[128];
  snprintf(line, sizeof line, "%s", row);
  char* at = line;
  char* d = next_token(&at);
  if (!d || !dtype_of(d, &out->dt)) return 0;
  snprintf(out->name, sizeof out->name, "%s", d);
  for (int i = 0; i < n; i++)
    if (!hex_u32(&at, &out->v[i])) return 0;
  return 1;
}

static void test_scale_samples(void) {
  REQUIRE(table.loaded);
  int bad = 0;
  for (size_t i = 0; i < table.nscale; i++) {
    sample r;
    REQUIRE(read_sample(table.scale[i], 2, &r));
    const kvc_dtype dt = r.dt;
    const char* d = r.name;
    uint32_t x = r.v[0], want = r.v[1];
    uint16_t h = (uint16_t)x;
    const void* data = dt == KVC_DTYPE_FLOAT32 ? (const void*)&x : (const void*)&h;
    uint32_t got = kvci_f32_bits(kvci_fp8_calibrate(dt, data, 1));
    float wf = kvci_f32_from_bits(want);
    int same = got == want || (wf != wf && isnan(kvci_f32_from_bits(got))); /* a NaN's payload is not specified */
    if (!same && bad++ < 10)
      fprintf(stderr, "  scale %s 0x%x: got 0x%08x, torch 0x%08x\n", d, (unsigned)x, (unsigned)got, (unsigned)want);
  }
  printf("  %zu scale samples\n", table.nscale);
  tu_report(bad == 0, __FILE__, __LINE__, "scale = (amax / 448).clamp(min=tiny) as torch computes it");
}

static void test_quantize_samples(void) {
  REQUIRE(table.loaded);
  int bad = 0, nan_sign_free = 0;
  for (size_t i = 0; i < table.nquant; i++) {
    sample r;
    REQUIRE(read_sample(table.quant[i], 3, &r));
    const kvc_dtype dt = r.dt;
    const char* d = r.name;
    uint32_t x = r.v[0], scale = r.v[1], want = r.v[2];
    uint16_t h = (uint16_t)x;
    const void* data = dt == KVC_DTYPE_FLOAT32 ? (const void*)&x : (const void*)&h;
    uint8_t got = 0;
    kvci_fp8_quantize(dt, data, 1, kvci_f32_from_bits(scale), &got);
    int nan_code = (got & 0x7f) == 0x7f && (want & 0x7f) == 0x7f;
    if (dt != KVC_DTYPE_FLOAT32 && isnan(load_bits(dt, x)) && nan_code) {
      /* a float16/bfloat16 NaN loses its sign in torch's scalar .float() (0x7fffffff), not in its vectorized one */
      nan_sign_free++;
      continue;
    }
    if (got != want && bad++ < 10)
      fprintf(stderr, "  quantize %s 0x%x / 0x%08x: got 0x%02x, torch 0x%02x\n", d, (unsigned)x, (unsigned)scale, got,
              (unsigned)want);
  }
  printf("  %zu quantization samples (%d float16/bfloat16 NaN inputs: checked as NaN only)\n", table.nquant,
         nan_sign_free);
  tu_report(bad == 0, __FILE__, __LINE__, "(x.float() / scale).to(e4m3fn) as torch computes it");
}

static void test_dequantize_samples(void) {
  REQUIRE(table.loaded);
  int bad = 0, nan_skipped = 0;
  for (size_t i = 0; i < table.ndequant; i++) {
    sample r;
    REQUIRE(read_sample(table.dequant[i], 3, &r));
    const kvc_dtype dt = r.dt;
    const char* d = r.name;
    uint32_t code = r.v[0], scale = r.v[1], want = r.v[2];
    uint8_t c = (uint8_t)code;
    uint32_t got = 0;
    uint16_t got16 = 0;
    kvci_fp8_dequantize(&c, 1, kvci_f32_from_bits(scale), dt, dt == KVC_DTYPE_FLOAT32 ? (void*)&got : (void*)&got16);
    if (dt != KVC_DTYPE_FLOAT32) got = got16;
    if (isnan(load_bits(dt, want))) {
      /* torch's NaN bits after a cast to float16/bfloat16 depend on its kernel (scalar or vectorized) */
      nan_skipped++;
      if (!isnan(load_bits(dt, got)) && bad++ < 10) fprintf(stderr, "  dequantize NaN code 0x%02x: not NaN\n", c);
      continue;
    }
    if (got != want && bad++ < 10)
      fprintf(stderr, "  dequantize %s 0x%02x * 0x%08x: got 0x%x, torch 0x%x\n", d, c, (unsigned)scale,
              (unsigned)got, (unsigned)want);
  }
  printf("  %zu dequantization samples (%d NaN: checked as NaN only)\n", table.ndequant, nan_skipped);
  tu_report(bad == 0, __FILE__, __LINE__, "(code.float() * scale).to(dtype) as torch computes it");
}

/* Facts of e4m3fn and transformers' formula, written out (the table above is the authority). */
static void test_known_points(void) {
  CHECK(kvci_fp8_e4m3fn_from_f32(448.0f) == 0x7e);
  CHECK(kvci_fp8_e4m3fn_from_f32(464.0f) == 0x7e); /* the tie between 448 and 480 goes to the even 448 */
  CHECK(kvci_fp8_e4m3fn_from_f32(nextafterf(464.0f, 1000.0f)) == 0x7e); /* saturation, not NaN */
  CHECK(kvci_fp8_e4m3fn_from_f32(-1000.0f) == 0xfe);
  CHECK(kvci_fp8_e4m3fn_from_f32(INFINITY) == 0x7e);
  CHECK(kvci_fp8_e4m3fn_from_f32(-NAN) == 0xff);
  CHECK(kvci_fp8_e4m3fn_from_f32(1.0f / 1024.0f) == 0x00);          /* half the smallest subnormal: tie to 0 */
  CHECK(kvci_fp8_e4m3fn_from_f32(3.0f / 1024.0f) == 0x02);          /* 1.5 steps: tie to even 2 */
  CHECK(kvci_fp8_e4m3fn_from_f32(-0.0f) == 0x80);
  CHECK(kvci_fp8_e4m3fn_to_f32(0x01) == 1.0f / 512.0f);
  CHECK(kvci_fp8_e4m3fn_to_f32(0x08) == 1.0f / 64.0f);
  CHECK(kvci_fp8_scale(0.0f) == FLT_MIN);
  CHECK(kvci_fp8_scale(448.0f) == 1.0f);
  CHECK(isnan(kvci_fp8_scale(NAN)));
  const uint16_t half[3] = {0x3c00, 0xdc00, 0x0001}; /* 1, -256, the smallest subnormal */
  CHECK(kvci_fp8_amax(KVC_DTYPE_FLOAT16, half, 3) == 256.0f);
  CHECK(kvci_fp8_amax(KVC_DTYPE_FLOAT32, NULL, 0) == 0.0f);
}

int main(int argc, char** argv) {
  char path[4096];
  const char* table_path = argc > 1 ? argv[1] : NULL;
  if (!table_path) table_path = tu_vector_path(path, sizeof path, __FILE__, "fp8_e4m3fn.tbl");
  table.loaded = load_table(table_path);
  if (!table.loaded) fprintf(stderr, "could not read the table %s\n", table_path);
  TU_RUN(test_table_loaded);
  TU_RUN(test_decode_all_256);
  TU_RUN(test_encode_every_float32);
  TU_RUN(test_scale_samples);
  TU_RUN(test_quantize_samples);
  TU_RUN(test_dequantize_samples);
  TU_RUN(test_known_points);
  free(table.text);
  free(table.run_start);
  free(table.run_code);
  free(table.scale);
  free(table.quant);
  free(table.dequant);
  return tu_finish();
}
