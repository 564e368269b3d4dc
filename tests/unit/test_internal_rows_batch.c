/*
 * tests/unit/test_internal_rows_batch.c: the CPU backend's copy_rows_batch
 * (backend API 6, the primitive under the pool's step write) against a
 * plain element-by-element copy, and against copy_rows called per job (what
 * the core does on a backend without the entry).
 *
 * Cases (unit/rows_batch_cases.h) are step writes into pool storage: NHD
 * and HND layouts, element sizes 1, 2, 4 and 8, odd head_dims, sources with
 * any dimension order, padding or a reversed token axis, slots in random
 * order, jobs sharing index arrays or not, jobs that copy nothing. Every
 * byte of every buffer is compared, so bytes the copy must not touch are
 * checked too.
 */
#include "internal.h"
#include "rows_batch_cases.h"
#include "test_util.h"

static const kvc_backend* cpu;
static const kvc_exec place = {0, NULL, NULL};

/* The case's buffers three times over, with the same random bytes: for the batch, the reference, per-job copy_rows. */
typedef struct copies {
  unsigned char** buf[3];
  unsigned char* original; /* buffer bytes before, concatenated */
  size_t total;
} copies;

static int copies_make(copies* k, const rbc_case* c) {
  memset(k, 0, sizeof *k);
  for (int32_t b = 0; b < c->nbufs; b++) k->total += c->buf_bytes[b];
  k->original = (unsigned char*)malloc(k->total ? k->total : 1);
  if (!k->original) return 0;
  for (size_t i = 0; i < k->total; i++) k->original[i] = (unsigned char)(rbc_next() >> 56);
  for (int v = 0; v < 3; v++) {
    k->buf[v] = (unsigned char**)calloc((size_t)c->nbufs + 1, sizeof(unsigned char*));
    if (!k->buf[v]) return 0;
    size_t at = 0;
    for (int32_t b = 0; b < c->nbufs; b++) {
      k->buf[v][b] = (unsigned char*)malloc(c->buf_bytes[b]);
      if (!k->buf[v][b]) return 0;
      memcpy(k->buf[v][b], k->original + at, c->buf_bytes[b]);
      at += c->buf_bytes[b];
    }
  }
  return 1;
}

static void copies_free(copies* k, const rbc_case* c) {
  for (int v = 0; v < 3; v++) {
    for (int32_t b = 0; k->buf[v] && b < c->nbufs; b++) free(k->buf[v][b]);
    free(k->buf[v]);
  }
  free(k->original);
  memset(k, 0, sizeof *k);
}

/* Buffer b of copy v equals buffer b of copy 1 (the reference), every byte; reports the first difference. */
static int same_as_reference(const copies* k, const rbc_case* c, int v, const char* what) {
  for (int32_t b = 0; b < c->nbufs; b++) {
    if (!memcmp(k->buf[v][b], k->buf[1][b], c->buf_bytes[b])) continue;
    size_t at = 0;
    while (k->buf[v][b][at] == k->buf[1][b][at]) at++;
    fprintf(TU_LOG, "%s: buffer %d of %d (%zu bytes) differs at byte %zu: 0x%02x, reference 0x%02x (elem %zu, %s, %lld tokens)\n",
            what, (int)b, (int)c->nbufs, c->buf_bytes[b], at, k->buf[v][b][at], k->buf[1][b][at], c->elem,
            c->hnd ? "HND" : "NHD", (long long)c->tokens);
    return 0;
  }
  return 1;
}

/* Bytes the reference changed: the case must write something when it has rows (else the test could not fail). */
static size_t changed_bytes(const copies* k, const rbc_case* c) {
  size_t n = 0, at = 0;
  for (int32_t b = 0; b < c->nbufs; b++) {
    for (size_t i = 0; i < c->buf_bytes[b]; i++) n += k->buf[1][b][i] != k->original[at + i];
    at += c->buf_bytes[b];
  }
  return n;
}

/* One case through the batch, the reference and per-job copy_rows; returns the bytes it changed. */
static size_t run_case(const rbc_shape* shape) {
  rbc_case c;
  copies k;
  memset(&k, 0, sizeof k);
  size_t changed = 0;
  kvc_copy_rows_job* jobs[3] = {NULL, NULL, NULL};
  int ok = CHECK(rbc_make(&c, shape)) && CHECK(copies_make(&k, &c));
  for (int v = 0; ok && v < 3; v++) {
    jobs[v] = (kvc_copy_rows_job*)calloc((size_t)c.njobs, sizeof(kvc_copy_rows_job));
    ok = CHECK(jobs[v] != NULL);
    if (ok) rbc_bind(&c, k.buf[v], jobs[v]);
  }
  if (ok) {
    CHECK_EQ_I64(cpu->copy_rows_batch(cpu->ctx, &place, jobs[0], c.njobs), 0);
    rbc_reference(jobs[1], c.njobs);
    for (int32_t i = 0; i < c.njobs; i++) {
      const kvc_copy_rows_job* j = &jobs[2][i];
      CHECK_EQ_I64(cpu->copy_rows(cpu->ctx, &place, j->dst, j->dst_strides, j->dst_rows, j->src, j->src_strides,
                                  j->src_rows, j->count, j->row_shape, j->elem_size),
                   0);
    }
    CHECK(same_as_reference(&k, &c, 0, "copy_rows_batch against the reference"));
    CHECK(same_as_reference(&k, &c, 2, "copy_rows per job against the reference"));
    changed = changed_bytes(&k, &c);
  }
  for (int v = 0; v < 3; v++) free(jobs[v]);
  copies_free(&k, &c);
  rbc_free(&c);
  return changed;
}

static void test_table(void) {
  CHECK(cpu->api_version >= 6); /* copy_rows_batch came with version 6 */
  CHECK(cpu->struct_size >= sizeof(kvc_backend));
  CHECK(cpu->copy_rows_batch != NULL);
}

/* Small random steps: every element size, both layouts, 1 to 4 groups. */
static void test_random_steps(void) {
  static const size_t elems[4] = {1, 2, 4, 8};
  size_t changed = 0;
  for (int it = 0; it < 400; it++) {
    rbc_shape s = {(int32_t)rbc_range(1, 6), 0, 40, 4, 40, 4, elems[it % 4]};
    changed += run_case(&s);
  }
  CHECK(changed > 0);
}

/* One step of a large model: 2 x 80 layers, thousands of tokens (small heads, so the buffers stay small). */
static void test_many_jobs_and_rows(void) {
  rbc_shape s = {80, 1000, 4000, 2, 9, 2, 2};
  size_t changed = 0;
  for (int it = 0; it < 3; it++) changed += run_case(&s);
  CHECK(changed > 0);
}

/* No jobs, and jobs that copy nothing (count 0 with NULL arrays and pointers, empty rows): nothing happens. */
static void test_nothing_to_copy(void) {
  CHECK_EQ_I64(cpu->copy_rows_batch(cpu->ctx, &place, NULL, 0), 0);
  unsigned char buf[16];
  memset(buf, 7, sizeof buf);
  const int64_t rows[1] = {0};
  kvc_copy_rows_job j[2];
  memset(j, 0, sizeof j);
  j[0].row_shape[0] = j[0].row_shape[1] = j[0].row_shape[2] = j[0].row_shape[3] = 1;
  j[0].elem_size = 2; /* count 0, NULL everything */
  j[1] = j[0];
  j[1].dst = buf;
  j[1].src = buf + 8;
  j[1].dst_rows = j[1].src_rows = rows;
  j[1].count = 1;
  j[1].row_shape[3] = 0;
  CHECK_EQ_I64(cpu->copy_rows_batch(cpu->ctx, &place, j, 2), 0);
  int untouched = 1;
  for (size_t i = 0; i < sizeof buf; i++) untouched &= buf[i] == 7;
  CHECK(untouched);
}

int main(void) {
  cpu = kvci_cpu_backend();
  TU_RUN(test_table);
  TU_RUN(test_nothing_to_copy);
  TU_RUN(test_random_steps);
  TU_RUN(test_many_jobs_and_rows);
  return tu_finish();
}
