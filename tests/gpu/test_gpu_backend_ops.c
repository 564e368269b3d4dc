/*
 * tests/gpu/test_gpu_backend_ops.c: every op of the device backend's table
 * (core/backend.h) against the CPU backend, bit-exact (the optional ones of
 * sink layers included: every device backend has them).
 *
 * copy_rows_batch (version 6) is required of every device backend here.
 *
 * Each case keeps two copies of the same random bytes: one in buffers of the
 * device backend (device memory or its host tier), one in buffers of the
 * CPU backend. It runs the same op on both and reads the device buffers back
 * whole, so bytes an op must not touch are checked as well as the ones it
 * writes. Shapes, strides, element sizes (1, 2, 4, 8) and offsets are random
 * from a fixed seed. The device backend is the one the core's registry
 * loads (kvci_backend_for), so this also exercises the plugin loading.
 */
#include "gpu_test_util.h"
#include "half.h"
#include "internal.h"
#include "rows_batch_cases.h"

static const kvc_backend* dev;
static const kvc_backend* cpu;
static kvc_exec cpu_place;
static kvc_exec place0; /* device 0, on a stream of the test */
static void* stream_a;
static void* stream_b;

/* ------------------------------------------------------------ buffers */

/* The same bytes in a buffer of the device backend (d) and one of the CPU backend (h). */
typedef struct pair {
  unsigned char* d;
  unsigned char* h;
  size_t bytes;
  int host_tier;
  const kvc_exec* place;
} pair;

static int pair_make(pair* p, const kvc_exec* place, size_t bytes, int host_tier) {
  memset(p, 0, sizeof *p);
  p->bytes = bytes ? bytes : 1;
  p->host_tier = host_tier;
  p->place = place;
  p->d = (unsigned char*)(host_tier ? dev->host_alloc_zeroed(dev->ctx, place, p->bytes)
                                    : dev->alloc_zeroed(dev->ctx, place, p->bytes));
  p->h = (unsigned char*)cpu->alloc_zeroed(cpu->ctx, &cpu_place, p->bytes);
  if (!CHECK(p->d != NULL) || !CHECK(p->h != NULL)) return 0;
  /* Zeroed, as the contract says, before the random bytes go in. */
  unsigned char* back = (unsigned char*)malloc(p->bytes);
  int zero = back && !drt_download(place->device_id, back, p->d, p->bytes);
  for (size_t i = 0; zero && i < p->bytes; i++) zero = back[i] == 0;
  free(back);
  CHECK(zero);
  gt_fill_random(p->h, p->bytes);
  return CHECK(drt_upload(place->device_id, p->d, p->h, p->bytes, place->stream) == 0);
}

static void pair_free(pair* p) {
  if (p->d) {
    if (p->host_tier)
      dev->host_free(dev->ctx, p->place, p->d);
    else
      dev->free(dev->ctx, p->place, p->d);
  }
  if (p->h) cpu->free(cpu->ctx, &cpu_place, p->h);
  memset(p, 0, sizeof *p);
}

/* Two host float arrays of `bytes` each and a device pair of pair_bytes on place0 (not on the host tier); 0, with
 * all of them freed, when one could not be made. */
static int floats_and_pair(float** a, float** b, size_t bytes, pair* p, size_t pair_bytes) {
  *a = (float*)malloc(bytes);
  *b = (float*)malloc(bytes);
  memset(p, 0, sizeof *p);
  if (CHECK(*a && *b) && pair_make(p, &place0, pair_bytes, 0)) return 1;
  free(*a);
  free(*b);
  pair_free(p);
  return 0;
}

/* The device buffer read back equals the CPU one, every byte. */
static int pair_equal_impl(const pair* p, const char* file, int line, const char* what) {
  unsigned char* back = (unsigned char*)malloc(p->bytes);
  int ok = back && !drt_download(p->place->device_id, back, p->d, p->bytes);
  size_t at = 0;
  if (ok) {
    while (at < p->bytes && back[at] == p->h[at]) at++;
    ok = at == p->bytes;
  }
  tu_checks_total++;
  if (!ok) {
    tu_failures_total++;
    if (!back)
      fprintf(TU_LOG, "%s:%d: FAILED in %s: %s: out of memory\n", file, line, tu_current_test, what);
    else if (at >= p->bytes)
      fprintf(TU_LOG, "%s:%d: FAILED in %s: %s: reading the device buffer back failed: %s\n", file, line,
              tu_current_test, what, drt_error());
    else
      fprintf(TU_LOG,
              "%s:%d: FAILED in %s: %s: device and CPU differ first at byte %zu of %zu (device 0x%02x, CPU 0x%02x)\n",
              file, line, tu_current_test, what, at, p->bytes, back[at], p->h[at]);
  }
  free(back);
  return ok;
}
#define CHECK_PAIR(p, what) pair_equal_impl((p), __FILE__, __LINE__, (what))

/* ------------------------------------------------------------- layouts */

static const size_t elem_sizes[4] = {1, 2, 4, 8};

static size_t random_elem(void) { return elem_sizes[gt_range(0, 3)]; }

/*
 * Random strides for `shape`: a random order of the dims in memory (dim 3
 * innermost unless `any_order`), a little padding after each, so copies are
 * strided, transposing or compact. Returns the elements the region spans.
 */
static int64_t random_layout(const int64_t shape[4], int64_t st[4], int any_order) {
  int order[4] = {0, 1, 2, 3};
  int shuffled = any_order ? 4 : 3;
  for (int i = shuffled - 1; i > 0; i--) {
    int j = (int)gt_range(0, i);
    int t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  int64_t run = 1;
  for (int k = 3; k >= 0; k--) {
    int dim = order[k];
    st[dim] = run;
    int64_t extent = shape[dim] > 0 ? shape[dim] : 1;
    run = run * extent + (gt_range(0, 3) == 0 ? gt_range(1, 3) : 0);
  }
  int64_t last = 0;
  for (int i = 0; i < 4; i++) last += ((shape[i] > 0 ? shape[i] : 1) - 1) * st[i];
  return last + 1;
}

/*
 * Now and then one dim of a layout read backwards (a negative stride, as an
 * input tensor may have): returns how many elements element [0, 0, 0, 0]
 * then sits after the start of the region.
 */
static int64_t maybe_reverse(const int64_t shape[4], int64_t st[4]) {
  if (gt_range(0, 4) != 0) return 0;
  int dim = (int)gt_range(0, 3);
  int64_t origin = ((shape[dim] > 0 ? shape[dim] : 1) - 1) * st[dim];
  st[dim] = -st[dim];
  return origin;
}

static void random_shape(int64_t shape[4], int64_t max_seq, int64_t max_dim) {
  shape[0] = gt_range(1, 3);
  shape[1] = gt_range(1, 4);
  shape[2] = gt_range(1, max_seq);
  shape[3] = gt_range(1, max_dim);
  if (gt_range(0, 15) == 0) shape[gt_range(0, 3)] = 0; /* an empty region now and then */
}

/* ----------------------------------------------------------- the table */

static void test_table(void) {
  CHECK_EQ_I64(dev->api_version, KVC_BACKEND_API_VERSION);
  CHECK(dev->struct_size >= sizeof(kvc_backend));
  CHECK_EQ_I64(dev->device_type, drt_device_type());
  CHECK_EQ_I64(dev->device_count(dev->ctx), drt_device_count());
  CHECK(dev != cpu);
  CHECK(dev->exec_open && dev->exec_close && dev->exec_set_stream && dev->alloc_zeroed && dev->free &&
        dev->copy_4d && dev->fill_zero_4d && dev->copy_rows && dev->host_alloc_zeroed && dev->host_free &&
        dev->copy_tier_4d && dev->tier_wait && dev->copy_4d_batch);
  /* Version 4: optional, both or neither; every device backend here has them (GPU kernels, emulated: their arithmetic). */
  CHECK(dev->rerotate_keys_4d && dev->read_f32_4d);
  CHECK(cpu->rerotate_keys_4d && cpu->read_f32_4d);
}

static void test_alloc_zeroed(void) {
  static const size_t sizes[] = {1, 3, 64, 4093, 1 << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (int host = 0; host < 2; host++) {
      pair p;
      pair_make(&p, &place0, sizes[i], host); /* checks the zeros */
      CHECK_PAIR(&p, "random bytes round trip");
      pair_free(&p);
    }
}

/* --------------------------------------------------------------- copies */

static void one_copy_4d(const kvc_exec* place, const int64_t shape[4], size_t elem, int src_host, int dst_host,
                        int any_order) {
  int64_t ss[4], ds[4];
  int64_t sspan = random_layout(shape, ss, any_order), dspan = random_layout(shape, ds, any_order);
  int64_t soff = gt_range(0, 5), doff = gt_range(0, 5);
  soff += maybe_reverse(shape, ss); /* inputs may be read backwards; the offsets point at element 0 */
  doff += maybe_reverse(shape, ds);
  pair src = {0}, dst = {0};
  if (!pair_make(&src, place, (size_t)(sspan + soff) * elem, src_host) ||
      !pair_make(&dst, place, (size_t)(dspan + doff) * elem, dst_host)) {
    pair_free(&src);
    pair_free(&dst);
    return;
  }
  CHECK_EQ_I64(dev->copy_4d(dev->ctx, place, dst.d + doff * (int64_t)elem, ds, src.d + soff * (int64_t)elem, ss,
                            shape, elem), 0);
  CHECK_EQ_I64(cpu->copy_4d(cpu->ctx, &cpu_place, dst.h + doff * (int64_t)elem, ds, src.h + soff * (int64_t)elem,
                            ss, shape, elem), 0);
  if (!CHECK_PAIR(&dst, "copy_4d destination"))
    fprintf(stderr, "  shape {%lld, %lld, %lld, %lld}, elem %zu, dst strides {%lld, %lld, %lld, %lld}, src strides "
                    "{%lld, %lld, %lld, %lld}, src %s, dst %s\n",
            (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3], elem,
            (long long)ds[0], (long long)ds[1], (long long)ds[2], (long long)ds[3], (long long)ss[0], (long long)ss[1],
            (long long)ss[2], (long long)ss[3], src_host ? "host tier" : "device", dst_host ? "host tier" : "device");
  CHECK_PAIR(&src, "copy_4d source (unchanged)");
  pair_free(&src);
  pair_free(&dst);
}

static void test_copy_4d_random(void) {
  for (int it = 0; it < 160; it++) {
    int64_t shape[4];
    random_shape(shape, 40, 70);
    /* Every entry accepts host-tier pointers too: one in four buffers is in the host tier. */
    one_copy_4d(&place0, shape, random_elem(), gt_range(0, 3) == 0, gt_range(0, 3) == 0, gt_range(0, 2) == 0);
  }
}

/* Shapes of a real model's layers: enough blocks to fill a grid, and a transposing copy of a conv input. */
static void test_copy_4d_large(void) {
  const int64_t prefill[4] = {2, 8, 257, 128};
  int64_t ps[4] = {8 * 300 * 128, 300 * 128, 128, 1}, ss[4] = {8 * 257 * 128, 257 * 128, 128, 1};
  pair src = {0}, dst = {0};
  if (pair_make(&src, &place0, (size_t)(2 * 8 * 257 * 128) * 2, 0) &&
      pair_make(&dst, &place0, (size_t)(2 * 8 * 300 * 128) * 2, 0)) {
    CHECK_EQ_I64(dev->copy_4d(dev->ctx, &place0, dst.d + 10 * 128 * 2, ps, src.d, ss, prefill, 2), 0);
    CHECK_EQ_I64(cpu->copy_4d(cpu->ctx, &cpu_place, dst.h + 10 * 128 * 2, ps, src.h, ss, prefill, 2), 0);
    CHECK_PAIR(&dst, "prefill of 257 tokens into a store of 300 slots");
  }
  pair_free(&src);
  pair_free(&dst);
  /* [batch, channels, time] time-contiguous input into a [batch, time, channels] buffer: element-strided. */
  const int64_t conv[4] = {2, 1, 1536, 4};
  int64_t cs[4] = {1536 * 4, 0, 4, 1}, cd[4] = {16 * 1536, 0, 1, 1536};
  for (size_t e = 0; e < 4; e++) {
    size_t elem = elem_sizes[e];
    if (pair_make(&src, &place0, (size_t)(2 * 1536 * 4) * elem, 0) &&
        pair_make(&dst, &place0, (size_t)(2 * 16 * 1536) * elem, 0)) {
      CHECK_EQ_I64(dev->copy_4d(dev->ctx, &place0, dst.d, cd, src.d, cs, conv, elem), 0);
      CHECK_EQ_I64(cpu->copy_4d(cpu->ctx, &cpu_place, dst.h, cd, src.h, cs, conv, elem), 0);
      CHECK_PAIR(&dst, "transposing copy of a conv input");
    }
    pair_free(&src);
    pair_free(&dst);
  }
}

/*
 * Moves along the seq axis inside one buffer with one set of strides: the
 * window compaction. Overlapping both ways (towards slot 0 and away from
 * it), by one slot and by nearly the whole length, padded or not.
 */
static void test_copy_4d_overlapping_moves(void) {
  for (int it = 0; it < 120; it++) {
    size_t elem = elem_sizes[it % 4];
    int64_t b = gt_range(1, 3), h = gt_range(1, 4), cap = gt_range(4, 90), d = gt_range(1, 40);
    int64_t pad = gt_range(0, 1) ? 0 : gt_range(1, 3); /* seq stride larger than dim */
    int64_t st[4] = {h * cap * (d + pad), cap * (d + pad), d + pad, 1};
    /* Overlapping whenever len > shift; both fit in cap slots. */
    int64_t shift = (it % 3 == 0) ? 1 : gt_range(1, (cap - 1) / 2);
    int64_t len = gt_range(shift + 1, cap - shift);
    int64_t low = gt_range(0, cap - len - shift);
    int64_t from = it % 2 ? low + shift : low; /* odd: towards slot 0, as compaction moves the kept tail */
    int64_t to = it % 2 ? low : low + shift;
    int64_t shape[4] = {b, h, len, d};
    pair buf = {0};
    if (pair_make(&buf, &place0, (size_t)(b * st[0]) * elem, gt_range(0, 4) == 0)) {
      size_t so = (size_t)(from * st[2]) * elem, dof = (size_t)(to * st[2]) * elem;
      CHECK_EQ_I64(dev->copy_4d(dev->ctx, &place0, buf.d + dof, st, buf.d + so, st, shape, elem), 0);
      CHECK_EQ_I64(cpu->copy_4d(cpu->ctx, &cpu_place, buf.h + dof, st, buf.h + so, st, shape, elem), 0);
      if (!CHECK_PAIR(&buf, "overlapping seq move"))
        fprintf(stderr, "  shape {%lld, %lld, %lld, %lld} elem %zu seq stride %lld: slots [%lld, %lld) -> %lld\n",
                (long long)b, (long long)h, (long long)len, (long long)d, elem, (long long)st[2], (long long)from,
                (long long)(from + len), (long long)to);
    }
    pair_free(&buf);
  }
}

static void test_fill_zero(void) {
  for (int it = 0; it < 80; it++) {
    int64_t shape[4], st[4];
    random_shape(shape, 40, 70);
    size_t elem = random_elem();
    int64_t span = random_layout(shape, st, gt_range(0, 2) == 0), off = gt_range(0, 5);
    off += maybe_reverse(shape, st);
    pair buf = {0};
    if (pair_make(&buf, &place0, (size_t)(span + off) * elem, gt_range(0, 3) == 0)) {
      CHECK_EQ_I64(dev->fill_zero_4d(dev->ctx, &place0, buf.d + off * (int64_t)elem, st, shape, elem), 0);
      CHECK_EQ_I64(cpu->fill_zero_4d(cpu->ctx, &cpu_place, buf.h + off * (int64_t)elem, st, shape, elem), 0);
      CHECK_PAIR(&buf, "fill_zero_4d");
    }
    pair_free(&buf);
  }
}

/* ------------------------------------------------------------ row copies */

static void shuffle(int64_t* v, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = gt_range(0, i), t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/*
 * Row gathers: reorder, select and repeat-interleave are copy_rows with
 * source rows repeated; in place (one buffer) the written rows are never
 * read. The index arrays are scribbled over right after the call: a device
 * backend must have read them by then.
 */
static void test_copy_rows(void) {
  for (int it = 0; it < 120; it++) {
    int in_place = it % 3 == 0;
    size_t elem = random_elem();
    int64_t bs = gt_range(1, 6), bd = in_place ? bs : gt_range(1, 6);
    int64_t h = gt_range(1, 4), s = gt_range(1, 30), d = gt_range(1, 50);
    if (gt_range(0, 15) == 0) s = 0;
    int64_t src_shape[4] = {bs, h, s, d}, dst_shape[4] = {bd, h, s, d};
    int64_t ss[4], ds[4];
    int64_t sspan = random_layout(src_shape, ss, gt_range(0, 3) == 0);
    int64_t dspan = in_place ? sspan : random_layout(dst_shape, ds, gt_range(0, 3) == 0);
    if (in_place) memcpy(ds, ss, sizeof ds);
    int64_t rows[12], dst_rows[12], src_rows[12], count;
    for (int64_t i = 0; i < bd; i++) rows[i] = i;
    shuffle(rows, bd);
    if (in_place) {
      /* dst rows from the front of a shuffle, src rows from the rest, repeats allowed */
      if (bs < 2) continue;
      count = gt_range(0, bs / 2);
      int64_t rest = bs - count;
      for (int64_t i = 0; i < count; i++) {
        dst_rows[i] = rows[i];
        src_rows[i] = rows[count + gt_range(0, rest - 1)];
      }
    } else {
      count = gt_range(0, bd);
      for (int64_t i = 0; i < count; i++) {
        dst_rows[i] = rows[i];
        src_rows[i] = gt_range(0, bs - 1);
      }
    }
    const int64_t row_shape[4] = {1, h, s, d};
    pair src = {0}, dst = {0};
    int ok = pair_make(&src, &place0, (size_t)sspan * elem, gt_range(0, 4) == 0);
    if (ok && !in_place) ok = pair_make(&dst, &place0, (size_t)dspan * elem, gt_range(0, 4) == 0);
    pair* out = in_place ? &src : &dst;
    if (ok) {
      int64_t dr[12], sr[12];
      memcpy(dr, dst_rows, sizeof dr);
      memcpy(sr, src_rows, sizeof sr);
      CHECK_EQ_I64(dev->copy_rows(dev->ctx, &place0, out->d, ds, dr, src.d, ss, sr, count, row_shape, elem), 0);
      for (int i = 0; i < 12; i++) dr[i] = sr[i] = -1000000; /* read before the call returned, or never */
      CHECK_EQ_I64(cpu->copy_rows(cpu->ctx, &cpu_place, out->h, ds, dst_rows, src.h, ss, src_rows, count, row_shape,
                                  elem), 0);
      CHECK_PAIR(out, in_place ? "copy_rows in place" : "copy_rows");
      if (!in_place) CHECK_PAIR(&src, "copy_rows source (unchanged)");
    }
    pair_free(&src);
    pair_free(&dst);
  }
}

/* The rows of a kind's row buffers (quantized groups, recurrent states): bytes, one row of row_bytes each. */
static void test_copy_rows_bytes(void) {
  int64_t row_bytes = 4099, batch = 5;
  int64_t st[4] = {row_bytes, row_bytes, row_bytes, 1}, shape[4] = {1, 1, 1, row_bytes};
  pair src = {0}, dst = {0};
  if (pair_make(&src, &place0, (size_t)(row_bytes * batch), 0) &&
      pair_make(&dst, &place0, (size_t)(row_bytes * 2 * batch), 0)) {
    int64_t dr[10], sr[10];
    for (int i = 0; i < 10; i++) {
      dr[i] = i;
      sr[i] = i / 2; /* repeat-interleave by 2 */
    }
    CHECK_EQ_I64(dev->copy_rows(dev->ctx, &place0, dst.d, st, dr, src.d, st, sr, 10, shape, 1), 0);
    CHECK_EQ_I64(cpu->copy_rows(cpu->ctx, &cpu_place, dst.h, st, dr, src.h, st, sr, 10, shape, 1), 0);
    CHECK_PAIR(&dst, "byte rows repeated");
  }
  pair_free(&src);
  pair_free(&dst);
}

/* -------------------------------------------------------- row copy batches */

/*
 * One copy_rows_batch (backend API 6: the pool's step write) on the device
 * and on the CPU backend, every buffer compared whole. The cases
 * (unit/rows_batch_cases.h) are step writes into NHD or HND storage with
 * sources in any layout; a few buffers sit in the host tier. The jobs and
 * index arrays are scribbled over right after the device call: the backend
 * must have read them by then (a GPU backend packs them into the launch or
 * stages them). Returns the rows the batch copied.
 */
static int64_t rows_batch_case(const rbc_shape* shape) {
  rbc_case c;
  if (!CHECK(rbc_make(&c, shape))) return 0;
  pair* bufs = (pair*)calloc((size_t)c.nbufs + 1, sizeof(pair));
  unsigned char** d = (unsigned char**)calloc((size_t)c.nbufs + 1, sizeof(unsigned char*));
  unsigned char** h = (unsigned char**)calloc((size_t)c.nbufs + 1, sizeof(unsigned char*));
  kvc_copy_rows_job* dj = (kvc_copy_rows_job*)calloc((size_t)c.njobs + 1, sizeof(kvc_copy_rows_job));
  kvc_copy_rows_job* hj = (kvc_copy_rows_job*)calloc((size_t)c.njobs + 1, sizeof(kvc_copy_rows_job));
  int ok = CHECK(bufs && d && h && dj && hj);
  for (int32_t b = 0; ok && b < c.nbufs; b++) {
    ok = pair_make(&bufs[b], &place0, c.buf_bytes[b], gt_range(0, 9) == 0);
    d[b] = bufs[b].d;
    h[b] = bufs[b].h;
  }
  if (ok) {
    rbc_bind(&c, d, dj);
    rbc_bind(&c, h, hj);
    CHECK_EQ_I64(cpu->copy_rows_batch(cpu->ctx, &cpu_place, hj, c.njobs), 0);
    CHECK_EQ_I64(dev->copy_rows_batch(dev->ctx, &place0, dj, c.njobs), 0);
    memset(dj, 0xA5, sizeof(kvc_copy_rows_job) * (size_t)c.njobs);
    for (int32_t a = 0; a < c.narrays; a++) memset(c.arrays[a], 0xA5, sizeof(int64_t)); /* the first entries */
    for (int32_t b = 0; b < c.nbufs; b++) {
      char what[96];
      snprintf(what, sizeof what, "buffer %d of %d of a %s step of %lld tokens, %zu-byte elements", (int)b,
               (int)c.nbufs, c.hnd ? "HND" : "NHD", (long long)c.tokens, c.elem);
      CHECK_PAIR(&bufs[b], what);
    }
  }
  for (int32_t b = 0; bufs && b < c.nbufs; b++) pair_free(&bufs[b]);
  const int64_t rows = c.rows;
  free(bufs);
  free(d);
  free(h);
  free(dj);
  free(hj);
  rbc_free(&c);
  return rows;
}

static void test_copy_rows_batch(void) {
  CHECK(dev->copy_rows_batch != NULL); /* every device backend here has it (version 6) */
  if (!dev->copy_rows_batch) return;
  CHECK_EQ_I64(dev->copy_rows_batch(dev->ctx, &place0, NULL, 0), 0);
  static const size_t elems[4] = {1, 2, 4, 8};
  int64_t rows = 0;
  /* Small steps: they fit one launch's parameters on CUDA. */
  for (int it = 0; it < 48; it++) {
    const rbc_shape s = {(int32_t)gt_range(1, 6), 0, 40, 4, 40, 4, elems[it % 4]};
    rows += rows_batch_case(&s);
  }
  /* A decode step of a large model (2 x 80 layers, 256 sequences) and a prefill of thousands of tokens: batches
     too large for the parameters, staged through device memory on a GPU. */
  const rbc_shape decode = {80, 256, 256, 2, 16, 2, 2};
  const rbc_shape prefill = {80, 2048, 3000, 2, 6, 3, 0};
  rows += rows_batch_case(&decode);
  rows += rows_batch_case(&prefill);
  CHECK(rows > 2 * 80 * 2048);
}

/* --------------------------------------------------------- batched copies */

/* One batch whose copies have random shapes, sizes and layouts, each into a buffer of its own. */
static void batch_of_buffers(int32_t count) {
  pair* src = (pair*)calloc((size_t)count + 1, sizeof(pair));
  pair* dst = (pair*)calloc((size_t)count + 1, sizeof(pair));
  kvc_copy_4d* dc = (kvc_copy_4d*)calloc((size_t)count + 1, sizeof(kvc_copy_4d));
  kvc_copy_4d* hc = (kvc_copy_4d*)calloc((size_t)count + 1, sizeof(kvc_copy_4d));
  int ok = src && dst && dc && hc;
  for (int32_t i = 0; ok && i < count; i++) {
    kvc_copy_4d c;
    memset(&c, 0, sizeof c);
    random_shape(c.shape, 24, 48);
    c.elem_size = random_elem();
    int any = gt_range(0, 3) == 0;
    int64_t sspan = random_layout(c.shape, c.src_strides, any), dspan = random_layout(c.shape, c.dst_strides, any);
    size_t so = (size_t)maybe_reverse(c.shape, c.src_strides) * c.elem_size;
    size_t dof = (size_t)maybe_reverse(c.shape, c.dst_strides) * c.elem_size;
    ok = pair_make(&src[i], &place0, (size_t)sspan * c.elem_size, gt_range(0, 5) == 0) &&
         pair_make(&dst[i], &place0, (size_t)dspan * c.elem_size, gt_range(0, 5) == 0);
    dc[i] = hc[i] = c;
    dc[i].dst = dst[i].d + dof;
    dc[i].src = src[i].d + so;
    hc[i].dst = dst[i].h + dof;
    hc[i].src = src[i].h + so;
  }
  if (CHECK(ok)) {
    CHECK_EQ_I64(dev->copy_4d_batch(dev->ctx, &place0, dc, count), 0);
    memset(dc, 0xA5, sizeof(kvc_copy_4d) * (size_t)count); /* descriptors are read before the call returns */
    CHECK_EQ_I64(cpu->copy_4d_batch(cpu->ctx, &cpu_place, hc, count), 0);
    for (int32_t i = 0; i < count; i++) {
      char what[64];
      snprintf(what, sizeof what, "copy %d of a batch of %d", (int)i, (int)count);
      CHECK_PAIR(&dst[i], what);
    }
  }
  for (int32_t i = 0; src && dst && i < count; i++) {
    pair_free(&src[i]);
    pair_free(&dst[i]);
  }
  free(src);
  free(dst);
  free(dc);
  free(hc);
}

/*
 * One decode step of update_all: `layers` layers, each writing `n` new
 * tokens of K and of V into its own store at its own slot, all from one
 * input buffer per tensor. Several copies write one buffer (disjoint
 * slots) and read one buffer (possibly the same bytes).
 */
static void batch_of_layers(int32_t layers, int64_t b, int64_t h, int64_t n, int64_t d, size_t elem) {
  int64_t cap = n * layers + 3;
  int64_t st[4] = {h * cap * d, cap * d, d, 1}, in[4] = {h * n * d, n * d, d, 1};
  int64_t shape[4] = {b, h, n, d};
  pair store[2], input;
  int32_t count = 2 * layers;
  kvc_copy_4d* dc = (kvc_copy_4d*)calloc((size_t)count, sizeof(kvc_copy_4d));
  kvc_copy_4d* hc = (kvc_copy_4d*)calloc((size_t)count, sizeof(kvc_copy_4d));
  memset(store, 0, sizeof store);
  memset(&input, 0, sizeof input);
  int ok = dc && hc && pair_make(&store[0], &place0, (size_t)(b * st[0]) * elem, 0) &&
           pair_make(&store[1], &place0, (size_t)(b * st[0]) * elem, 0) &&
           pair_make(&input, &place0, (size_t)(b * in[0]) * elem, 0);
  for (int32_t i = 0; ok && i < count; i++) {
    int32_t layer = i / 2, which = i % 2;
    kvc_copy_4d c;
    memset(&c, 0, sizeof c);
    memcpy(c.shape, shape, sizeof c.shape);
    memcpy(c.dst_strides, st, sizeof st);
    memcpy(c.src_strides, in, sizeof in);
    c.elem_size = elem;
    size_t slot = (size_t)(layer * n * d) * elem;
    dc[i] = hc[i] = c;
    dc[i].dst = store[which].d + slot;
    dc[i].src = input.d;
    hc[i].dst = store[which].h + slot;
    hc[i].src = input.h;
  }
  if (CHECK(ok)) {
    CHECK_EQ_I64(dev->copy_4d_batch(dev->ctx, &place0, dc, count), 0);
    CHECK_EQ_I64(cpu->copy_4d_batch(cpu->ctx, &cpu_place, hc, count), 0);
    CHECK_PAIR(&store[0], "keys of a batched step");
    CHECK_PAIR(&store[1], "values of a batched step");
  }
  pair_free(&store[0]);
  pair_free(&store[1]);
  pair_free(&input);
  free(dc);
  free(hc);
}

static void test_copy_4d_batch(void) {
  batch_of_buffers(0);
  batch_of_buffers(1);
  for (int it = 0; it < 12; it++) batch_of_buffers((int32_t)gt_range(2, 40));
  batch_of_layers(32, 1, 8, 1, 128, 2); /* a Llama-3-8B-like decode step */
  batch_of_layers(64, 2, 2, 3, 16, 4);
  batch_of_layers(5, 3, 4, 17, 33, 1);
  batch_of_layers(7, 1, 3, 2, 5, 8);
}

/* ------------------------------------------------------------ tier copies */

/* An offload (device -> host tier) or a prefetch (host tier -> device), then tier_wait, then a copy that reads it. */
static void tier_round(int to_host) {
  int64_t shape[4];
  random_shape(shape, 40, 64);
  size_t elem = random_elem();
  int64_t ss[4], ds[4], rs[4];
  int64_t sspan = random_layout(shape, ss, 0), dspan = random_layout(shape, ds, 0), rspan = random_layout(shape, rs, 0);
  pair src = {0}, dst = {0}, after = {0};
  int ok = pair_make(&src, &place0, (size_t)sspan * elem, !to_host) &&
           pair_make(&dst, &place0, (size_t)dspan * elem, to_host) &&
           pair_make(&after, &place0, (size_t)rspan * elem, 0);
  if (ok) {
    CHECK_EQ_I64(dev->copy_tier_4d(dev->ctx, &place0, to_host, dst.d, ds, src.d, ss, shape, elem), 0);
    CHECK_EQ_I64(cpu->copy_tier_4d(cpu->ctx, &cpu_place, to_host, dst.h, ds, src.h, ss, shape, elem), 0);
    CHECK_EQ_I64(dev->tier_wait(dev->ctx, &place0), 0);
    CHECK_EQ_I64(cpu->tier_wait(cpu->ctx, &cpu_place), 0);
    /* Work issued after tier_wait sees the copy's result. */
    CHECK_EQ_I64(dev->copy_4d(dev->ctx, &place0, after.d, rs, dst.d, ds, shape, elem), 0);
    CHECK_EQ_I64(cpu->copy_4d(cpu->ctx, &cpu_place, after.h, rs, dst.h, ds, shape, elem), 0);
    CHECK_PAIR(&dst, to_host ? "offload" : "prefetch");
    CHECK_PAIR(&after, to_host ? "read after an offload" : "read after a prefetch and tier_wait");
    CHECK_PAIR(&src, "tier copy source (unchanged)");
  }
  pair_free(&src);
  pair_free(&dst);
  pair_free(&after);
}

/* Several prefetches in flight, one tier_wait for all, then their buffers released. */
static void test_copy_tier(void) {
  for (int it = 0; it < 40; it++) tier_round(it % 2);
  enum { N = 6 };
  pair host[N], devb[N];
  memset(host, 0, sizeof host);
  memset(devb, 0, sizeof devb);
  int64_t shape[4] = {2, 4, 33, 64}, st[4] = {4 * 33 * 64, 33 * 64, 64, 1};
  size_t bytes = (size_t)(2 * st[0]) * 2;
  int ok = 1;
  for (int i = 0; i < N; i++)
    ok = ok && pair_make(&host[i], &place0, bytes, 1) && pair_make(&devb[i], &place0, bytes, 0);
  if (CHECK(ok)) {
    for (int i = 0; i < N; i++) {
      CHECK_EQ_I64(dev->copy_tier_4d(dev->ctx, &place0, 0, devb[i].d, st, host[i].d, st, shape, 2), 0);
      CHECK_EQ_I64(cpu->copy_tier_4d(cpu->ctx, &cpu_place, 0, devb[i].h, st, host[i].h, st, shape, 2), 0);
    }
    CHECK_EQ_I64(dev->tier_wait(dev->ctx, &place0), 0);
    for (int i = 0; i < N; i++) CHECK_PAIR(&devb[i], "one of several prefetches");
  }
  for (int i = 0; i < N; i++) {
    pair_free(&host[i]);
    pair_free(&devb[i]);
  }
  /* A host-tier buffer released while the prefetch that reads it may still run: the release waits for it. */
  pair h = {0}, d = {0};
  if (pair_make(&h, &place0, bytes, 1) && pair_make(&d, &place0, bytes, 0)) {
    unsigned char* expect = (unsigned char*)malloc(bytes);
    memcpy(expect, h.h, bytes);
    CHECK_EQ_I64(dev->copy_tier_4d(dev->ctx, &place0, 0, d.d, st, h.d, st, shape, 2), 0);
    pair_free(&h);
    CHECK_EQ_I64(dev->tier_wait(dev->ctx, &place0), 0);
    memcpy(d.h, expect, bytes); /* the whole buffer is the region, so the CPU copy is the source itself */
    CHECK_PAIR(&d, "prefetch whose source was released before tier_wait");
    free(expect);
  }
  pair_free(&h);
  pair_free(&d);
}

/* --------------------------------------------------------------- streams */

/* A place moved to another stream (and to the default one) keeps working, in order. */
static void test_streams(void) {
  kvc_exec place = {0, stream_a, NULL};
  REQUIRE(dev->exec_open(dev->ctx, &place) == 0);
  int64_t shape[4] = {2, 3, 17, 24}, st[4] = {3 * 17 * 24, 17 * 24, 24, 1};
  size_t bytes = (size_t)(2 * st[0]) * 4;
  pair a = {0}, b = {0};
  if (pair_make(&a, &place, bytes, 0) && pair_make(&b, &place, bytes, 0)) {
    void* order[3] = {stream_b, NULL, stream_a};
    for (int i = 0; i < 3; i++) {
      CHECK_EQ_I64(dev->exec_set_stream(dev->ctx, &place, order[i]), 0);
      CHECK_EQ_PTR(place.stream, order[i]);
      /* b <- a then a <- 0 then b read back: each op must see the one before, across the stream change */
      CHECK_EQ_I64(dev->copy_4d(dev->ctx, &place, b.d, st, a.d, st, shape, 4), 0);
      CHECK_EQ_I64(dev->fill_zero_4d(dev->ctx, &place, a.d, st, shape, 4), 0);
      CHECK_EQ_I64(cpu->copy_4d(cpu->ctx, &cpu_place, b.h, st, a.h, st, shape, 4), 0);
      CHECK_EQ_I64(cpu->fill_zero_4d(cpu->ctx, &cpu_place, a.h, st, shape, 4), 0);
      CHECK_EQ_I64(drt_stream_synchronize(0, place.stream), 0); /* the work was issued on the place's stream */
      CHECK_PAIR(&a, "zeroed after a stream change");
      CHECK_PAIR(&b, "copied after a stream change");
      gt_fill_random(a.h, bytes);
      CHECK(drt_upload(0, a.d, a.h, bytes, place.stream) == 0);
    }
  }
  pair_free(&a);
  pair_free(&b);
  dev->exec_close(dev->ctx, &place);
}

/* The same ops on device 1 with a place there, when the machine has a second device. */
static void test_second_device(void) {
  if (drt_device_count() < 2) {
    printf("  test_second_device: SKIPPED: one device\n");
    return;
  }
  void* s = drt_stream_create(1);
  REQUIRE(s != NULL);
  kvc_exec place = {1, s, NULL};
  REQUIRE(dev->exec_open(dev->ctx, &place) == 0);
  for (int it = 0; it < 20; it++) {
    int64_t shape[4];
    random_shape(shape, 30, 40);
    one_copy_4d(&place, shape, random_elem(), gt_range(0, 3) == 0, 0, 0);
  }
  dev->exec_close(dev->ctx, &place);
  drt_stream_destroy(1, s);
}

/* ---- Version 4: sink layers ---- */

static const kvc_dtype rope_dtypes[3] = {KVC_DTYPE_FLOAT32, KVC_DTYPE_FLOAT16, KVC_DTYPE_BFLOAT16};

/* Every device backend has the sink operations (optional in the table, but this project's backends all have them). */
static int has_sink_ops(const char* test) {
  if (CHECK(dev->rerotate_keys_4d && dev->read_f32_4d)) return 1;
  fprintf(stderr, "  %s: the %s backend has no RoPE operations of sink layers (NULL entries)\n", test, drt_name());
  return 0;
}

/*
 * rerotate_keys_4d on random keys of every dtype (random bytes: NaNs,
 * infinities and subnormals too), random rotary sizes (odd ones and past the
 * CPU backend's block of 64 pairs), rows padded past the rotary channels,
 * heads and batch in any order: every byte of the buffer, untouched ones
 * included, as the CPU backend leaves it.
 */
static void test_rerotate_keys(void) {
  if (!has_sink_ops("test_rerotate_keys")) return;
  for (int it = 0; it < 120; it++) {
    kvc_dtype dt = rope_dtypes[it % 3];
    size_t elem = kvc_dtype_size(dt);
    int64_t shape[4];
    random_shape(shape, 12, it % 4 == 0 ? 300 : 40);
    int64_t st[4];
    int64_t span = random_layout(shape, st, 0); /* channels innermost, stride 1, as in a store */
    int64_t off = gt_range(0, 5);
    int64_t table = shape[2] * shape[3];
    float *rc, *rs;
    pair keys;
    if (!floats_and_pair(&rc, &rs, (size_t)(table > 0 ? table : 1) * sizeof(float), &keys,
                         (size_t)(span + off) * elem))
      return;
    for (int64_t i = 0; i < table; i++) { /* already rounded to the key dtype, as the core passes them */
      uint32_t u[2] = {(uint32_t)gt_next(), (uint32_t)gt_next()};
      float f[2];
      for (int w = 0; w < 2; w++)
        f[w] = gt_range(0, 7) ? (float)((int32_t)u[w]) / 1e9f : kvci_f32_from_bits(u[w]);
      rc[i] = kvci_round_to(dt, f[0]);
      rs[i] = kvci_round_to(dt, f[1]);
    }
    CHECK_EQ_I64(dev->rerotate_keys_4d(dev->ctx, &place0, dt, keys.d + off * (int64_t)elem, st, shape, rc, rs), 0);
    CHECK_EQ_I64(cpu->rerotate_keys_4d(cpu->ctx, &cpu_place, dt, keys.h + off * (int64_t)elem, st, shape, rc, rs), 0);
    if (!CHECK_PAIR(&keys, "rerotate_keys_4d keys"))
      fprintf(stderr, "  dtype %d, shape {%lld, %lld, %lld, %lld}, strides {%lld, %lld, %lld, %lld}\n", (int)dt,
              (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3], (long long)st[0],
              (long long)st[1], (long long)st[2], (long long)st[3]);
    pair_free(&keys);
    free(rc);
    free(rs);
  }
}

/* read_f32_4d of random strided regions (any order, read backwards, broadcast dims) in every RoPE dtype. */
static void test_read_f32(void) {
  if (!has_sink_ops("test_read_f32")) return;
  for (int it = 0; it < 120; it++) {
    kvc_dtype dt = rope_dtypes[it % 3];
    size_t elem = kvc_dtype_size(dt);
    int64_t shape[4], ss[4];
    random_shape(shape, 20, 40);
    int64_t span = random_layout(shape, ss, 1);
    int64_t off = gt_range(0, 5) + maybe_reverse(shape, ss);
    if (shape[0] == 1 && gt_range(0, 1)) ss[0] = 0; /* a broadcast dim */
    int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
    size_t bytes = (size_t)(count > 0 ? count : 1) * sizeof(float);
    float *got, *want;
    pair src;
    if (!floats_and_pair(&got, &want, bytes, &src, (size_t)(span + off) * elem)) return;
    memset(got, 0xa5, bytes);
    memset(want, 0xa5, bytes);
    /* After work issued before on the stream: the read must see this fill's zeros. */
    const int64_t whole[4] = {1, 1, 1, span + off}, dense[4] = {0, 0, 0, 1};
    if (it % 5 == 0) {
      CHECK_EQ_I64(dev->fill_zero_4d(dev->ctx, &place0, src.d, dense, whole, elem), 0);
      CHECK_EQ_I64(cpu->fill_zero_4d(cpu->ctx, &cpu_place, src.h, dense, whole, elem), 0);
    }
    CHECK_EQ_I64(dev->read_f32_4d(dev->ctx, &place0, got, src.d + off * (int64_t)elem, dt, ss, shape), 0);
    CHECK_EQ_I64(cpu->read_f32_4d(cpu->ctx, &cpu_place, want, src.h + off * (int64_t)elem, dt, ss, shape), 0);
    if (!CHECK(!memcmp(got, want, bytes)))
      fprintf(stderr, "  dtype %d, shape {%lld, %lld, %lld, %lld}, strides {%lld, %lld, %lld, %lld}\n", (int)dt,
              (long long)shape[0], (long long)shape[1], (long long)shape[2], (long long)shape[3], (long long)ss[0],
              (long long)ss[1], (long long)ss[2], (long long)ss[3]);
    CHECK_PAIR(&src, "read_f32_4d source (unchanged)");
    pair_free(&src);
    free(got);
    free(want);
  }
}

int main(void) {
  gt_open_or_skip("test_gpu_backend_ops");
  cpu = kvci_cpu_backend();
  kvc_device where = {drt_device_type(), 0};
  kvc_error* e = kvci_backend_for("test_gpu_backend_ops", &where, &dev);
  if (e) {
    /* The runtime sees a device, so the plugin must load: this is a failure, not a skip. */
    printf("FAILED: the core found no backend for the device: %s\n", kvc_error_message(e));
    kvc_error_destroy(e);
    return 1;
  }
  stream_a = drt_stream_create(0);
  stream_b = drt_stream_create(0);
  place0.device_id = 0;
  place0.stream = stream_a;
  if (!stream_a || !stream_b || cpu->exec_open(cpu->ctx, &cpu_place) || dev->exec_open(dev->ctx, &place0)) {
    printf("FAILED: cannot prepare streams and places: %s\n", drt_error());
    return 1;
  }
  TU_RUN(test_table);
  TU_RUN(test_alloc_zeroed);
  TU_RUN(test_copy_4d_random);
  TU_RUN(test_copy_4d_large);
  TU_RUN(test_copy_4d_overlapping_moves);
  TU_RUN(test_fill_zero);
  TU_RUN(test_copy_rows);
  TU_RUN(test_copy_rows_bytes);
  TU_RUN(test_copy_4d_batch);
  TU_RUN(test_copy_rows_batch);
  TU_RUN(test_copy_tier);
  TU_RUN(test_streams);
  TU_RUN(test_second_device);
  TU_RUN(test_rerotate_keys);
  TU_RUN(test_read_f32);
  dev->exec_close(dev->ctx, &place0);
  cpu->exec_close(cpu->ctx, &cpu_place);
  drt_stream_destroy(0, stream_a);
  drt_stream_destroy(0, stream_b);
  return tu_finish();
}
