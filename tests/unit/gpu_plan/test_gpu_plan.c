/*
 * tests/unit/gpu_plan/test_gpu_plan.c: the GPU kernels' host-side planning
 * (backends/gpu/gpu_plan.c) and block arithmetic (gpu_plan.h), on the CPU.
 *
 * Each plan is run here the way the kernels run it: every block takes its
 * share through the same functions the kernels call, units move as whole
 * unit-sized loads and stores, the threads of a direct move chunk in a
 * scrambled order. The result must equal an element-by-element reference,
 * write every destination byte exactly once and touch nothing else. What
 * this cannot check, the kernels' own loops on a device, tests/gpu does.
 */
#include <assert.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "gpu_plan.h"
#include "plan_test_util.h"


/* Byte offset of element (b, h, s, d). */
static int64_t offset_of(const int64_t st[4], int64_t b, int64_t h, int64_t s, int64_t d, int64_t elem) {
  return (b * st[0] + h * st[1] + s * st[2] + d * st[3]) * elem;
}

/* The reference: element by element, through a snapshot of the source (memmove semantics). */
static void reference_copy(char* dst, const int64_t ds[4], const char* src, const int64_t ss[4], const int64_t shape[4],
                           int64_t elem, const char* src_snapshot_base, const char* src_base) {
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t s = 0; s < shape[2]; s++)
        for (int64_t d = 0; d < shape[3]; d++) {
          const char* from = src + offset_of(ss, b, h, s, d, elem);
          if (src_snapshot_base) from = src_snapshot_base + (from - src_base);
          memcpy(dst + offset_of(ds, b, h, s, d, elem), from, (size_t)elem);
        }
}

/* Runs block `local` of plan p; `hits` counts writes per byte of the arena starting at arena. */
static void run_share(const kvc_gpu_copy* p, uint32_t local, const char* arena, unsigned char* hits) {
  int64_t row0;
  int32_t nrows, u0, u1;
  kvc_gpu_block_share(p, local, &row0, &nrows, &u0, &u1);
  CHECK(nrows >= 1 && u0 < u1, "block %u of a plan has no work (rows %d, units [%d, %d))", local, nrows, u0, u1);
  int32_t i0, i1, i2;
  kvc_gpu_row_coords(p, row0, &i0, &i1, &i2);
  for (int32_t r = 0; r < nrows; r++) {
    int32_t j0 = i0, j1 = i1, j2 = i2;
    kvc_gpu_row_advance(p, r, &j0, &j1, &j2);
    CHECK(j0 < p->n[0] && j1 < p->n[1] && j2 < p->n[2], "row %lld + %d out of range",
          (long long)row0, (int)r);
    for (int32_t u = u0; u < u1; u++) {
      char* d = p->dst + j0 * p->dst_stride[0] + j1 * p->dst_stride[1] + j2 * p->dst_stride[2] + u * p->dst_stride[3];
      if (p->src) {
        const char* s =
            p->src + j0 * p->src_stride[0] + j1 * p->src_stride[1] + j2 * p->src_stride[2] + u * p->src_stride[3];
        CHECK((uintptr_t)s % (uintptr_t)p->unit == 0, "unaligned %d-byte load", p->unit);
        memcpy(d, s, (size_t)p->unit);
      } else {
        memset(d, 0, (size_t)p->unit);
      }
      CHECK((uintptr_t)d % (uintptr_t)p->unit == 0, "unaligned %d-byte store", p->unit);
      for (int32_t k = 0; k < p->unit; k++) hits[d - arena + k]++;
    }
  }
}

/* 1 when every byte of dst's region was written once and the bytes outside it never. */
static int written_once(const int64_t ds[4], const int64_t shape[4], int64_t elem, const char* dst, const char* arena,
                        const unsigned char* hits, size_t arena_bytes) {
  unsigned char* want = (unsigned char*)calloc(arena_bytes, 1);
  for (int64_t b = 0; b < shape[0]; b++)
    for (int64_t h = 0; h < shape[1]; h++)
      for (int64_t s = 0; s < shape[2]; s++)
        for (int64_t d = 0; d < shape[3]; d++)
          for (int64_t k = 0; k < elem; k++) want[dst - arena + offset_of(ds, b, h, s, d, elem) + k]++;
  int ok = memcmp(want, hits, arena_bytes) == 0;
  free(want);
  return ok;
}

typedef struct layout {
  int64_t shape[4], ds[4], ss[4], elem;
  int64_t dst_off, src_off; /* bytes into the arenas: misalignment */
} layout;

/* Strides of a [b, h, cap, d] store (cap >= seq) with an optional transposed (strided) last dimension. */
static void store_strides(int64_t st[4], const int64_t shape[4], int64_t cap, int transposed) {
  if (transposed) { /* [b, h, d, cap] in memory: the last dimension steps by cap */
    st[2] = 1;
    st[3] = cap;
    st[1] = cap * shape[3];
  } else {
    st[3] = 1;
    st[2] = shape[3];
    st[1] = cap * shape[3];
  }
  st[0] = st[1] * shape[1];
}

static layout random_layout(void) {
  static const int64_t elems[] = {1, 2, 4, 8, 16, 2, 2, 4, 3, 6};
  layout l;
  l.elem = elems[next_rand() % (sizeof elems / sizeof *elems)];
  l.shape[0] = rand_in(1, 3);
  l.shape[1] = rand_in(1, 4);
  l.shape[2] = rand_in(1, 9);
  l.shape[3] = rand_in(1, 40);
  int strided = next_rand() % 4 == 0;
  store_strides(l.ds, l.shape, l.shape[2] + rand_in(0, 5), strided && next_rand() % 2);
  store_strides(l.ss, l.shape, l.shape[2] + rand_in(0, 3), strided && next_rand() % 2);
  /* Aligned most of the time (as real tensors are); sometimes off by a few elements or, contiguous only, bytes. */
  l.dst_off = next_rand() % 3 ? 0 : rand_in(0, 3) * l.elem;
  l.src_off = next_rand() % 3 ? 0 : rand_in(0, 3) * l.elem;
  if (next_rand() % 5 == 0) l.src_off += 1;
  return l;
}

/* One random copy (or fill) planned and run; returns the plan's return code. */
static int check_one_copy(const layout* l, int fill) {
  size_t dbytes = extent_bytes(l->ds, l->shape, l->elem) + (size_t)l->dst_off + 64;
  size_t sbytes = extent_bytes(l->ss, l->shape, l->elem) + (size_t)l->src_off + 64;
  char* darena = (char*)aligned_alloc(64, (dbytes + 63) / 64 * 64);
  char* sarena = (char*)aligned_alloc(64, (sbytes + 63) / 64 * 64);
  char* expect = (char*)malloc(dbytes);
  unsigned char* hits = (unsigned char*)calloc(dbytes, 1);
  for (size_t i = 0; i < dbytes; i++) darena[i] = (char)(0xA5 ^ i);
  for (size_t i = 0; i < sbytes; i++) sarena[i] = (char)(next_rand() | 1);
  char* dst = darena + l->dst_off;
  char* src = sarena + l->src_off;
  memcpy(expect, darena, dbytes);
  if (fill) {
    for (int64_t b = 0; b < l->shape[0]; b++)
      for (int64_t h = 0; h < l->shape[1]; h++)
        for (int64_t s = 0; s < l->shape[2]; s++)
          for (int64_t d = 0; d < l->shape[3]; d++)
            memset(expect + l->dst_off + offset_of(l->ds, b, h, s, d, l->elem), 0, (size_t)l->elem);
  } else {
    reference_copy(expect + l->dst_off, l->ds, src, l->ss, l->shape, l->elem, NULL, NULL);
  }
  kvc_gpu_copy p;
  int rc = kvc_gpu_plan(&p, dst, l->ds, fill ? NULL : src, l->ss, l->shape, (size_t)l->elem, 0);
  if (rc == 0) {
    uint32_t blocks = kvc_gpu_plan_blocks(&p);
    for (uint32_t blk = 0; blk < blocks; blk++) run_share(&p, blk, darena, hits);
    CHECK(memcmp(darena, expect, dbytes) == 0, "%s of [%lld,%lld,%lld,%lld] x %lld bytes differs from the reference",
          fill ? "fill" : "copy", (long long)l->shape[0], (long long)l->shape[1], (long long)l->shape[2],
          (long long)l->shape[3], (long long)l->elem);
    CHECK(written_once(l->ds, l->shape, l->elem, dst, darena, hits, dbytes),
          "a destination byte was written twice, or a byte outside the region was written");
  }
  free(darena);
  free(sarena);
  free(expect);
  free(hits);
  return rc;
}

static void test_random_copies_and_fills(void) {
  int planned = 0, refused = 0;
  for (int i = 0; i < 3000; i++) {
    layout l = random_layout();
    int rc = check_one_copy(&l, i % 5 == 0);
    if (rc == 0) planned++;
    if (rc < 0) {
      refused++;
      /* Refusals are only for elements that cannot be loaded whole, strided in all four dimensions. */
      int strided = l.ds[3] != 1 || l.ss[3] != 1;
      int four = l.shape[0] > 1 && l.shape[1] > 1 && l.shape[2] > 1 && l.shape[3] > 1;
      CHECK(strided && four, "layout [%lld,%lld,%lld,%lld] x %lld refused", (long long)l.shape[0],
            (long long)l.shape[1], (long long)l.shape[2], (long long)l.shape[3], (long long)l.elem);
    }
  }
  CHECK(planned > 2500, "only %d of 3000 random layouts were planned", planned);
  printf("random copies and fills: %d planned and checked, %d refused as expected\n", planned, refused);
}

/* The decode step: one token of [1, 8, 1, 128] bf16 into slot 37 of a [1, 8, 64, 128] cache. */
static void test_decode_write_plan(void) {
  static uint16_t cache[8 * 64 * 128] __attribute__((aligned(16)));
  static uint16_t token[8 * 128] __attribute__((aligned(16)));
  const int64_t shape[4] = {1, 8, 1, 128};
  const int64_t ds[4] = {8 * 64 * 128, 64 * 128, 128, 1}, ss[4] = {8 * 128, 128, 128, 1};
  kvc_gpu_copy p;
  CHECK(kvc_gpu_plan(&p, cache + 37 * 128, ds, token, ss, shape, 2, 0) == 0, "plan failed");
  CHECK(p.unit == 16, "unit %d, want 16-byte vectors", p.unit);
  CHECK(p.n[3] == 16, "a row of 256 bytes is 16 units, got %d", p.n[3]);
  CHECK(p.n[0] == 1 && p.n[1] == 1 && p.n[2] == 8, "rows [%d,%d,%d], want the 8 heads", p.n[0], p.n[1], p.n[2]);
  CHECK(p.dst_stride[2] == 64 * 128 * 2 && p.src_stride[2] == 256, "head strides %lld, %lld",
        (long long)p.dst_stride[2], (long long)p.src_stride[2]);
  CHECK(kvc_gpu_plan_blocks(&p) == 1, "8 short rows fit one block, got %u blocks", kvc_gpu_plan_blocks(&p));

  /* A whole contiguous 8k-context layer: one run, tiles of 32 KiB. */
  const int64_t big[4] = {1, 8, 8192, 128}, bst[4] = {8 * 8192 * 128, 8192 * 128, 128, 1};
  CHECK(kvc_gpu_plan(&p, cache, bst, token, bst, big, 2, 0) == 0, "plan failed");
  CHECK(p.unit == 16 && p.n[0] == 1 && p.n[1] == 1 && p.n[2] == 1, "a contiguous layer is one run");
  CHECK(p.n[3] == 8 * 8192 * 128 * 2 / 16, "units %d", p.n[3]);
  CHECK(kvc_gpu_plan_blocks(&p) == (uint32_t)(p.n[3] / KVC_GPU_TILE_UNITS), "blocks %u", kvc_gpu_plan_blocks(&p));
}

static void test_refusals_and_empties(void) {
  kvc_gpu_copy p;
  char buf[64] __attribute__((aligned(16))) = {0};
  const int64_t st[4] = {8, 8, 8, 1}, shape[4] = {1, 1, 1, 8};
  CHECK(kvc_gpu_plan(&p, buf, st, buf + 32, st, shape, 0, 0) == -1, "elem_size 0 must be refused");
  const int64_t neg[4] = {1, -1, 1, 8};
  CHECK(kvc_gpu_plan(&p, buf, st, buf, st, neg, 1, 0) == -1, "a negative extent must be refused");
  const int64_t empty[4] = {1, 0, 1, 8};
  CHECK(kvc_gpu_plan(&p, buf, st, buf, st, empty, 1, 0) == 1, "an empty shape is nothing to do");
  const int64_t strided[4] = {4, 4, 4, 2}, two[4] = {1, 1, 1, 2};
  CHECK(kvc_gpu_plan(&p, buf + 1, strided, buf + 32, strided, two, 2, 0) == 0 && p.unit == 1 && p.n[3] == 2 &&
            p.n[2] == 2 && p.dst_stride[2] == 4,
        "a strided 2-byte element at an odd address moves as a row of 2 bytes");
  CHECK(kvc_gpu_plan(&p, buf, strided, buf + 32, strided, two, 3, 0) == 0 && p.n[3] == 3,
        "a strided 3-byte element moves as a row of 3 bytes");
  const int64_t st4[4] = {100, 30, 7, 2}, shape4[4] = {2, 2, 2, 2}; /* no two dimensions merge */
  CHECK(kvc_gpu_plan(&p, buf, st4, buf + 32, st4, shape4, 3, 0) == -1,
        "3-byte elements strided in all four dimensions have no dimension left for their bytes");
  const int64_t huge[4] = {1, 1, 1, (int64_t)1 << 31};
  CHECK(kvc_gpu_plan(&p, buf, st, buf, st, huge, 1, 0) == -1, "an extent past 2^31 must be refused");
}

static void test_overlap_detection(void) {
  char buf[4096] = {0};
  const int64_t st[4] = {1024, 256, 16, 1}, shape[4] = {1, 2, 4, 16};
  int64_t shift = 0;
  CHECK(!kvc_gpu_ranges_overlap(buf, st, buf + 2048, st, shape, 1), "disjoint halves");
  CHECK(kvc_gpu_ranges_overlap(buf, st, buf + 16, st, shape, 1), "rows shifted by one overlap");
  CHECK(kvc_gpu_seq_shift(buf + 16, st, buf, st, 1, &shift) && shift == 1, "shift +1 row, got %lld", (long long)shift);
  CHECK(kvc_gpu_seq_shift(buf, st, buf + 48, st, 1, &shift) && shift == -3, "shift -3 rows, got %lld",
        (long long)shift);
  CHECK(!kvc_gpu_seq_shift(buf + 3, st, buf, st, 1, &shift), "a shift that is not whole rows");
  const int64_t other[4] = {1024, 256, 32, 1};
  CHECK(!kvc_gpu_seq_shift(buf + 16, st, buf, other, 1, &shift), "different strides are no seq move");
  const int64_t neg[4] = {1, 1, -16, 1}, one[4] = {1, 1, 4, 16};
  CHECK(kvc_gpu_ranges_overlap(buf + 100, neg, buf + 60, st, one, 1), "negative strides reach down");
}

static int32_t gcd(int32_t a, int32_t b) {
  while (b) {
    int32_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/*
 * The move kernel on the CPU: planes one after another, chunks in the
 * kernel's order; a staged chunk reads all before it writes, a direct
 * chunk's units move in a scrambled order (threads run in any order).
 */
static void run_move(const kvc_gpu_copy* p, int64_t shift) {
  int32_t chunk_rows;
  int staged;
  kvc_gpu_move_chunking(p, shift, &chunk_rows, &staged);
  CHECK(chunk_rows >= 1, "empty chunks");
  if (staged)
    CHECK((int64_t)chunk_rows * p->n[3] * p->unit <= KVC_GPU_STAGE_BYTES, "a staged chunk overflows shared memory");
  else
    CHECK(chunk_rows >= (shift < 0 ? -shift : shift) || chunk_rows == p->n[2], "a direct chunk shorter than the shift");
  const int32_t rows = p->n[2], units = p->n[3];
  const int32_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  char* stage = (char*)malloc(KVC_GPU_STAGE_BYTES);
  for (int64_t plane = 0; plane < (int64_t)p->n[0] * p->n[1]; plane++) {
    int64_t i0 = plane / p->n[1], i1 = plane % p->n[1];
    char* d = p->dst + i0 * p->dst_stride[0] + i1 * p->dst_stride[1];
    const char* s = p->src + i0 * p->src_stride[0] + i1 * p->src_stride[1];
    int32_t covered = 0;
    for (int32_t c = 0; c < chunks; c++) {
      int32_t a, b;
      kvc_gpu_move_chunk(rows, chunk_rows, shift, c, &a, &b);
      covered += b - a;
      int32_t total = (b - a) * units;
      if (staged) {
        for (int32_t t = 0; t < total; t++)
          memcpy(stage + (size_t)t * p->unit, s + (a + t / units) * p->src_stride[2] + (t % units) * p->src_stride[3],
                 (size_t)p->unit);
        for (int32_t t = 0; t < total; t++)
          memcpy(d + (a + t / units) * p->dst_stride[2] + (t % units) * p->dst_stride[3], stage + (size_t)t * p->unit,
                 (size_t)p->unit);
      } else {
        int32_t step = 7;
        while (gcd(step, total) != 1) step++; /* coprime with total: the walk visits every unit once */
        for (int32_t k = 0, t = 0; k < total; k++, t = (t + step) % total)
          memcpy(d + (a + t / units) * p->dst_stride[2] + (t % units) * p->dst_stride[3],
                 s + (a + t / units) * p->src_stride[2] + (t % units) * p->src_stride[3], (size_t)p->unit);
      }
    }
    CHECK(covered == rows, "chunks cover %d of %d rows", covered, rows);
  }
  free(stage);
}

static void test_seq_moves(void) {
  int checked = 0;
  for (int i = 0; i < 600; i++) {
    int64_t elem = (int64_t)1 << rand_in(0, 3);
    int64_t shape[4] = {rand_in(1, 2), rand_in(1, 3), rand_in(2, 300), rand_in(1, 64)};
    if (i % 7 == 0) shape[3] = rand_in(1024, 3000); /* rows longer than the stage: direct chunks */
    int64_t extra = rand_in(1, 40), cap = shape[2] + extra;
    int64_t st[4];
    store_strides(st, shape, cap, 0);
    /* |shift| < seq rows (else nothing overlaps within a plane) and room for it in the capacity. */
    int64_t kmax = extra < shape[2] - 1 ? extra : shape[2] - 1;
    int64_t k = rand_in(1, i % 3 == 0 || kmax < 8 ? kmax : 8);
    int64_t shift = next_rand() % 2 ? k : -k;
    size_t bytes = extent_bytes(st, (int64_t[4]){shape[0], shape[1], cap, shape[3]}, elem) + 64;
    char* arena = (char*)aligned_alloc(64, (bytes + 63) / 64 * 64);
    for (size_t j = 0; j < bytes; j++) arena[j] = (char)next_rand();
    char* src = arena + (shift < 0 ? -shift : 0) * st[2] * elem;
    char* dst = src + shift * st[2] * elem;
    char* expect = (char*)malloc(bytes);
    char* snapshot = (char*)malloc(bytes);
    memcpy(expect, arena, bytes);
    memcpy(snapshot, arena, bytes);
    reference_copy(expect + (dst - arena), st, src, st, shape, elem, snapshot, arena);
    int64_t got;
    CHECK(kvc_gpu_seq_shift(dst, st, src, st, (size_t)elem, &got) && got == shift, "seq shift not recognised");
    kvc_gpu_copy p;
    CHECK(kvc_gpu_plan(&p, dst, st, src, st, shape, (size_t)elem, 1) == 0, "move plan failed");
    CHECK(p.n[2] == shape[2], "the move plan keeps the seq rows (%d, want %lld)", p.n[2], (long long)shape[2]);
    run_move(&p, shift);
    CHECK(memcmp(arena, expect, bytes) == 0,
          "move of [%lld,%lld,%lld,%lld] x %lld by %lld rows is not memmove", (long long)shape[0], (long long)shape[1],
          (long long)shape[2], (long long)shape[3], (long long)elem, (long long)shift);
    free(arena);
    free(expect);
    free(snapshot);
    checked++;
  }
  CHECK(checked > 300, "only %d moves checked", checked);
  printf("seq moves: %d checked against memmove\n", checked);
}

/* A batch: blocks find their copy by binary search over first_block, like the batched kernel. */
static void test_batch_lookup(void) {
  enum { N = 40 };
  layout ls[N];
  kvc_gpu_copy plans[N];
  char* darenas[N];
  char* expects[N];
  size_t dbytes[N];
  int32_t n = 0;
  uint32_t blocks = 0;
  for (int i = 0; i < N; i++) {
    layout l = random_layout();
    l.ds[3] = l.ss[3] = 1; /* keep them plannable */
    store_strides(l.ds, l.shape, l.shape[2] + 1, 0);
    store_strides(l.ss, l.shape, l.shape[2], 0);
    ls[n] = l;
    dbytes[n] = extent_bytes(l.ds, l.shape, l.elem) + (size_t)l.dst_off + 16;
    size_t sbytes = extent_bytes(l.ss, l.shape, l.elem) + (size_t)l.src_off + 16;
    darenas[n] = (char*)calloc(dbytes[n], 1);
    char* sarena = (char*)malloc(sbytes);
    for (size_t j = 0; j < sbytes; j++) sarena[j] = (char)next_rand();
    expects[n] = (char*)calloc(dbytes[n], 1);
    reference_copy(expects[n] + l.dst_off, l.ds, sarena + l.src_off, l.ss, l.shape, l.elem, NULL, NULL);
    int rc = kvc_gpu_plan(&plans[n], darenas[n] + l.dst_off, l.ds, sarena + l.src_off, l.ss, l.shape, (size_t)l.elem, 0);
    CHECK(rc == 0, "contiguous rows must plan");
    /* The source stays alive: plans point into it. Freed at the end through the plan. */
    plans[n].first_block = blocks;
    blocks += kvc_gpu_plan_blocks(&plans[n]);
    n++;
  }
  unsigned char* hits_dummy = NULL;
  for (uint32_t blk = 0; blk < blocks; blk++) {
    int32_t i = kvc_gpu_batch_find(plans, n, blk);
    CHECK(plans[i].first_block <= blk && blk - plans[i].first_block < kvc_gpu_plan_blocks(&plans[i]),
          "block %u mapped to copy %d [%u, +%u)", blk, i, plans[i].first_block, kvc_gpu_plan_blocks(&plans[i]));
    hits_dummy = (unsigned char*)calloc(dbytes[i], 1);
    run_share(&plans[i], blk - plans[i].first_block, darenas[i], hits_dummy);
    free(hits_dummy);
  }
  for (int32_t i = 0; i < n; i++) {
    CHECK(memcmp(darenas[i], expects[i], dbytes[i]) == 0, "batched copy %d differs", i);
    free(darenas[i]);
    free(expects[i]);
    free((char*)plans[i].src - ls[i].src_off);
  }
  printf("batch: %d copies, %u blocks, each block found its copy\n", n, blocks);
}

/* ---- copy_rows_batch's planning --------------------------------------------------- */

/* A job of `count` rows [1, heads, 1, dim] of 2 bytes between two compact [rows, heads, dim] buffers. */
static kvc_copy_rows_job rows_job(void* dst, const void* src, const int64_t* dr, const int64_t* sr, int64_t count,
                                  int64_t heads, int64_t dim) {
  kvc_copy_rows_job j;
  memset(&j, 0, sizeof j);
  j.dst = dst;
  j.src = src;
  j.dst_rows = dr;
  j.src_rows = sr;
  j.count = count;
  j.elem_size = 2;
  const int64_t st[4] = {heads * dim, dim, heads * dim, 1}, shape[4] = {1, heads, 1, dim};
  memcpy(j.dst_strides, st, sizeof st);
  memcpy(j.src_strides, st, sizeof st);
  memcpy(j.row_shape, shape, sizeof shape);
  return j;
}

/*
 * What the planner makes of a pool's step write: index arrays shared by
 * pointer are stored once, pairs share blocks when a pair's plan is one
 * block (and only then), the blocks of the jobs follow one another, empty
 * jobs are left out, and what cannot be planned is refused.
 */
static void test_rows_batch_plans(void) {
  static uint16_t store[4][64 * 8 * 128] __attribute__((aligned(256)));
  static uint16_t step[64 * 8 * 128] __attribute__((aligned(256)));
  int64_t slots[64], tokens[64], other[64];
  for (int i = 0; i < 64; i++) {
    slots[i] = 63 - i;
    tokens[i] = i;
    other[i] = i;
  }
  /* K and V of two layers sharing the slot mapping, a job with its own equal copy, an empty job. */
  kvc_copy_rows_job jobs[6] = {
      rows_job(store[0], step, slots, tokens, 64, 8, 128), rows_job(store[1], step, slots, tokens, 64, 8, 128),
      rows_job(store[2], step, slots, tokens, 64, 8, 128), rows_job(store[3], step, slots, other, 64, 8, 128),
      rows_job(store[0], step, NULL, NULL, 0, 8, 128),     rows_job(store[1], step, slots, tokens, 1, 8, 0)};
  kvc_gpu_rows_batch b;
  CHECK(kvc_gpu_plan_rows_batch(&b, jobs, 6) == 0, "a step write is planned");
  CHECK(b.njobs == 4, "empty jobs are left out: %d jobs", (int)b.njobs);
  CHECK(b.nindex == 3 * 64, "shared arrays stored once: %u index entries for 3 distinct arrays", b.nindex);
  CHECK(b.bytes == 4 * sizeof(kvc_gpu_rows_job) + 3 * 64 * sizeof(int32_t) && (void*)b.jobs == b.area &&
            (const int32_t*)b.index == kvc_gpu_rows_batch_index(b.jobs, b.njobs),
        "layout: the jobs, then the index array");
  uint32_t first = 0;
  for (int32_t i = 0; i < b.njobs; i++) {
    const kvc_gpu_rows_job* j = &b.jobs[i];
    /* 8 x 128 bf16 = 2 KiB a row: 128 units of 16 bytes, 16 pairs to a block. */
    CHECK(j->rows.plan.unit == 16 && j->pairs_per_block == 16 && j->blocks_per_pair == 1 &&
              kvc_gpu_rows_job_blocks(j) == 4 && j->first_block == first,
          "job %d: unit %d, %u pairs per block, first block %u", (int)i, j->rows.plan.unit, j->pairs_per_block,
          j->first_block);
    first += kvc_gpu_rows_job_blocks(j);
    for (int32_t k = 0; k < 64; k++)
      CHECK(b.index[j->dst_index + (uint32_t)k] == 63 - k && b.index[j->src_index + (uint32_t)k] == k,
            "job %d pair %d", (int)i, (int)k);
  }
  CHECK(b.blocks == first && b.blocks == 16, "%u blocks", b.blocks);
  for (uint32_t blk = 0; blk < b.blocks; blk++) {
    int32_t i = kvc_gpu_rows_batch_find(b.jobs, b.njobs, blk);
    int32_t pair0, npairs;
    uint32_t plan_block;
    kvc_gpu_rows_job_share(&b.jobs[i], blk - b.jobs[i].first_block, &pair0, &npairs, &plan_block);
    CHECK(i == (int32_t)(blk / 4) && pair0 == (int32_t)(blk % 4) * 16 && npairs == 16 && plan_block == 0,
          "block %u: job %d, pairs %d + %d", blk, (int)i, (int)pair0, (int)npairs);
  }
  kvc_gpu_rows_batch_free(&b);

  /* Rows of 64 KiB: a pair's plan takes 2 blocks; a pair of 17 KiB rows (1088 units) one block alone. */
  kvc_copy_rows_job wide = rows_job(store[0], step, slots, tokens, 3, 2, 16384);
  CHECK(kvc_gpu_plan_rows_batch(&b, &wide, 1) == 0 && b.jobs[0].pairs_per_block == 1 &&
            b.jobs[0].blocks_per_pair == 2 && b.blocks == 6,
        "wide rows: %u blocks per pair, %u blocks", b.njobs ? b.jobs[0].blocks_per_pair : 0, b.blocks);
  kvc_gpu_rows_batch_free(&b);
  wide = rows_job(store[0], step, slots, tokens, 3, 1, 8704);
  CHECK(kvc_gpu_plan_rows_batch(&b, &wide, 1) == 0 && b.jobs[0].pairs_per_block == 1 &&
            b.jobs[0].blocks_per_pair == 1 && b.blocks == 3,
        "rows of 1088 units: one block each");
  kvc_gpu_rows_batch_free(&b);

  /* Nothing to copy: no area, no blocks. */
  CHECK(kvc_gpu_plan_rows_batch(&b, NULL, 0) == 0 && b.njobs == 0 && !b.area && b.blocks == 0, "no jobs");
  CHECK(kvc_gpu_plan_rows_batch(&b, &jobs[4], 2) == 0 && b.njobs == 0 && !b.area, "only empty jobs");

  /* Refusals, each leaving *out empty. */
  int64_t bad[2] = {0, -1}, big[2] = {0, (int64_t)INT32_MAX + 1};
  kvc_copy_rows_job r = rows_job(store[0], step, bad, tokens, 2, 8, 128);
  CHECK(kvc_gpu_plan_rows_batch(&b, &r, 1) == -1 && !b.area && b.njobs == 0, "a negative row index");
  r.dst_rows = big;
  CHECK(kvc_gpu_plan_rows_batch(&b, &r, 1) == -1, "a row index past int32");
  r.dst_rows = slots;
  r.src_rows = NULL;
  CHECK(kvc_gpu_plan_rows_batch(&b, &r, 1) == -1, "NULL arrays for rows to copy");
  r.src_rows = tokens;
  r.count = -1;
  CHECK(kvc_gpu_plan_rows_batch(&b, &r, 1) == -1, "a negative count");
  r.count = 2;
  r.row_shape[1] = -1;
  CHECK(kvc_gpu_plan_rows_batch(&b, &r, 1) == -1, "a negative row extent");
  r.row_shape[1] = 8;
  r.elem_size = 0;
  CHECK(kvc_gpu_plan_rows_batch(&b, &r, 1) == -1, "elements of 0 bytes");
  CHECK(kvc_gpu_plan_rows_batch(&b, jobs, -1) == -1 && kvc_gpu_plan_rows_batch(&b, NULL, 1) == -1,
        "a negative job count, NULL jobs");
  printf("rows batch: shared index arrays stored once, 16 pairs per block for 2 KiB rows, refusals\n");
}

/*
 * A batch past 2^32 blocks is refused, not wrapped: 1,048,577 pairs of rows of 4,096 blocks each are 2^32 + 4,096
 * blocks, which 32-bit arithmetic planned as 4,096. Nothing is dereferenced: the rows are addresses only.
 */
static void test_rows_batch_block_count(void) {
  const int64_t pairs = (INT64_C(1) << 20) + 1, dim = (int64_t)KVC_GPU_TILE_UNITS * 4096 * 8; /* 8 bf16 a unit */
  int64_t* rows = (int64_t*)calloc((size_t)pairs, sizeof(int64_t));
  CHECK(rows != NULL, "no memory for %lld row indices", (long long)pairs);
  if (!rows) return;
  kvc_copy_rows_job j = rows_job((void*)(uintptr_t)0x10000000, (const void*)(uintptr_t)0x20000000, rows, rows, pairs,
                                 1, dim);
  kvc_gpu_rows_batch b;
  int rc = kvc_gpu_plan_rows_batch(&b, &j, 1);
  CHECK(rc == -1 && !b.area, "%lld pairs of 4096 blocks: planned (rc %d) as %u blocks", (long long)pairs, rc,
        b.blocks);
  if (!rc) kvc_gpu_rows_batch_free(&b);
  j.count = pairs - 1; /* 2^32 blocks: still one too many */
  rc = kvc_gpu_plan_rows_batch(&b, &j, 1);
  CHECK(rc == -1, "2^20 pairs of 4096 blocks: planned as %u blocks", b.blocks);
  if (!rc) kvc_gpu_rows_batch_free(&b);
  j.count = 1024; /* 2^22 blocks: fine */
  rc = kvc_gpu_plan_rows_batch(&b, &j, 1);
  CHECK(rc == 0 && b.blocks == 1024u * 4096u && b.jobs[0].blocks_per_pair == 4096, "1024 pairs: %u blocks",
        rc ? 0 : b.blocks);
  if (!rc) kvc_gpu_rows_batch_free(&b);
  free(rows);
  printf("rows batch: 2^32 + 4096 blocks refused, not wrapped\n");
}

/*
 * The move kernel orders each (b, h) plane's reads before its writes and nothing across planes: a seq shift whose
 * rows land in the next plane must not take that route. Planes 4 rows apart, shifted by 1 row: plane 0's last row
 * lands on plane 1's first. Planes of a store with room for the shift keep the move.
 */
static void test_cross_plane_shifts(void) {
  static uint16_t buf[2 * 2 * 16 * 8 + 64] __attribute__((aligned(64)));
  kvc_gpu_copy move;
  int64_t shift = 0;
  const int64_t tight[4] = {2 * 4 * 8, 4 * 8, 8, 1}, shape[4] = {2, 2, 4, 8};
  kvc_gpu_route r = kvc_gpu_copy_route(buf + 8, tight, buf, tight, shape, 2, &move, &shift);
  CHECK(r == KVC_GPU_ROUTE_SCRATCH, "a shift into the next plane takes route %d (want scratch %d)", (int)r,
        (int)KVC_GPU_ROUTE_SCRATCH);
  r = kvc_gpu_copy_route(buf, tight, buf + 8, tight, shape, 2, &move, &shift);
  CHECK(r == KVC_GPU_ROUTE_SCRATCH, "a shift into the previous plane takes route %d", (int)r);
  const int64_t roomy[4] = {2 * 16 * 8, 16 * 8, 8, 1};
  r = kvc_gpu_copy_route(buf + 3 * 8, roomy, buf, roomy, shape, 2, &move, &shift);
  CHECK(r == KVC_GPU_ROUTE_MOVE && shift == 3, "a shift inside a plane of 16 rows takes route %d, shift %lld", (int)r,
        (long long)shift);
  const int64_t edge[4] = {2 * 7 * 8, 7 * 8, 8, 1}; /* 4 rows + a shift of 3: exactly a plane */
  r = kvc_gpu_copy_route(buf + 3 * 8, edge, buf, edge, shape, 2, &move, &shift);
  CHECK(r == KVC_GPU_ROUTE_MOVE, "a shift that just fits its plane takes route %d", (int)r);
  printf("seq moves: shifts across planes go through scratch\n");
}

int main(void) {
  assert(sizeof(kvc_gpu_copy) == 112);
  assert(sizeof(kvc_gpu_rows_job) == 152);
  test_decode_write_plan();
  test_refusals_and_empties();
  test_overlap_detection();
  test_random_copies_and_fills();
  test_seq_moves();
  test_batch_lookup();
  test_rows_batch_plans();
  test_rows_batch_block_count();
  test_cross_plane_shifts();
  return plan_finish("test_gpu_plan");
}
