/*
 * backends/gpu/gpu_plan_walk.c: the kernels' walks over their plans, on the
 * CPU (gpu_plan_walk.h). Each walk is the loop structure of its kernel
 * (kernels_common.cuh, kernels_batch.cuh, kernels_rows.cuh,
 * kernels_copy.cuh) with a visit where the kernel loads and stores, and it
 * takes every block's share, row and chunk from the gpu_plan.h functions
 * the kernels call.
 */
#include "gpu_plan_walk.h"

#include <inttypes.h>
#include <stdio.h>

static void barrier(kvc_gpu_visit visit, void* ctx) { visit(ctx, NULL, NULL, 0); }

/* gpu_run_share: block `local` of plan p. */
static void walk_share(const kvc_gpu_copy* p, uint32_t local, kvc_gpu_visit visit, void* ctx) {
  int64_t row0;
  int32_t nrows, u0, u1;
  kvc_gpu_block_share(p, local, &row0, &nrows, &u0, &u1);
  int32_t i0, i1, i2;
  kvc_gpu_row_coords(p, row0, &i0, &i1, &i2);
  const int64_t dsu = p->dst_stride[3], ssu = p->src_stride[3];
  if (nrows == 1) {
    char* d = p->dst + i0 * p->dst_stride[0] + i1 * p->dst_stride[1] + i2 * p->dst_stride[2];
    const char* s = p->src ? p->src + i0 * p->src_stride[0] + i1 * p->src_stride[1] + i2 * p->src_stride[2] : NULL;
    /* The kernel's 64-bit unit counter (kernels_common.cuh): a row may reach 2^31 - 1 units. */
    for (int64_t u = u0; u < u1; u++) visit(ctx, d + u * dsu, s ? s + u * ssu : NULL, p->unit);
    return;
  }
  const int64_t units = u1 - u0;
  for (int32_t r = 0; r < nrows; r++) {
    int32_t j0 = i0, j1 = i1, j2 = i2;
    kvc_gpu_row_advance(p, r, &j0, &j1, &j2);
    char* d = p->dst + j0 * p->dst_stride[0] + j1 * p->dst_stride[1] + j2 * p->dst_stride[2];
    const char* s = p->src ? p->src + j0 * p->src_stride[0] + j1 * p->src_stride[1] + j2 * p->src_stride[2] : NULL;
    for (int64_t u = 0; u < units; u++) visit(ctx, d + u * dsu, s ? s + u * ssu : NULL, p->unit);
  }
}

void kvc_gpu_walk_plan(const kvc_gpu_copy* p, kvc_gpu_visit visit, void* ctx) {
  const uint32_t blocks = kvc_gpu_plan_blocks(p);
  for (uint32_t block = 0; block < blocks; block++) walk_share(p, block, visit, ctx);
}

void kvc_gpu_walk_batch(const kvc_gpu_copy* plans, int32_t count, uint32_t blocks, kvc_gpu_visit visit, void* ctx) {
  if (count <= 0) return;
  for (uint32_t block = 0; block < blocks; block++) {
    int32_t i = kvc_gpu_batch_find(plans, count, block);
    walk_share(&plans[i], block - plans[i].first_block, visit, ctx);
  }
}

void kvc_gpu_walk_rows(const kvc_gpu_rows* r, const int64_t* dst_rows, const int64_t* src_rows, int64_t count,
                       kvc_gpu_visit visit, void* ctx) {
  const uint32_t blocks = kvc_gpu_plan_blocks(&r->plan);
  for (int64_t i = 0; i < count; i++) {
    kvc_gpu_copy row = kvc_gpu_rows_pair(r, (int32_t)dst_rows[i], (int32_t)src_rows[i]);
    for (uint32_t block = 0; block < blocks; block++) walk_share(&row, block, visit, ctx);
  }
}

void kvc_gpu_walk_rows_batch(const kvc_gpu_rows_job* jobs, int32_t count, const int32_t* index, uint32_t blocks,
                             kvc_gpu_visit visit, void* ctx) {
  if (count <= 0) return;
  for (uint32_t block = 0; block < blocks; block++) {
    const kvc_gpu_rows_job* j = &jobs[kvc_gpu_rows_batch_find(jobs, count, block)];
    int32_t pair0, npairs;
    uint32_t plan_block;
    kvc_gpu_rows_job_share(j, block - j->first_block, &pair0, &npairs, &plan_block);
    if (j->pairs_per_block == 1) {
      kvc_gpu_copy p = kvc_gpu_rows_job_pair(j, index, pair0);
      walk_share(&p, plan_block, visit, ctx);
      continue;
    }
    const int32_t total = npairs * kvc_gpu_rows_job_units(j);
    for (int32_t t = 0; t < total; t++) {
      char* d;
      const char* s;
      kvc_gpu_rows_job_unit(j, index, pair0, t, &d, &s);
      visit(ctx, d, s, j->rows.plan.unit);
    }
  }
}

void kvc_gpu_walk_move(const kvc_gpu_copy* p, int64_t shift, char* stage, kvc_gpu_visit visit, void* ctx) {
  int32_t chunk_rows;
  int staged;
  kvc_gpu_move_chunking(p, shift, &chunk_rows, &staged);
  const int32_t rows = p->n[2], units = p->n[3], unit = p->unit;
  const int32_t chunks = (rows + chunk_rows - 1) / chunk_rows;
  const int64_t planes = (int64_t)p->n[0] * p->n[1];
  for (int64_t plane = 0; plane < planes; plane++) {
    int64_t i0 = plane / p->n[1], i1 = plane - i0 * p->n[1];
    char* d = p->dst + i0 * p->dst_stride[0] + i1 * p->dst_stride[1];
    const char* s = p->src + i0 * p->src_stride[0] + i1 * p->src_stride[1];
    for (int32_t c = 0; c < chunks; c++) {
      int32_t a, b;
      kvc_gpu_move_chunk(rows, chunk_rows, shift, c, &a, &b);
      const int64_t total = (int64_t)(b - a) * units; /* 64-bit, as the move kernel counts */
      for (int64_t t = 0; t < total; t++) {
        int64_t r = a + t / units, u = t % units;
        char* to = staged ? stage + (int64_t)t * unit : d + r * p->dst_stride[2] + u * p->dst_stride[3];
        visit(ctx, to, s + r * p->src_stride[2] + u * p->src_stride[3], unit);
      }
      if (staged) {
        barrier(visit, ctx);
        for (int64_t t = 0; t < total; t++) {
          int64_t r = a + t / units, u = t % units;
          visit(ctx, d + r * p->dst_stride[2] + u * p->dst_stride[3], stage + (int64_t)t * unit, unit);
        }
      }
      barrier(visit, ctx);
    }
  }
}

/* ---- the alignment check ---------------------------------------------------- */

typedef struct check {
  const char* stage; /* the move kernel's shared memory, or NULL */
  uint64_t accesses;
  int bad;
  char* why;
  size_t why_size;
} check;

static void check_address(check* c, const char* operand, const char* addr, int32_t unit) {
  c->accesses++;
  if (c->bad) return;
  const uintptr_t at = (uintptr_t)addr, stage = (uintptr_t)c->stage;
  if (c->stage && at >= stage && at < stage + KVC_GPU_STAGE_BYTES) {
    if (at + (uintptr_t)unit > stage + KVC_GPU_STAGE_BYTES) {
      c->bad = 1;
      snprintf(c->why, c->why_size, "a %d-byte unit at byte %d of the move kernel's %d-byte stage runs past its end",
               (int)unit, (int)(at - stage), KVC_GPU_STAGE_BYTES);
      return;
    }
    operand = "stage";
  }
  if ((uintptr_t)addr % (uintptr_t)unit == 0) return;
  c->bad = 1;
  snprintf(c->why, c->why_size,
           "misaligned plan: access %" PRIu64 " of the kernel is a %d-byte unit at %s address %#" PRIxPTR
           ", which is %d bytes past a multiple of %d",
           c->accesses - 1, (int)unit, operand, (uintptr_t)addr, (int)((uintptr_t)addr % (uintptr_t)unit),
           (int)unit);
}

static void check_visit(void* ctx, char* dst, const char* src, int32_t unit) {
  check* c = (check*)ctx;
  if (unit == 0) return; /* a barrier */
  if (src) check_address(c, "src", src, unit);
  check_address(c, "dst", dst, unit);
}

static int unit_is_a_load(int32_t unit, char* why, size_t why_size) {
  if (unit == 1 || unit == 2 || unit == 4 || unit == 8 || unit == 16) return 1;
  snprintf(why, why_size, "misaligned plan: its unit is %d bytes; the kernels load 1, 2, 4, 8 or 16", (int)unit);
  return 0;
}

int kvc_gpu_check_plan(const kvc_gpu_copy* p, char* why, size_t why_size) {
  if (!unit_is_a_load(p->unit, why, why_size)) return -1;
  check c = {NULL, 0, 0, why, why_size};
  kvc_gpu_walk_plan(p, check_visit, &c);
  return c.bad ? -1 : 0;
}

int kvc_gpu_check_batch(const kvc_gpu_copy* plans, int32_t count, uint32_t blocks, char* why, size_t why_size) {
  for (int32_t i = 0; i < count; i++)
    if (!unit_is_a_load(plans[i].unit, why, why_size)) return -1;
  check c = {NULL, 0, 0, why, why_size};
  kvc_gpu_walk_batch(plans, count, blocks, check_visit, &c);
  return c.bad ? -1 : 0;
}

int kvc_gpu_check_rows(const kvc_gpu_rows* r, const int64_t* dst_rows, const int64_t* src_rows, int64_t count,
                       char* why, size_t why_size) {
  if (!unit_is_a_load(r->plan.unit, why, why_size)) return -1;
  check c = {NULL, 0, 0, why, why_size};
  kvc_gpu_walk_rows(r, dst_rows, src_rows, count, check_visit, &c);
  return c.bad ? -1 : 0;
}

int kvc_gpu_check_rows_batch(const kvc_gpu_rows_batch* b, char* why, size_t why_size) {
  for (int32_t i = 0; i < b->njobs; i++)
    if (!unit_is_a_load(b->jobs[i].rows.plan.unit, why, why_size)) return -1;
  check c = {NULL, 0, 0, why, why_size};
  kvc_gpu_walk_rows_batch(b->jobs, b->njobs, b->index, b->blocks, check_visit, &c);
  return c.bad ? -1 : 0;
}

int kvc_gpu_check_move(const kvc_gpu_copy* p, int64_t shift, char* why, size_t why_size) {
  if (!unit_is_a_load(p->unit, why, why_size)) return -1;
  /* Never dereferenced: the addresses of a stage placed like the kernel's (16-byte aligned). */
  static _Alignas(16) char stage[KVC_GPU_STAGE_BYTES];
  check c = {stage, 0, 0, why, why_size};
  kvc_gpu_walk_move(p, shift, stage, check_visit, &c);
  return c.bad ? -1 : 0;
}
