/*
 * tests/unit/rows_batch_cases.h: random copy_rows_batch cases shaped like a
 * paged pool's step write (abi/backend/backend.h, version 6), shared by the
 * CPU backend's test (unit/test_internal_rows_batch.c) and the device
 * backends' (gpu/test_gpu_backend_ops.c).
 *
 * A case is a step of `tokens` tokens written into the K and V storage of
 * every layer: storage in the pool's layouts (kvc_pool_layout: NHD
 * [blocks, block_size, heads, head_dim] or HND [blocks, heads, block_size,
 * head_dim], sometimes with padding), each layer's source a [tokens, heads,
 * head_dim] tensor with any dimension order, padding, or reversed token
 * axis. Layers belong to groups with their own block size and slot mapping;
 * a slot s becomes the row index copy_rows_batch takes: s itself in NHD
 * (row stride one slot), (s / bs) * heads * (bs + spare) + s % bs in HND
 * (row stride head_dim, head stride (bs + spare) * head_dim, `spare` unused
 * slots per head now and then: rbc_storage_layout). Slots are distinct and in random
 * order, source rows in order or shuffled; the jobs of a group share their
 * index arrays (as the pool passes them) or have copies of their own; some
 * jobs copy nothing (count 0 with NULL arrays, or an empty row).
 *
 * Buffers are described by size; a job's dst and src are byte offsets into
 * numbered buffers, bound to real pointers by rbc_bind, so each test places
 * them in its own memory (CPU or device). Static: include from one file.
 */
#ifndef KVC_TESTS_ROWS_BATCH_CASES_H
#define KVC_TESTS_ROWS_BATCH_CASES_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"

#if defined(__GNUC__) || defined(__clang__)
#define RBC_UNUSED __attribute__((unused))
#else
#define RBC_UNUSED
#endif

static uint64_t rbc_state = UINT64_C(0x9b6c1f3e2d4a5c87);

static uint64_t rbc_next(void) {
  rbc_state ^= rbc_state >> 12;
  rbc_state ^= rbc_state << 25;
  rbc_state ^= rbc_state >> 27;
  return rbc_state * UINT64_C(2685821657736338717);
}

/* Uniform in [lo, hi]. */
static int64_t rbc_range(int64_t lo, int64_t hi) { return lo + (int64_t)(rbc_next() % (uint64_t)(hi - lo + 1)); }

static void rbc_shuffle(int64_t* v, int64_t n) {
  for (int64_t i = n - 1; i > 0; i--) {
    int64_t j = rbc_range(0, i), t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/* How big a case is. */
typedef struct rbc_shape {
  int32_t layers;      /* each has a K and a V job */
  int64_t min_tokens;  /* 0: a few cases of 0 to 2 tokens among the others */
  int64_t max_tokens;
  int64_t max_heads;
  int64_t max_head_dim;
  int32_t max_groups;  /* at most 4 */
  size_t elem;         /* 0: random among 1, 2, 4, 8 */
} rbc_shape;

typedef struct rbc_case {
  int32_t nbufs;
  size_t* buf_bytes;
  int32_t njobs;
  kvc_copy_rows_job* jobs; /* dst and src are NULL until rbc_bind */
  int32_t* dst_buf;        /* per job: buffer ids and byte offsets of row 0's element [0, 0, 0, 0] */
  int32_t* src_buf;
  size_t* dst_off;
  size_t* src_off;
  int64_t** arrays;        /* every index array, owned */
  int32_t narrays;
  int64_t tokens;
  size_t elem;
  int hnd;
  int64_t rows;            /* rows copied, all jobs */
} rbc_case;

static int64_t* rbc_array(rbc_case* c, int64_t n) {
  int64_t* a = (int64_t*)malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
  c->arrays[c->narrays++] = a;
  return a;
}

static int32_t rbc_buffer(rbc_case* c, size_t bytes) {
  c->buf_bytes[c->nbufs] = bytes ? bytes : 1;
  return c->nbufs++;
}

/*
 * A [tokens, heads, head_dim] source: the three dims in a random order in
 * memory with a little padding, now and then the token axis reversed.
 * Writes the element strides (batch-row = token first, as copy_rows reads
 * them: {token, head, unused, dim}) and returns the buffer's elements;
 * *origin is the element where token 0 starts.
 */
static int64_t rbc_source_layout(int64_t tokens, int64_t heads, int64_t dim, int64_t st[4], int64_t* origin) {
  const int64_t n[3] = {tokens > 0 ? tokens : 1, heads, dim};
  int order[3] = {0, 1, 2}; /* outermost first */
  if (rbc_range(0, 2) == 0)
    for (int i = 2; i > 0; i--) {
      int j = (int)rbc_range(0, i), t = order[i];
      order[i] = order[j];
      order[j] = t;
    }
  int64_t stride[3], run = 1;
  for (int k = 2; k >= 0; k--) {
    stride[order[k]] = run;
    run = run * n[order[k]] + (rbc_range(0, 3) == 0 ? rbc_range(1, 3) : 0);
  }
  st[0] = stride[0];
  st[1] = stride[1];
  st[2] = stride[2] * dim; /* row_shape[2] is 1: never stepped */
  st[3] = stride[2];
  *origin = 0;
  if (rbc_range(0, 4) == 0) { /* token axis read backwards */
    *origin = (n[0] - 1) * st[0];
    st[0] = -st[0];
  }
  int64_t last = 0;
  for (int i = 0; i < 3; i++) last += (n[i] - 1) * stride[i];
  return last + 1;
}

/*
 * Storage of one layer's K or V in the pool's layout: `blocks` blocks of
 * `bs` slots, `heads` x `dim` each. NHD: sometimes padded between slots
 * (the row is a slot, so any padding keeps the rows); HND: `spare` unused
 * slots after each head's bs (a whole number of rows, so that a row index
 * still names a slot: rbc_slot_row). Writes the copy_rows strides and
 * returns the elements.
 */
static int64_t rbc_storage_layout(int hnd, int64_t blocks, int64_t bs, int64_t spare, int64_t heads, int64_t dim,
                                  int64_t st[4]) {
  if (!hnd) { /* row = slot: [slots, heads, dim] */
    const int64_t slot = heads * dim + (rbc_range(0, 3) == 0 ? rbc_range(1, 3) : 0);
    st[0] = slot;
    st[1] = dim;
    st[2] = slot;
    st[3] = 1;
    return blocks * bs * slot;
  }
  /* row r = block * heads * (bs + spare) + offset: row stride dim, head stride (bs + spare) * dim */
  st[0] = dim;
  st[1] = (bs + spare) * dim;
  st[2] = dim;
  st[3] = 1;
  return blocks * heads * (bs + spare) * dim;
}

/* The row index of slot s in a layout (rbc_storage_layout). */
static int64_t rbc_slot_row(int hnd, int64_t s, int64_t bs, int64_t spare, int64_t heads) {
  return hnd ? (s / bs) * heads * (bs + spare) + s % bs : s;
}

/* Frees everything a case owns. */
static void rbc_free(rbc_case* c) {
  for (int32_t i = 0; i < c->narrays; i++) free(c->arrays[i]);
  free(c->arrays);
  free(c->buf_bytes);
  free(c->jobs);
  free(c->dst_buf);
  free(c->src_buf);
  free(c->dst_off);
  free(c->src_off);
  memset(c, 0, sizeof *c);
}

/* A random step write of `s`'s size; 0 on out of memory. */
static int rbc_make(rbc_case* c, const rbc_shape* s) {
  static const size_t elems[4] = {1, 2, 4, 8};
  memset(c, 0, sizeof *c);
  const int32_t njobs = 2 * s->layers + 2;
  const int32_t ngroups = (int32_t)rbc_range(1, s->max_groups < 4 ? s->max_groups : 4);
  c->elem = s->elem ? s->elem : elems[rbc_range(0, 3)];
  c->hnd = (int)rbc_range(0, 1);
  c->tokens = !s->min_tokens && rbc_range(0, 7) == 0 ? rbc_range(0, 2)
                                                      : rbc_range(s->min_tokens > 1 ? s->min_tokens : 1, s->max_tokens);
  c->buf_bytes = (size_t*)calloc((size_t)(3 * njobs), sizeof(size_t));
  c->jobs = (kvc_copy_rows_job*)calloc((size_t)njobs, sizeof(kvc_copy_rows_job));
  c->dst_buf = (int32_t*)calloc((size_t)njobs, sizeof(int32_t));
  c->src_buf = (int32_t*)calloc((size_t)njobs, sizeof(int32_t));
  c->dst_off = (size_t*)calloc((size_t)njobs, sizeof(size_t));
  c->src_off = (size_t*)calloc((size_t)njobs, sizeof(size_t));
  c->arrays = (int64_t**)calloc((size_t)(4 * ngroups + 2 * njobs + 2), sizeof(int64_t*));
  if (!c->buf_bytes || !c->jobs || !c->dst_buf || !c->src_buf || !c->dst_off || !c->src_off || !c->arrays) return 0;

  /* Groups: a block size, enough blocks for the step (and a few more), distinct slots in random order. */
  int64_t bs[4], spare[4], blocks[4], *slots[4], *src_rows[4];
  for (int32_t g = 0; g < ngroups; g++) {
    bs[g] = rbc_range(0, 2) == 0 ? 1 : rbc_range(2, 16);
    spare[g] = rbc_range(0, 3) == 0 ? rbc_range(1, 2) : 0;
    blocks[g] = (c->tokens + bs[g] - 1) / bs[g] + rbc_range(1, 3);
    int64_t* all = rbc_array(c, blocks[g] * bs[g]);
    for (int64_t i = 0; i < blocks[g] * bs[g]; i++) all[i] = i;
    rbc_shuffle(all, blocks[g] * bs[g]);
    slots[g] = all; /* the first `tokens` entries */
    src_rows[g] = rbc_array(c, c->tokens);
    for (int64_t i = 0; i < c->tokens; i++) src_rows[g][i] = i;
    if (rbc_range(0, 2) == 0) rbc_shuffle(src_rows[g], c->tokens);
  }
  const int64_t heads = rbc_range(1, s->max_heads);
  int64_t* dst_rows[4];
  for (int32_t g = 0; g < ngroups; g++) {
    dst_rows[g] = rbc_array(c, c->tokens);
    for (int64_t i = 0; i < c->tokens; i++) dst_rows[g][i] = rbc_slot_row(c->hnd, slots[g][i], bs[g], spare[g], heads);
  }

  for (int32_t l = 0; l < s->layers; l++) {
    const int32_t g = (int32_t)rbc_range(0, ngroups - 1);
    for (int v = 0; v < 2; v++) {
      const int32_t i = c->njobs++;
      kvc_copy_rows_job* j = &c->jobs[i];
      int64_t dim = rbc_range(0, 1) ? 2 * rbc_range(0, s->max_head_dim / 2) + 1 : rbc_range(1, s->max_head_dim);
      if (dim > s->max_head_dim) dim = s->max_head_dim;
      j->row_shape[0] = 1;
      j->row_shape[1] = heads;
      j->row_shape[2] = 1;
      j->row_shape[3] = dim;
      j->elem_size = c->elem;
      c->dst_buf[i] = rbc_buffer(c, (size_t)rbc_storage_layout(c->hnd, blocks[g], bs[g], spare[g], heads, dim, j->dst_strides) *
                                         c->elem);
      int64_t origin = 0;
      c->src_buf[i] =
          rbc_buffer(c, (size_t)rbc_source_layout(c->tokens, heads, dim, j->src_strides, &origin) * c->elem);
      c->src_off[i] = (size_t)origin * c->elem;
      j->count = c->tokens;
      if (rbc_range(0, 3) == 0) { /* arrays of its own, equal to the group's: shared by value, not by pointer */
        int64_t* d = rbc_array(c, c->tokens);
        int64_t* r = rbc_array(c, c->tokens);
        memcpy(d, dst_rows[g], sizeof(int64_t) * (size_t)c->tokens);
        memcpy(r, src_rows[g], sizeof(int64_t) * (size_t)c->tokens);
        j->dst_rows = d;
        j->src_rows = r;
      } else {
        j->dst_rows = dst_rows[g];
        j->src_rows = src_rows[g];
      }
      c->rows += c->tokens;
    }
  }
  /* Jobs that copy nothing: count 0 with no arrays, and rows of no elements (any arrays). */
  for (int k = 0; k < 2; k++) {
    const int32_t i = c->njobs++;
    kvc_copy_rows_job* j = &c->jobs[i];
    *j = c->jobs[rbc_range(0, c->njobs - 2 > 0 ? c->njobs - 2 : 0)];
    c->dst_buf[i] = c->dst_buf[0];
    c->src_buf[i] = c->src_buf[0];
    c->dst_off[i] = c->dst_off[0];
    c->src_off[i] = c->src_off[0];
    if (k == 0) {
      j->count = 0;
      j->dst_rows = j->src_rows = NULL;
    } else {
      j->row_shape[3] = 0;
    }
  }
  /* Jobs in a random order: the empty ones anywhere among them. */
  for (int32_t i = c->njobs - 1; i > 0; i--) {
    int32_t k = (int32_t)rbc_range(0, i);
    kvc_copy_rows_job tj = c->jobs[i];
    int32_t td = c->dst_buf[i], ts = c->src_buf[i];
    size_t od = c->dst_off[i], os = c->src_off[i];
    c->jobs[i] = c->jobs[k];
    c->dst_buf[i] = c->dst_buf[k];
    c->src_buf[i] = c->src_buf[k];
    c->dst_off[i] = c->dst_off[k];
    c->src_off[i] = c->src_off[k];
    c->jobs[k] = tj;
    c->dst_buf[k] = td;
    c->src_buf[k] = ts;
    c->dst_off[k] = od;
    c->src_off[k] = os;
  }
  return 1;
}

/* Jobs with real pointers: buffer i starts at bufs[i]. `out` has c->njobs entries. */
static void rbc_bind(const rbc_case* c, unsigned char* const* bufs, kvc_copy_rows_job* out) {
  for (int32_t i = 0; i < c->njobs; i++) {
    out[i] = c->jobs[i];
    out[i].dst = bufs[c->dst_buf[i]] + c->dst_off[i];
    out[i].src = bufs[c->src_buf[i]] + c->src_off[i];
  }
}

/* The plain reference: element by element, job by job (strides in elements, any sign). Not every test needs it. */
RBC_UNUSED static void rbc_reference(const kvc_copy_rows_job* jobs, int32_t count) {
  for (int32_t i = 0; i < count; i++) {
    const kvc_copy_rows_job* j = &jobs[i];
    const int64_t e = (int64_t)j->elem_size;
    for (int64_t r = 0; r < j->count; r++)
      for (int64_t h = 0; h < j->row_shape[1]; h++)
        for (int64_t t = 0; t < j->row_shape[2]; t++)
          for (int64_t d = 0; d < j->row_shape[3]; d++) {
            const int64_t di = j->dst_rows[r] * j->dst_strides[0] + h * j->dst_strides[1] + t * j->dst_strides[2] +
                               d * j->dst_strides[3];
            const int64_t si = j->src_rows[r] * j->src_strides[0] + h * j->src_strides[1] + t * j->src_strides[2] +
                               d * j->src_strides[3];
            memcpy((char*)j->dst + di * e, (const char*)j->src + si * e, (size_t)e);
          }
  }
}

#endif /* KVC_TESTS_ROWS_BATCH_CASES_H */
