/*
 * bench_common.h: what every kvcache benchmark shares: a monotonic clock,
 * robust statistics (median, min, max), a fixed-seed data generator,
 * argument parsing and the results.json writer.
 *
 * results.json is a JSON array with one object per line:
 *   {"bench": B, "impl": I, "metric": M, "value": V, "unit": U}
 * Writers append; rows of the same (bench, impl) pair written earlier are
 * replaced, so re-running one benchmark refreshes its own rows and keeps
 * everyone else's (the Python benchmark follows the same rule).
 */
#ifndef KVC_BENCH_COMMON_H
#define KVC_BENCH_COMMON_H

#if !defined(_POSIX_C_SOURCE) || _POSIX_C_SOURCE < 200809L
#undef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L
#endif

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "kvcache.h"

#define BENCH_DEFAULT_JSON "build/bench/results.json"
#define BENCH_MAX_ROWS 256

static inline double bench_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Stops the benchmark on any library error: timing a failing call would
 * report the speed of the error path. */
/* This thread's CPU time: unlike the wall clock, not inflated when other processes take the core. */
static inline double bench_thread_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static inline void bench_check(kvc_error* err, const char* what) {
  if (err == NULL) return;
  fprintf(stderr, "bench: %s failed: %s (%s)\n", what, kvc_error_message(err),
          kvc_code_name(kvc_error_code(err)));
  kvc_error_destroy(err);
  exit(1);
}

static inline void* bench_alloc(size_t bytes) {
  void* p = malloc(bytes ? bytes : 1);
  if (p == NULL) {
    fprintf(stderr, "bench: cannot allocate %zu bytes\n", bytes);
    exit(1);
  }
  return p;
}

/* ------------------------------------------------------------ statistics */

typedef struct bench_stats {
  double median, min, max;
} bench_stats;

static inline int bench_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Sorts `v` in place. */
static inline bench_stats bench_summarize(double* v, size_t n) {
  bench_stats s = {0, 0, 0};
  if (n == 0) return s;
  qsort(v, n, sizeof *v, bench_cmp_double);
  s.min = v[0];
  s.max = v[n - 1];
  s.median = (n % 2) ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  return s;
}

/* ----------------------------------------------------------------- data */

/* xorshift64*: fixed seed, so every run moves the same bytes. */
static inline uint64_t bench_rand(uint64_t* state) {
  uint64_t x = *state;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * UINT64_C(2685821657736338717);
}

/* Fills with bfloat16 values of modest magnitude (sign, exponent around 1,
 * random mantissa), like real keys and values rather than NaN patterns. */
static inline void bench_fill_bf16(uint16_t* dst, size_t count, uint64_t seed) {
  uint64_t st = seed * UINT64_C(0x9E3779B97F4A7C15) + 1;
  size_t i = 0;
  while (i < count) {
    uint64_t r = bench_rand(&st);
    for (int k = 0; k < 4 && i < count; k++, i++) {
      uint16_t bits = (uint16_t)(r >> (16 * k));
      dst[i] = (uint16_t)((bits & 0x807F) | 0x3F00); /* |x| in [0.5, 1) */
    }
  }
}

static inline kvc_tensor bench_tensor_bf16(void* data, int64_t* shape) {
  kvc_tensor t;
  memset(&t, 0, sizeof t);
  t.data = data;
  t.device.device_type = KVC_DEVICE_CPU;
  t.device.device_id = 0;
  t.ndim = 4;
  t.dtype = kvc_dtype_to_data_type(KVC_DTYPE_BFLOAT16);
  t.shape = shape;
  t.strides = NULL;
  t.byte_offset = 0;
  return t;
}

/* Stride of `dim` in elements; views may leave strides NULL (compact). */
static inline int64_t bench_stride(const kvc_tensor* t, int dim) {
  if (t->strides) return t->strides[dim];
  int64_t s = 1;
  for (int i = t->ndim - 1; i > dim; i--) s *= t->shape[i];
  return s;
}

/* "1k" for 1024, "32k" for 32768, else the number. */
static inline void bench_length_label(int64_t n, char* out, size_t size) {
  if (n % 1024 == 0)
    snprintf(out, size, "%lldk", (long long)(n / 1024));
  else
    snprintf(out, size, "%lld", (long long)n);
}

/* ------------------------------------------------------------ arguments */

typedef struct bench_args {
  const char* json_path;
  int reps;       /* 0 = the benchmark's default */
  int steps;
  int64_t context; /* 0 = the benchmark's default */
} bench_args;

static inline void bench_usage(FILE* to, const char* prog) {
  fprintf(to,
          "usage: %s [--json PATH] [--reps N] [--steps N] [--context TOKENS]\n"
          "  --json PATH      results file (default " BENCH_DEFAULT_JSON ")\n"
          "  --reps N         repetitions per measurement, median reported\n"
          "                   (default: the benchmark's, at least 15)\n"
          "  --steps N        decode steps per repetition (default 32)\n"
          "  --context TOKENS only this context length (default: the benchmark's set)\n",
          prog);
}

static inline bench_args bench_parse_args(int argc, char** argv) {
  bench_args a = {BENCH_DEFAULT_JSON, 0, 32, 0};
  for (int i = 1; i < argc; i++) {
    const char* v = (i + 1 < argc) ? argv[i + 1] : NULL;
    if (strcmp(argv[i], "--json") == 0 && v) {
      a.json_path = v;
      i++;
    } else if (strcmp(argv[i], "--reps") == 0 && v) {
      a.reps = atoi(v);
      i++;
    } else if (strcmp(argv[i], "--steps") == 0 && v) {
      a.steps = atoi(v);
      i++;
    } else if (strcmp(argv[i], "--context") == 0 && v) {
      a.context = atoll(v);
      i++;
    } else {
      int help = strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0;
      bench_usage(help ? stdout : stderr, argv[0]);
      exit(help ? 0 : 2);
    }
  }
  if (a.reps < 0 || a.steps < 1 || a.context < 0) {
    bench_usage(stderr, argv[0]);
    exit(2);
  }
  return a;
}

/* ---------------------------------------------------------- results.json */

typedef struct bench_row {
  char bench[48], impl[24], metric[64], unit[16];
  double value;
} bench_row;

typedef struct bench_results {
  bench_row rows[BENCH_MAX_ROWS];
  size_t count;
} bench_results;

static inline void bench_add(bench_results* r, const char* bench, const char* impl, const char* metric,
                             double value, const char* unit) {
  if (r->count == BENCH_MAX_ROWS) {
    fprintf(stderr, "bench: too many result rows\n");
    exit(1);
  }
  bench_row* row = &r->rows[r->count++];
  snprintf(row->bench, sizeof row->bench, "%s", bench);
  snprintf(row->impl, sizeof row->impl, "%s", impl);
  snprintf(row->metric, sizeof row->metric, "%s", metric);
  snprintf(row->unit, sizeof row->unit, "%s", unit);
  row->value = value;
}

/* mkdir -p of the directory part of `path`. */
static inline int bench_make_parent_dirs(const char* path) {
  char buf[1024];
  if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return -1;
  for (char* p = buf + 1; *p; p++) {
    if (*p != '/') continue;
    *p = '\0';
    if (mkdir(buf, 0777) != 0 && errno != EEXIST) return -1;
    *p = '/';
  }
  return 0;
}

static inline void bench_row_key(const bench_row* row, char* out, size_t size) {
  snprintf(out, size, "{\"bench\": \"%s\", \"impl\": \"%s\",", row->bench, row->impl);
}

/* Keeps an earlier line unless one of our rows has the same (bench, impl). */
static inline int bench_keep_line(const char* line, const bench_results* r) {
  if (line[0] != '{') return 0;
  for (size_t i = 0; i < r->count; i++) {
    char key[128];
    bench_row_key(&r->rows[i], key, sizeof key);
    if (strncmp(line, key, strlen(key)) == 0) return 0;
  }
  return 1;
}

static inline void bench_write_json(const char* path, const bench_results* r) {
  if (bench_make_parent_dirs(path) != 0) {
    fprintf(stderr, "bench: cannot create the directory of %s\n", path);
    exit(1);
  }
  /* Earlier rows, one object per line, without their trailing commas. */
  char** kept = NULL;
  size_t nkept = 0;
  FILE* in = fopen(path, "r");
  if (in) {
    char line[1024];
    while (fgets(line, sizeof line, in)) {
      size_t len = strcspn(line, "\r\n");
      line[len] = '\0';
      while (len > 0 && (line[len - 1] == ',' || line[len - 1] == ' ')) line[--len] = '\0';
      if (!bench_keep_line(line, r)) continue;
      char** grown = realloc(kept, (nkept + 1) * sizeof *kept);
      if (!grown) exit(1);
      kept = grown;
      kept[nkept] = bench_alloc(len + 1);
      memcpy(kept[nkept++], line, len + 1);
    }
    fclose(in);
  }
  FILE* out = fopen(path, "w");
  if (!out) {
    fprintf(stderr, "bench: cannot write %s: %s\n", path, strerror(errno));
    exit(1);
  }
  size_t total = nkept + r->count, k = 0;
  fputs("[\n", out);
  for (size_t i = 0; i < nkept; i++, k++) {
    fprintf(out, "%s%s\n", kept[i], k + 1 < total ? "," : "");
    free(kept[i]);
  }
  free(kept);
  for (size_t i = 0; i < r->count; i++, k++) {
    const bench_row* row = &r->rows[i];
    char key[128];
    bench_row_key(row, key, sizeof key);
    fprintf(out, "%s \"metric\": \"%s\", \"value\": %.10g, \"unit\": \"%s\"}%s\n", key, row->metric,
            row->value, row->unit, k + 1 < total ? "," : "");
  }
  fputs("]\n", out);
  fclose(out);
  printf("results: %zu rows written to %s\n", r->count, path);
}

#endif /* KVC_BENCH_COMMON_H */
