/*
 * tests/unit/gpu_plan/test_gpu_plan_alignment.c: every plan the GPU backend
 * makes is aligned by construction, over base offsets 0..15 bytes, odd
 * sizes and every element size (1, 2, 4, 8, 16), for each operation: a
 * copy, a fill, copy_4d's overlapping routes (the move kernel, scratch),
 * copy_rows with odd batch-row strides, batches, copy_rows_batch (pool step
 * writes in NHD and HND storage) and contiguous zeroing.
 *
 * For each: the plan passes the checker (kvc_gpu_check_*, which forms each
 * address the kernel would), and the kernel's walk (gpu_plan_walk.h) run on
 * the CPU, each barrier-free phase in reverse order since a GPU's threads
 * keep none, gives the element-by-element reference result and writes each
 * destination byte once. The old copy_rows plan (one row alone) must fail
 * the checker on some of these layouts: the test sees the H200's fault.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../rows_batch_cases.h"
#include "gpu_plan.h"
#include "gpu_plan_walk.h"
#include "plan_test_util.h"

static const int64_t elem_sizes[] = {1, 2, 4, 8, 16};
#define NELEM (sizeof elem_sizes / sizeof *elem_sizes)

/* ---- the CPU interpretation of a kernel walk ------------------------------ */

typedef struct visit {
  char* dst;
  const char* src;
  int32_t unit;
} visit;

/* Visits of the current phase (since the last barrier), applied in reverse; writes counted per arena byte. */
typedef struct interp {
  visit* v;
  size_t n, cap;
  char* arena;
  size_t arena_bytes;
  unsigned char* hits;
} interp;

static void flush(interp* x) {
  for (size_t i = x->n; i-- > 0;) {
    const visit* v = &x->v[i];
    if (v->src)
      memcpy(v->dst, v->src, (size_t)v->unit);
    else
      memset(v->dst, 0, (size_t)v->unit);
    uintptr_t at = (uintptr_t)v->dst, lo = (uintptr_t)x->arena;
    if (at >= lo && at < lo + x->arena_bytes)
      for (int32_t k = 0; k < v->unit; k++) x->hits[at - lo + (uintptr_t)k]++;
  }
  x->n = 0;
}

static void interp_visit(void* ctx, char* dst, const char* src, int32_t unit) {
  interp* x = (interp*)ctx;
  if (unit == 0) {
    flush(x);
    return;
  }
  if (x->n == x->cap) {
    x->cap = x->cap ? 2 * x->cap : 1024;
    x->v = (visit*)realloc(x->v, x->cap * sizeof *x->v);
  }
  x->v[x->n++] = (visit){dst, src, unit};
}

static interp interp_on(char* arena, size_t bytes) {
  interp x = {NULL, 0, 0, arena, bytes, (unsigned char*)calloc(bytes, 1)};
  return x;
}

static void interp_done(interp* x) {
  flush(x);
  free(x->v);
  free(x->hits);
}

/* ---- layouts, arenas and the reference --------------------------------------- */

static int64_t offset_of(const int64_t st[4], const int64_t i[4], int64_t elem) {
  return (i[0] * st[0] + i[1] * st[1] + i[2] * st[2] + i[3] * st[3]) * elem;
}

/* Calls f(i) for every index of shape, in order. */
#define FOR_EACH_INDEX(shape, i)                      \
  for (i[0] = 0; i[0] < shape[0]; i[0]++)             \
    for (i[1] = 0; i[1] < shape[1]; i[1]++)           \
      for (i[2] = 0; i[2] < shape[2]; i[2]++)         \
        for (i[3] = 0; i[3] < shape[3]; i[3]++)

/* Element strides of a [b, h, cap, d] store: cap >= s, an odd pad per head, sometimes the last dim strided. */
static void random_strides(int64_t st[4], const int64_t shape[4]) {
  int64_t cap = shape[2] + rand_in(0, 3);
  int64_t pad = rand_in(0, 3); /* elements between heads: odd strides */
  if (next_rand() % 5 == 0) {  /* [b, h, d, cap] in memory */
    st[2] = 1;
    st[3] = cap;
    st[1] = cap * shape[3] + pad;
  } else {
    st[3] = 1;
    st[2] = shape[3];
    st[1] = cap * shape[3] + pad;
  }
  st[0] = st[1] * shape[1] + rand_in(0, 2);
}

/* An arena of `bytes` + 32, 64-byte aligned, filled with a pattern; its region starts `off` bytes in. */
static char* arena_new(size_t bytes) {
  size_t n = (bytes + 32 + 63) / 64 * 64;
  char* a = (char*)aligned_alloc(64, n);
  for (size_t i = 0; i < n; i++) a[i] = (char)next_rand();
  return a;
}

static void reference_copy(char* dst, const int64_t ds[4], const char* src, const int64_t ss[4], const int64_t shape[4],
                           int64_t elem) {
  int64_t i[4];
  FOR_EACH_INDEX(shape, i) {
    if (src)
      memcpy(dst + offset_of(ds, i, elem), src + offset_of(ss, i, elem), (size_t)elem);
    else
      memset(dst + offset_of(ds, i, elem), 0, (size_t)elem);
  }
}

/* The number of times each byte of [arena, +bytes) is in dst's region (element by element). */
static unsigned char* region_hits(const char* arena, size_t bytes, const char* dst, const int64_t ds[4],
                                  const int64_t shape[4], int64_t elem, unsigned char* want) {
  int64_t i[4];
  FOR_EACH_INDEX(shape, i) {
    for (int64_t k = 0; k < elem; k++) want[dst - arena + offset_of(ds, i, elem) + k]++;
  }
  (void)bytes;
  return want;
}

static void random_shape(int64_t shape[4]) {
  shape[0] = rand_in(1, 3);
  shape[1] = rand_in(1, 4);
  shape[2] = rand_in(1, 9);
  shape[3] = next_rand() % 2 ? 2 * rand_in(0, 10) + 1 : rand_in(1, 48); /* head_dim odd half of the time */
}

static const char* describe(const int64_t shape[4], int64_t elem, int doff, int soff) {
  static char s[160];
  snprintf(s, sizeof s, "[%lld,%lld,%lld,%lld] x %lld bytes, dst +%d, src +%d", (long long)shape[0],
           (long long)shape[1], (long long)shape[2], (long long)shape[3], (long long)elem, doff, soff);
  return s;
}

/* The arena equals the expectation and every byte of the region was written exactly once, nothing else. */
static void check_result(const char* what, const char* arena, const char* expect, size_t bytes, const interp* x,
                         const unsigned char* want, const char* layout) {
  CHECK(memcmp(arena, expect, bytes) == 0, "%s of %s differs from the reference", what, layout);
  CHECK(memcmp(x->hits, want, bytes) == 0, "%s of %s: a byte written twice, never, or outside the region", what,
        layout);
}

/* ---- copies and fills --------------------------------------------------------- */

static int planned_16 = 0, planned_narrow = 0;

/* Where kvc_gpu_plan may refuse: elements that cannot be loaded whole, strided in all four dimensions. */
static int strided_in_all_four(const int64_t shape[4], const int64_t ds[4], const int64_t ss[4]) {
  return shape[0] > 1 && shape[1] > 1 && shape[2] > 1 && shape[3] > 1 && (ds[3] != 1 || ss[3] != 1);
}

static void copy_or_fill_case(int64_t elem, int doff, int soff, int fill) {
  int64_t shape[4], ds[4], ss[4];
  random_shape(shape);
  random_strides(ds, shape);
  random_strides(ss, shape);
  size_t dbytes = extent_bytes(ds, shape, elem) + (size_t)doff, sbytes = extent_bytes(ss, shape, elem) + (size_t)soff;
  char* darena = arena_new(dbytes);
  char* sarena = arena_new(sbytes);
  char *dst = darena + doff, *src = fill ? NULL : sarena + soff;
  char* expect = (char*)malloc(dbytes);
  memcpy(expect, darena, dbytes);
  reference_copy(expect + doff, ds, src, ss, shape, elem);
  const char* layout = describe(shape, elem, doff, soff);
  kvc_gpu_copy p;
  int rc = kvc_gpu_plan(&p, dst, ds, src, ss, shape, (size_t)elem, 0);
  /* Refused only: elements that cannot be loaded whole, strided in all four dimensions. */
  CHECK(rc == 0 || (rc < 0 && strided_in_all_four(shape, ds, ss)), "plan of %s: %d", layout, rc);
  if (rc == 0) {
    char why[256] = "";
    CHECK(kvc_gpu_check_plan(&p, why, sizeof why) == 0, "%s of %s: %s", fill ? "fill" : "copy", layout, why);
    if (p.unit == 16)
      planned_16++;
    else
      planned_narrow++;
    interp x = interp_on(darena, dbytes);
    kvc_gpu_walk_plan(&p, interp_visit, &x);
    flush(&x);
    unsigned char* want = region_hits(darena, dbytes, dst, ds, shape, elem, (unsigned char*)calloc(dbytes, 1));
    check_result(fill ? "fill" : "copy", darena, expect, dbytes, &x, want, layout);
    free(want);
    interp_done(&x);
  }
  free(darena);
  free(sarena);
  free(expect);
}

static void test_copies_and_fills(void) {
  int cases = 0;
  for (size_t e = 0; e < NELEM; e++)
    for (int doff = 0; doff < 16; doff++)
      for (int soff = 0; soff < 16; soff++) {
        copy_or_fill_case(elem_sizes[e], doff, soff, (doff + soff) % 4 == 0);
        cases++;
      }
  printf("copies and fills: %d cases, every dst/src offset 0..15 x element size; units: %d of 16 bytes, %d narrower\n",
         cases, planned_16, planned_narrow);
}

/* ---- copy_4d's overlapping routes: the move kernel and scratch ----------------- */

/* copy_4d on the CPU through the GPU backend's route and plans (gpu_backend.cpp's gpu_copy_4d). */
/* Returns 0, or -1 where a plan is refused (as the backend's copy_4d then fails). */
static int copy_4d_through_plans(char* dst, const int64_t ds[4], const char* src, const int64_t ss[4],
                                 const int64_t shape[4], int64_t elem, interp* x, kvc_gpu_route* taken) {
  kvc_gpu_copy plan;
  int64_t shift = 0;
  char why[256] = "";
  *taken = kvc_gpu_copy_route(dst, ds, src, ss, shape, (size_t)elem, &plan, &shift);
  if (*taken == KVC_GPU_ROUTE_NONE) return 0;
  if (*taken == KVC_GPU_ROUTE_MOVE) {
    static _Alignas(16) char stage[KVC_GPU_STAGE_BYTES];
    CHECK(kvc_gpu_check_move(&plan, shift, why, sizeof why) == 0, "move: %s", why);
    kvc_gpu_walk_move(&plan, shift, stage, interp_visit, x);
    flush(x);
    return 0;
  }
  /* COPY, or SCRATCH: two copies through a compact buffer (256-byte aligned, as the runtime allocates). */
  const int64_t ts[4] = {shape[1] * shape[2] * shape[3], shape[2] * shape[3], shape[3], 1};
  char* tmp = *taken == KVC_GPU_ROUTE_SCRATCH ? (char*)aligned_alloc(256, (size_t)(shape[0] * ts[0] * elem + 255) / 256 * 256)
                                               : NULL;
  const char* from[2] = {src, tmp};
  char* to[2] = {tmp ? tmp : dst, dst};
  const int64_t* fs[2] = {ss, ts};
  const int64_t* tos[2] = {tmp ? ts : ds, ds};
  int rc = 0;
  for (int k = 0; k < (tmp ? 2 : 1) && !rc; k++) {
    rc = kvc_gpu_plan(&plan, to[k], tos[k], from[k], fs[k], shape, (size_t)elem, 0);
    /* Refused only: elements that cannot be loaded whole, strided in all four dimensions. */
    CHECK(rc == 0 || (rc < 0 && strided_in_all_four(shape, tos[k], fs[k])), "plan: %d", rc);
    if (rc) break;
    CHECK(kvc_gpu_check_plan(&plan, why, sizeof why) == 0, "copy: %s", why);
    kvc_gpu_walk_plan(&plan, interp_visit, x);
    flush(x);
  }
  free(tmp);
  return rc ? -1 : 0;
}

static void test_overlapping_copies(void) {
  int moves = 0, scratch = 0;
  for (int it = 0; it < 1600; it++) {
    int64_t elem = elem_sizes[it % NELEM];
    int off = (it / (int)NELEM) % 16;
    int64_t shape[4] = {rand_in(1, 2), rand_in(1, 3), rand_in(2, 40), rand_in(1, 21)};
    if (it % 9 == 0) shape[3] = rand_in(600, 1100) | 1; /* rows longer than the stage holds a few of */
    int64_t st[4];
    int64_t cap = shape[2] + rand_in(1, 12);
    st[3] = 1;
    st[2] = shape[3];
    st[1] = cap * shape[3] + rand_in(0, 3);
    st[0] = st[1] * shape[1] + rand_in(0, 1);
    int64_t full[4] = {shape[0], shape[1], cap, shape[3]};
    size_t bytes = extent_bytes(st, full, elem) + (size_t)off;
    char* arena = arena_new(bytes);
    int64_t ds[4], ss[4];
    memcpy(ds, st, sizeof ds);
    memcpy(ss, st, sizeof ss);
    char *dst, *src;
    if (it % 4 != 3) { /* a seq shift by k rows within each plane: the move kernel */
      int64_t k = rand_in(1, (cap - shape[2]) < shape[2] - 1 ? cap - shape[2] : shape[2] - 1);
      int64_t shift = next_rand() % 2 ? k : -k;
      src = arena + off + (shift < 0 ? -shift : 0) * st[2] * elem;
      dst = src + shift * st[2] * elem;
    } else { /* the same bytes read as [.., d, s]: an overlap that is no seq move, through scratch */
      shape[2] = shape[3] = shape[2] < shape[3] ? shape[2] : shape[3]; /* src's [d, s] stays in the arena */
      ss[2] = 1;
      ss[3] = shape[3];
      src = dst = arena + off;
    }
    const char* layout = describe(shape, elem, off, off);
    char* snapshot = (char*)malloc(bytes);
    char* expect = (char*)malloc(bytes);
    memcpy(snapshot, arena, bytes);
    memcpy(expect, arena, bytes);
    reference_copy(expect + (dst - arena), ds, snapshot + (src - arena), ss, shape, elem);
    interp x = interp_on(arena, bytes);
    kvc_gpu_route taken;
    int refused = copy_4d_through_plans(dst, ds, src, ss, shape, elem, &x, &taken) != 0;
    unsigned char* want = region_hits(arena, bytes, dst, ds, shape, elem, (unsigned char*)calloc(bytes, 1));
    CHECK(refused || memcmp(arena, expect, bytes) == 0, "overlapping copy (route %d) of %s is not memmove",
          (int)taken, layout);
    if (taken == KVC_GPU_ROUTE_MOVE) {
      moves++;
      CHECK(memcmp(x.hits, want, bytes) == 0, "move of %s: a byte written twice, never, or outside", layout);
    }
    scratch += taken == KVC_GPU_ROUTE_SCRATCH && !refused;
    free(want);
    interp_done(&x);
    free(arena);
    free(snapshot);
    free(expect);
  }
  CHECK(moves > 1000 && scratch > 300, "routes: %d moves, %d through scratch", moves, scratch);
  printf("overlapping copies: %d seq moves (move kernel), %d through scratch, offsets 0..15, element sizes 1..16\n",
         moves, scratch);
}

/* ---- copy_rows ------------------------------------------------------------------ */

/* One random copy_rows; returns 1 when the old plan (row 0 alone) fails the check on it. */
static int rows_case(int64_t elem, int doff, int soff) {
  int blind_fails = 0;
  int64_t batch_src = rand_in(1, 6), batch_dst = rand_in(1, 6);
  int64_t row_shape[4] = {1, rand_in(1, 3), rand_in(1, 5), 0};
  row_shape[3] = next_rand() % 2 ? 2 * rand_in(0, 8) + 1 : rand_in(1, 40);
  int64_t ds[4], ss[4], dshape[4], sshape[4];
  memcpy(dshape, row_shape, sizeof dshape);
  memcpy(sshape, row_shape, sizeof sshape);
  dshape[0] = batch_dst;
  sshape[0] = batch_src;
  random_strides(ds, dshape);
  random_strides(ss, sshape);
  ds[0] += rand_in(0, 3); /* odd batch-row strides: the case the old plan never saw */
  ss[0] += rand_in(0, 3);
  size_t dbytes = extent_bytes(ds, dshape, elem) + (size_t)doff, sbytes = extent_bytes(ss, sshape, elem) + (size_t)soff;
  char* darena = arena_new(dbytes);
  char* sarena = arena_new(sbytes);
  char *dst = darena + doff, *src = sarena + soff;
  /* Distinct destination rows (a GPU writes them in parallel), source rows with repeats. */
  int64_t dst_rows[6], src_rows[6], count = rand_in(1, batch_dst);
  for (int64_t i = 0; i < batch_dst; i++) dst_rows[i] = i;
  for (int64_t i = batch_dst - 1; i > 0; i--) {
    int64_t j = rand_in(0, i), t = dst_rows[i];
    dst_rows[i] = dst_rows[j];
    dst_rows[j] = t;
  }
  for (int64_t i = 0; i < count; i++) src_rows[i] = rand_in(0, batch_src - 1);
  char* expect = (char*)malloc(dbytes);
  memcpy(expect, darena, dbytes);
  unsigned char* want = (unsigned char*)calloc(dbytes, 1);
  for (int64_t i = 0; i < count; i++) {
    char* drow = dst + dst_rows[i] * ds[0] * elem;
    reference_copy(expect + (drow - darena), ds, src + src_rows[i] * ss[0] * elem, ss, row_shape, elem);
    region_hits(darena, dbytes, drow, ds, row_shape, elem, want);
  }
  const char* layout = describe(row_shape, elem, doff, soff);
  kvc_gpu_rows r;
  int rc = kvc_gpu_plan_rows(&r, dst, ds, src, ss, row_shape, (size_t)elem);
  CHECK(rc == 0, "rows plan of %s: %d", layout, rc);
  if (rc == 0) {
    char why[256] = "";
    CHECK(kvc_gpu_check_rows(&r, dst_rows, src_rows, count, why, sizeof why) == 0, "rows of %s (strides %lld, %lld): %s",
          layout, (long long)ds[0], (long long)ss[0], why);
    interp x = interp_on(darena, dbytes);
    kvc_gpu_walk_rows(&r, dst_rows, src_rows, count, interp_visit, &x);
    flush(&x);
    check_result("copy_rows", darena, expect, dbytes, &x, want, layout);
    interp_done(&x);
    /* The plan before the fix: row 0 alone. It must fail the check on some of these layouts. */
    kvc_gpu_rows blind = r;
    kvc_gpu_plan(&blind.plan, dst, ds, src, ss, row_shape, (size_t)elem, 0);
    blind_fails = kvc_gpu_check_rows(&blind, dst_rows, src_rows, count, why, sizeof why) != 0;
  }
  free(darena);
  free(sarena);
  free(expect);
  free(want);
  return blind_fails;
}

static void test_copy_rows(void) {
  int cases = 0, blind = 0;
  for (size_t e = 0; e < NELEM; e++)
    for (int doff = 0; doff < 16; doff++)
      for (int soff = 0; soff < 16; soff++, cases++) blind += rows_case(elem_sizes[e], doff, soff);
  /* Aligned buffers (as allocations are) with odd row strides: the H200's case. */
  int aligned_cases = 0, aligned_blind = 0;
  for (int i = 0; i < 500; i++, aligned_cases++) aligned_blind += rows_case(elem_sizes[i % NELEM], 0, 0);
  CHECK(aligned_blind > aligned_cases / 25, "the old rows plan was misaligned in only %d of %d aligned cases",
        aligned_blind, aligned_cases);
  printf("copy_rows: %d cases at every offset, %d on aligned buffers, all with odd batch-row strides; the old plan "
         "(row 0 alone) fails the check in %d and %d of them\n",
         cases, aligned_cases, blind, aligned_blind);

  /* The fast path stays: an aligned bf16 cache [b, 8, 64, 128] moves its rows in 16-byte units. */
  static uint16_t cache[4 * 8 * 64 * 128] __attribute__((aligned(16)));
  const int64_t st[4] = {8 * 64 * 128, 64 * 128, 128, 1}, row[4] = {1, 8, 64, 128};
  kvc_gpu_rows r;
  CHECK(kvc_gpu_plan_rows(&r, cache, st, cache, st, row, 2) == 0 && r.plan.unit == 16, "aligned rows: unit %d",
        r.plan.unit);
}

/* ---- batches ------------------------------------------------------------------- */

static void test_batches(void) {
  enum { N = 24 };
  int batches = 0;
  for (int it = 0; it < 80; it++) {
    kvc_gpu_copy plans[N];
    char *darenas[N], *sarenas[N], *expects[N];
    size_t dbytes[N];
    unsigned char* wants[N];
    int32_t n = 0;
    uint32_t blocks = 0;
    for (int i = 0; i < N; i++) {
      int64_t elem = elem_sizes[next_rand() % NELEM];
      int doff = (int)rand_in(0, 15), soff = (int)rand_in(0, 15);
      int64_t shape[4], ds[4], ss[4];
      random_shape(shape);
      random_strides(ds, shape);
      random_strides(ss, shape);
      ds[3] = ss[3] = 1; /* keep every copy plannable */
      ds[2] = ss[2] = shape[3];
      dbytes[n] = extent_bytes(ds, shape, elem) + (size_t)doff;
      size_t sbytes = extent_bytes(ss, shape, elem) + (size_t)soff;
      darenas[n] = arena_new(dbytes[n]);
      sarenas[n] = arena_new(sbytes);
      expects[n] = (char*)malloc(dbytes[n]);
      memcpy(expects[n], darenas[n], dbytes[n]);
      reference_copy(expects[n] + doff, ds, sarenas[n] + soff, ss, shape, elem);
      wants[n] = region_hits(darenas[n], dbytes[n], darenas[n] + doff, ds, shape, elem,
                             (unsigned char*)calloc(dbytes[n], 1));
      CHECK(kvc_gpu_plan(&plans[n], darenas[n] + doff, ds, sarenas[n] + soff, ss, shape, (size_t)elem, 0) == 0,
            "batch copy %d", i);
      plans[n].first_block = blocks;
      blocks += kvc_gpu_plan_blocks(&plans[n]);
      n++;
    }
    char why[256] = "";
    CHECK(kvc_gpu_check_batch(plans, n, blocks, why, sizeof why) == 0, "batch: %s", why);
    /* One interpreter per copy's arena: a visit lands in exactly one of them. */
    interp x = interp_on(NULL, 0);
    kvc_gpu_walk_batch(plans, n, blocks, interp_visit, &x);
    flush(&x);
    interp_done(&x);
    for (int32_t i = 0; i < n; i++) {
      CHECK(memcmp(darenas[i], expects[i], dbytes[i]) == 0, "copy %d of a batch differs", (int)i);
      interp one = interp_on(darenas[i], dbytes[i]);
      kvc_gpu_walk_plan(&plans[i], interp_visit, &one); /* counted alone: same bytes again, each once */
      flush(&one);
      CHECK(memcmp(one.hits, wants[i], dbytes[i]) == 0, "copy %d of a batch: bytes written twice or outside", (int)i);
      interp_done(&one);
      free(darenas[i]);
      free(sarenas[i]);
      free(expects[i]);
      free(wants[i]);
    }
    batches++;
  }
  printf("batches: %d of %d copies each, random offsets and element sizes\n", batches, N);
}

/* ---- copy_rows_batch ---------------------------------------------------------------- */

/* What the rows batch cases exercised: jobs whose pairs share blocks, whose pairs take several blocks, units. */
static int rb_shared = 0, rb_tiled = 0, rb_units[17];

/*
 * One random step write (rows_batch_cases.h) with every buffer at its own
 * offset 0..15 from a 16-byte boundary (at 0 when `aligned`, as
 * allocations are), all in one arena: the batch plan passes the check, and
 * its walk equals the reference and writes every destination byte once.
 */
static void rows_batch_case(const rbc_shape* shape, int aligned) {
  rbc_case c;
  if (!rbc_make(&c, shape)) {
    CHECK(0, "out of memory");
    return;
  }
  size_t* at = (size_t*)malloc(sizeof(size_t) * ((size_t)c.nbufs + 1));
  size_t total = 0;
  for (int32_t b = 0; b < c.nbufs; b++) {
    at[b] = (total + 15) / 16 * 16 + (aligned ? 0 : (size_t)rand_in(0, 15));
    total = at[b] + c.buf_bytes[b];
  }
  char* arena = arena_new(total);
  char* expect = (char*)malloc(total);
  memcpy(expect, arena, total);
  unsigned char** bufs = (unsigned char**)malloc(sizeof(unsigned char*) * ((size_t)c.nbufs + 1));
  unsigned char** ebufs = (unsigned char**)malloc(sizeof(unsigned char*) * ((size_t)c.nbufs + 1));
  for (int32_t b = 0; b < c.nbufs; b++) {
    bufs[b] = (unsigned char*)arena + at[b];
    ebufs[b] = (unsigned char*)expect + at[b];
  }
  kvc_copy_rows_job* jobs = (kvc_copy_rows_job*)calloc((size_t)c.njobs, sizeof(kvc_copy_rows_job));
  kvc_copy_rows_job* ejobs = (kvc_copy_rows_job*)calloc((size_t)c.njobs, sizeof(kvc_copy_rows_job));
  rbc_bind(&c, bufs, jobs);
  rbc_bind(&c, ebufs, ejobs);
  rbc_reference(ejobs, c.njobs);
  unsigned char* want = (unsigned char*)calloc(total, 1);
  for (int32_t i = 0; i < c.njobs; i++) {
    const kvc_copy_rows_job* j = &jobs[i];
    const int64_t one_row[4] = {1, j->row_shape[1], j->row_shape[2], j->row_shape[3]};
    for (int64_t k = 0; k < j->count; k++)
      region_hits(arena, total, (const char*)j->dst + j->dst_rows[k] * j->dst_strides[0] * (int64_t)j->elem_size,
                  j->dst_strides, one_row, (int64_t)j->elem_size, want);
  }
  char layout[96];
  snprintf(layout, sizeof layout, "a %s step of %lld tokens, %d jobs, %zu-byte elements", c.hnd ? "HND" : "NHD",
           (long long)c.tokens, (int)c.njobs, c.elem);
  kvc_gpu_rows_batch b;
  int rc = kvc_gpu_plan_rows_batch(&b, jobs, c.njobs);
  CHECK(rc == 0, "rows batch plan of %s: %d", layout, rc);
  if (rc == 0) {
    char why[256] = "";
    CHECK(kvc_gpu_check_rows_batch(&b, why, sizeof why) == 0, "rows batch of %s: %s", layout, why);
    interp x = interp_on(arena, total);
    kvc_gpu_walk_rows_batch(b.jobs, b.njobs, b.index, b.blocks, interp_visit, &x);
    flush(&x);
    check_result("copy_rows_batch", arena, expect, total, &x, want, layout);
    interp_done(&x);
    for (int32_t i = 0; i < b.njobs; i++) {
      rb_shared += b.jobs[i].pairs_per_block > 1;
      rb_tiled += b.jobs[i].blocks_per_pair > 1;
      rb_units[b.jobs[i].rows.plan.unit]++;
    }
    kvc_gpu_rows_batch_free(&b);
  }
  free(want);
  free(jobs);
  free(ejobs);
  free(bufs);
  free(ebufs);
  free(arena);
  free(expect);
  free(at);
  rbc_free(&c);
}

static void test_rows_batch(void) {
  int cases = 0;
  for (size_t e = 0; e < NELEM; e++)
    for (int it = 0; it < 60; it++, cases++) {
      const rbc_shape small = {(int32_t)rand_in(1, 5), 0, 40, 4, 24, 4, (size_t)elem_sizes[e]};
      rows_batch_case(&small, it % 4 == 0);
    }
  /* Rows longer than one block's tile (several blocks per pair), few of them. */
  for (size_t e = 0; e < NELEM; e++, cases++) {
    const rbc_shape wide = {2, 1, 3, 3, 3000, 1, (size_t)elem_sizes[e]};
    rows_batch_case(&wide, 0);
  }
  CHECK(rb_shared > 0 && rb_tiled > 0, "jobs with shared blocks: %d, with several blocks per pair: %d", rb_shared,
        rb_tiled);
  CHECK(rb_units[1] > 0 && rb_units[16] > 0, "1-byte units in %d jobs, 16-byte units in %d", rb_units[1],
        rb_units[16]);
  printf("copy_rows_batch: %d step writes at offsets 0..15, a quarter aligned (jobs by unit 1/2/4/8/16: %d/%d/%d/%d/%d; %d with pairs "
         "sharing blocks, %d with pairs over several blocks)\n",
         cases, rb_units[1], rb_units[2], rb_units[4], rb_units[8], rb_units[16], rb_shared, rb_tiled);
}

/* ---- zeroing, and forged plans ----------------------------------------------------- */

static void test_zero_bytes(void) {
  for (int off = 0; off < 16; off++)
    for (size_t bytes = 1; bytes < 300; bytes += (size_t)rand_in(1, 7)) {
      char* arena = arena_new(bytes + (size_t)off);
      kvc_gpu_copy plans[2];
      int n = kvc_gpu_plan_zero_bytes(plans, arena + off, bytes);
      CHECK(n == 1, "zeroing %zu bytes at +%d: %d plans", bytes, off, n);
      char why[256] = "";
      CHECK(kvc_gpu_check_plan(&plans[0], why, sizeof why) == 0, "zeroing: %s", why);
      interp x = interp_on(arena, bytes + (size_t)off + 32);
      kvc_gpu_walk_plan(&plans[0], interp_visit, &x);
      flush(&x);
      int ok = 1;
      for (size_t i = 0; i < bytes + (size_t)off + 32; i++)
        ok &= x.hits[i] == (i >= (size_t)off && i < (size_t)off + bytes) && (x.hits[i] ? arena[i] == 0 : 1);
      CHECK(ok, "zeroing %zu bytes at +%d", bytes, off);
      interp_done(&x);
      free(arena);
    }
  kvc_gpu_copy plans[2];
  CHECK(kvc_gpu_plan_zero_bytes(plans, NULL, 0) == 0, "no bytes: no plan");
  char* big = (char*)(uintptr_t)4096; /* planned only, never walked */
  CHECK(kvc_gpu_plan_zero_bytes(plans, big, ((size_t)5 << 30) + 12) == 2 && plans[0].unit == 16 && plans[0].n[2] == 5 &&
            plans[1].unit == 4 && plans[1].dst == big + ((size_t)5 << 30),
        "past 2^31 bytes: 5 rows of 1 GiB, then 12 bytes in 4-byte units");
}

static void test_forged_plans_fail(void) {
  static char buf[256] __attribute__((aligned(16)));
  const int64_t st[4] = {64, 64, 16, 1}, shape[4] = {1, 1, 4, 16};
  char why[256] = "";
  kvc_gpu_copy p;
  CHECK(kvc_gpu_plan(&p, buf + 4, st, buf + 128, st, shape, 1, 0) == 0 && p.unit == 4, "plan at +4: unit %d", p.unit);
  CHECK(kvc_gpu_check_plan(&p, why, sizeof why) == 0, "%s", why);
  p.unit = 16;
  p.n[3] /= 4;
  CHECK(kvc_gpu_check_plan(&p, why, sizeof why) == -1 && strstr(why, "misaligned plan") && strstr(why, "dst address"),
        "a forged 16-byte unit at +4 must fail: \"%s\"", why);
  p.unit = 3;
  CHECK(kvc_gpu_check_plan(&p, why, sizeof why) == -1 && strstr(why, "1, 2, 4, 8 or 16"), "a 3-byte unit: \"%s\"",
        why);
  /* A rows launch whose row strides break the unit. */
  kvc_gpu_rows r;
  const int64_t rs[4] = {3, 2, 2, 1}, row[4] = {1, 1, 1, 2}, dr[2] = {0, 1}, sr[2] = {1, 0};
  CHECK(kvc_gpu_plan_rows(&r, buf, rs, buf + 128, rs, row, 4) == 0 && r.plan.unit == 4, "rows: unit %d", r.plan.unit);
  CHECK(kvc_gpu_check_rows(&r, dr, sr, 2, why, sizeof why) == 0, "%s", why);
  r.plan.unit = 8;
  r.plan.n[3] = 1;
  CHECK(kvc_gpu_check_rows(&r, dr, sr, 2, why, sizeof why) == -1 && strstr(why, "8-byte unit at src address"),
        "8-byte units with 12-byte row strides must fail: \"%s\"", why);
  /* A rows batch whose second job's unit is forged past what its row strides allow. */
  kvc_copy_rows_job jobs[2];
  memset(jobs, 0, sizeof jobs);
  for (int i = 0; i < 2; i++) {
    jobs[i].dst = buf + 64 * i;
    jobs[i].src = buf + 128 + 32 * i;
    jobs[i].dst_rows = dr;
    jobs[i].src_rows = sr;
    jobs[i].count = 2;
    jobs[i].elem_size = 4;
    memcpy(jobs[i].dst_strides, rs, sizeof rs);
    memcpy(jobs[i].src_strides, rs, sizeof rs);
    memcpy(jobs[i].row_shape, row, sizeof row);
  }
  kvc_gpu_rows_batch rb;
  CHECK(kvc_gpu_plan_rows_batch(&rb, jobs, 2) == 0 && rb.jobs[1].rows.plan.unit == 4, "rows batch: unit %d",
        rb.njobs == 2 ? rb.jobs[1].rows.plan.unit : -1);
  CHECK(kvc_gpu_check_rows_batch(&rb, why, sizeof why) == 0, "%s", why);
  rb.jobs[1].rows.plan.unit = 8;
  rb.jobs[1].rows.plan.n[3] = 1;
  CHECK(kvc_gpu_check_rows_batch(&rb, why, sizeof why) == -1 && strstr(why, "8-byte unit at"),
        "a rows batch job's forged 8-byte unit with 12-byte row strides must fail: \"%s\"", why);
  rb.jobs[1].rows.plan.unit = 5;
  CHECK(kvc_gpu_check_rows_batch(&rb, why, sizeof why) == -1 && strstr(why, "1, 2, 4, 8 or 16"),
        "a 5-byte unit in a rows batch: \"%s\"", why);
  kvc_gpu_rows_batch_free(&rb);
  /* A seq move by one row, 2 bytes off: 2-byte units; forged to 8, the stage and src accesses are misaligned. */
  const int64_t mst[4] = {0, 0, 32, 1}, mshape[4] = {1, 1, 6, 32};
  CHECK(kvc_gpu_plan(&p, buf + 34, mst, buf + 2, mst, mshape, 1, 1) == 0 && p.unit == 2, "move plan: unit %d",
        p.unit);
  CHECK(kvc_gpu_check_move(&p, 1, why, sizeof why) == 0, "%s", why);
  p.unit = 8;
  p.n[3] = 4;
  CHECK(kvc_gpu_check_move(&p, 1, why, sizeof why) == -1 && strstr(why, "8-byte unit at src address"),
        "a forged 8-byte unit on a move 2 bytes off must fail: \"%s\"", why);
}

int main(void) {
  rng = 0x2545f4914f6cdd1du; /* its own cases, not test_gpu_plan's */
  test_forged_plans_fail();
  test_copies_and_fills();
  test_overlapping_copies();
  test_copy_rows();
  test_batches();
  test_rows_batch();
  test_zero_bytes();
  return plan_finish("test_gpu_plan_alignment");
}
